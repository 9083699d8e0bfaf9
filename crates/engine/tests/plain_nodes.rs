//! Lists under a lowered packed threshold (DEBUG QUICKLIST-PACKED-THRESHOLD):
//! an entry of at least the threshold gets a node of its own, whatever the
//! fill, and no other entry joins it, as Redis's plain nodes. The
//! threshold is one for the whole process, so these tests live in a
//! binary of their own and take turns.

use std::collections::VecDeque;
use std::sync::Mutex;

use keel_engine::list::{set_packed_threshold, List};
use proptest::prelude::*;

/// The threshold the tests set; entries this long or longer are large.
const THRESHOLD: usize = 16;

static TURN: Mutex<()> = Mutex::new(());

fn with_threshold<T>(f: impl FnOnce() -> T) -> T {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    assert!(set_packed_threshold(THRESHOLD as u64));
    let out = f();
    assert!(set_packed_threshold(0));
    out
}

fn large(c: u8) -> Vec<u8> {
    vec![c; THRESHOLD]
}

fn items(list: &List) -> Vec<Vec<u8>> {
    list.iter().map(<[u8]>::to_vec).collect()
}

#[test]
fn the_threshold_is_bounded_as_in_redis() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    assert!(!set_packed_threshold((1 << 32) - (1 << 20) + 1));
    assert!(set_packed_threshold((1 << 32) - (1 << 20)));
    assert!(set_packed_threshold(0));
}

#[test]
fn large_entries_get_nodes_of_their_own() {
    with_threshold(|| {
        // A fill of 128 entries would put all of these in one node.
        let mut l = List::new(128);
        for c in [b'a', b'b', b'c'] {
            l.push_front(&large(c));
        }
        assert_eq!(l.node_count(), 3);
        l.push_back(b"small");
        l.push_back(b"small");
        assert_eq!(l.node_count(), 4, "small entries share a node, not a large one's");
        // LSET of a large entry into the small entries' node splits it.
        assert!(l.set(3, &large(b'x')));
        assert_eq!(l.node_count(), 5);
        // LINSERT of a large entry between two small ones splits their node.
        let mut m = List::new(128);
        for e in [&b"1"[..], b"2", b"3"] {
            m.push_back(e);
        }
        assert!(m.insert(b"2", &large(b'y'), true));
        assert_eq!(m.node_count(), 3);
        assert_eq!(items(&m), vec![b"1".to_vec(), b"2".to_vec(), large(b'y'), b"3".to_vec()]);
        // Removing around a large entry merges the small ones only.
        assert_eq!(m.remove(&large(b'y'), 0), 1);
        assert_eq!(m.node_count(), 1);
        m.push_back(&large(b'z'));
        m.remove_range(0, 1);
        assert_eq!(m.node_count(), 2);
    });
}

#[test]
fn the_default_threshold_leaves_entries_packed() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut l = List::new(128);
    for c in [b'a', b'b', b'c'] {
        l.push_back(&large(c));
    }
    assert_eq!(l.node_count(), 1);
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(b'a'..b'c', 0..3), (b'a'..b'c').prop_map(large)]
}

proptest! {
    /// Any mix of operations keeps the contents of a deque, and every
    /// large entry alone: at least one node per large entry, and one more
    /// when small entries are there too.
    #[test]
    fn lists_with_large_entries_match_a_deque(
        ops in prop::collection::vec((0u8..6, any::<u8>(), data()), 0..60),
    ) {
        with_threshold(|| -> Result<(), TestCaseError> {
            let mut list = List::new(128);
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for (op, n, data) in ops {
                let at = usize::from(n) % model.len().max(1);
                match op {
                    0 => { list.push_back(&data); model.push_back(data); }
                    1 => { list.push_front(&data); model.push_front(data); }
                    2 => {
                        prop_assert_eq!(list.set(at as i64, &data), !model.is_empty());
                        if !model.is_empty() { model[at] = data; }
                    }
                    3 => {
                        let pivot = model.get(at).cloned().unwrap_or_default();
                        let found = model.iter().position(|e| *e == pivot);
                        prop_assert_eq!(list.insert(&pivot, &data, n % 2 == 0), found.is_some());
                        if let Some(p) = found { model.insert(p + usize::from(n % 2 == 0), data); }
                    }
                    4 => {
                        let removed = list.remove(&data, 0);
                        let before = model.len();
                        model.retain(|e| *e != data);
                        prop_assert_eq!(removed, before - model.len());
                    }
                    _ => {
                        let count = usize::from(n % 4);
                        list.remove_range(at, count);
                        let end = (at + count).min(model.len());
                        if at < end { model.drain(at..end); }
                    }
                }
                prop_assert_eq!(items(&list), model.iter().cloned().collect::<Vec<_>>());
                let larges = model.iter().filter(|e| e.len() >= THRESHOLD).count();
                let smalls = usize::from(model.len() > larges);
                prop_assert!(list.node_count() >= larges + smalls, "{} nodes for {larges} large entries", list.node_count());
            }
            Ok(())
        })?;
    }
}
