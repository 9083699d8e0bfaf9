//! What each connection sends next: memtier_benchmark's request sequence
//! (a sets, then b gets, per `--ratio a:b`; MGET batches with
//! `--multi-key-get`; arbitrary `--command`s in turn, each `--command-ratio`
//! times), with keys, sizes and expiries from the generators.
//!
//! Requests are encoded straight into the connection's write buffer; the
//! only per-request state kept is the small [`ReqMeta`].

use std::sync::Arc;

use crate::config::{ArbCommand, Config, KeyPattern, Piece, Protocol};
use crate::gen::{KeyGen, Random, SizeGen};
use crate::protocol::{self, Key};

/// Stats slot of SET requests (and the first table row).
pub const SLOT_SET: u8 = 0;
/// Stats slot of GET/MGET requests.
pub const SLOT_GET: u8 = 1;

/// What a request was, for accounting its reply.
#[derive(Clone, Copy, Debug)]
pub struct ReqMeta {
    pub slot: u8,
    /// Keys read (for misses = keys - hits).
    pub keys: u16,
    /// true for reads, whose replies count hits and misses.
    pub read: bool,
    pub tx_bytes: u32,
}

/// Values are slices of one buffer per thread. With `-R` the buffer is
/// random bytes and each value starts at a random offset, so consecutive
/// values differ without generating bytes per request.
pub struct Values {
    buf: Vec<u8>,
    random: bool,
}

/// Slack past the largest value, so random offsets have room.
const VALUE_SLACK: usize = 4096;

impl Values {
    pub fn new(cfg: &Config, seed: u64) -> Values {
        let mut largest = cfg.data.sizes.largest() as usize;
        for c in &cfg.commands {
            if c.args.iter().flatten().any(|p| *p == Piece::Data) {
                largest = largest.max(cfg.data.sizes.largest() as usize);
            }
        }
        let len = largest + VALUE_SLACK;
        let mut buf = vec![b'x'; len];
        if cfg.data.random {
            Random::new(seed ^ 0x5eed_da7a).fill(&mut buf);
            // memcached's text protocol is length-delimited, so any byte
            // is fine; RESP bulk strings are too.
        }
        Values { buf, random: cfg.data.random }
    }

    #[inline]
    pub fn get(&self, len: usize, r: &mut Random) -> &[u8] {
        let off = if self.random { r.range(0, VALUE_SLACK as u64) as usize } else { 0 };
        &self.buf[off..off + len]
    }
}

/// Per-connection request generator.
pub struct Workload {
    cfg: Arc<Config>,
    rng: Random,
    keys: KeyGen,
    sizes: SizeGen,
    sets_done: u32,
    gets_done: u32,
    /// Arbitrary commands: current index and how often it ran in a row.
    arb_index: usize,
    arb_count: u32,
    arb_slots: Vec<u8>,
    mget: Vec<u64>,
}

impl Workload {
    /// `client` is the connection's global index, `clients` the total.
    pub fn new(cfg: Arc<Config>, client: u64, clients: u64) -> Workload {
        let seed = if cfg.distinct_client_seed { cfg.seed + client } else { cfg.seed };
        let parallel = if cfg.commands.is_empty() {
            cfg.keys.set_pattern == KeyPattern::Parallel
        } else {
            cfg.commands[0].key_pattern == KeyPattern::Parallel
        };
        let zipf = cfg.keys.set_pattern == KeyPattern::Zipf
            || cfg.keys.get_pattern == KeyPattern::Zipf
            || cfg.commands.iter().any(|c| c.key_pattern == KeyPattern::Zipf);
        let iterators = cfg.commands.len().max(2);
        let keys = KeyGen::new(&cfg.keys, iterators, parallel.then_some((client % clients, clients)), zipf);
        let sizes = SizeGen::new(&cfg.data.sizes, cfg.data.size_by_key, cfg.keys.min, cfg.keys.max);
        let arb_slots = (0..cfg.commands.len()).map(|i| cfg.command_slot(i) as u8).collect();
        let mget = Vec::with_capacity(cfg.multi_key_get as usize);
        Workload {
            rng: Random::new(seed),
            keys,
            sizes,
            sets_done: 0,
            gets_done: 0,
            arb_index: 0,
            arb_count: 0,
            arb_slots,
            mget,
            cfg,
        }
    }

    /// Appends the next request to `buf`.
    pub fn next(&mut self, buf: &mut Vec<u8>, values: &Values) -> ReqMeta {
        let before = buf.len();
        let mut meta = if self.cfg.commands.is_empty() { self.next_set_get(buf, values) } else { self.next_arbitrary(buf, values) };
        meta.tx_bytes = (buf.len() - before) as u32;
        meta
    }

    fn next_set_get(&mut self, buf: &mut Vec<u8>, values: &Values) -> ReqMeta {
        let (a, b) = self.cfg.ratio;
        if self.sets_done >= a && self.gets_done >= b {
            self.sets_done = 0;
            self.gets_done = 0;
        }
        let p = self.cfg.protocol;
        let prefix = self.cfg.keys.prefix.as_bytes();
        if self.sets_done < a {
            self.sets_done += 1;
            let index = self.keys.next(self.cfg.keys.set_pattern, 0, &mut self.rng);
            let len = self.sizes.next(index, &mut self.rng) as usize;
            let (emin, emax) = self.cfg.data.expiry;
            let expiry = if emax > 0 { self.rng.range(u64::from(emin), u64::from(emax)) as u32 } else { 0 };
            let value = values.get(len, &mut self.rng);
            protocol::encode_set(p, buf, Key { prefix, index }, value, expiry);
            return ReqMeta { slot: SLOT_SET, keys: 1, read: false, tx_bytes: 0 };
        }
        let m = self.cfg.multi_key_get;
        if m == 0 {
            self.gets_done += 1;
            let index = self.keys.next(self.cfg.keys.get_pattern, 1, &mut self.rng);
            protocol::encode_get(p, buf, Key { prefix, index });
            return ReqMeta { slot: SLOT_GET, keys: 1, read: true, tx_bytes: 0 };
        }
        let n = (b - self.gets_done).min(m).max(1);
        self.gets_done = self.gets_done.saturating_add(m);
        self.mget.clear();
        for _ in 0..n {
            let k = self.keys.next(self.cfg.keys.get_pattern, 1, &mut self.rng);
            self.mget.push(k);
        }
        protocol::encode_mget(p, buf, prefix, &self.mget);
        ReqMeta { slot: SLOT_GET, keys: n as u16, read: true, tx_bytes: 0 }
    }

    fn next_arbitrary(&mut self, buf: &mut Vec<u8>, values: &Values) -> ReqMeta {
        let cfg = Arc::clone(&self.cfg);
        let i = self.arb_index;
        let cmd: &ArbCommand = &cfg.commands[i];
        self.arb_count += 1;
        if self.arb_count >= cmd.ratio {
            self.arb_count = 0;
            self.arb_index = (i + 1) % cfg.commands.len();
        }
        let prefix = cfg.keys.prefix.as_bytes();
        debug_assert!(cfg.protocol != Protocol::MemcacheText);
        protocol::put_array(buf, cmd.args.len());
        for arg in &cmd.args {
            // Choose this argument's key and value first: the bulk header needs the length.
            let mut key = None;
            let mut data_len = 0usize;
            let mut len = 0usize;
            for piece in arg {
                match piece {
                    Piece::Lit(l) => len += l.len(),
                    Piece::Key => {
                        let index = self.keys.next(cmd.key_pattern, i, &mut self.rng);
                        let k = Key { prefix, index };
                        len += k.len();
                        key = Some(k);
                    }
                    Piece::Data => {
                        data_len = self.sizes.next(0, &mut self.rng) as usize;
                        len += data_len;
                    }
                }
            }
            protocol::put_bulk_header(buf, len);
            for piece in arg {
                match piece {
                    Piece::Lit(l) => buf.extend_from_slice(l),
                    Piece::Key => {
                        if let Some(k) = key {
                            k.write(buf);
                        }
                    }
                    Piece::Data => buf.extend_from_slice(values.get(data_len, &mut self.rng)),
                }
            }
            buf.extend_from_slice(b"\r\n");
        }
        ReqMeta { slot: self.arb_slots[i], keys: 0, read: false, tx_bytes: 0 }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli;

    fn cfg(args: &[&str]) -> Arc<Config> {
        let mut v = vec!["keel-bench"];
        v.extend_from_slice(args);
        Arc::new(Config::from_options(&cli::parse(v).unwrap()).unwrap())
    }

    fn run(c: &Arc<Config>, n: usize) -> (Vec<ReqMeta>, Vec<u8>) {
        let values = Values::new(c, 0);
        let mut w = Workload::new(Arc::clone(c), 0, 1);
        let mut buf = Vec::new();
        let metas = (0..n).map(|_| w.next(&mut buf, &values)).collect();
        (metas, buf)
    }

    #[test]
    fn ratio_sequence_matches_memtier() {
        let c = cfg(&["--ratio", "2:3"]);
        let (m, _) = run(&c, 10);
        let slots: Vec<u8> = m.iter().map(|m| m.slot).collect();
        assert_eq!(slots, vec![0, 0, 1, 1, 1, 0, 0, 1, 1, 1]);
        let c = cfg(&["--ratio", "0:1"]);
        assert!(run(&c, 5).0.iter().all(|m| m.slot == SLOT_GET));
    }

    #[test]
    fn ratio_holds_statistically_with_sizes_in_range() {
        let c = cfg(&["--ratio", "1:9", "--data-size-range", "100-1000", "-R"]);
        let (m, _) = run(&c, 10_000);
        let sets = m.iter().filter(|m| m.slot == SLOT_SET).count();
        assert_eq!(sets, 1000);
        for s in m.iter().filter(|m| m.slot == SLOT_SET) {
            // *3 $3 SET $<klen> key $<vlen> value: value 100..1000 bytes.
            assert!(s.tx_bytes > 100 && s.tx_bytes < 1100, "{}", s.tx_bytes);
        }
    }

    /// The RESP commands in `buf`, each as its arguments.
    fn commands(buf: &[u8]) -> Vec<Vec<Vec<u8>>> {
        fn line<'a>(buf: &'a [u8], pos: &mut usize) -> &'a [u8] {
            let end = *pos + buf[*pos..].windows(2).position(|w| w == b"\r\n").unwrap();
            let l = &buf[*pos..end];
            *pos = end + 2;
            l
        }
        let num = |l: &[u8]| -> usize { std::str::from_utf8(&l[1..]).unwrap().parse().unwrap() };
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < buf.len() {
            let n = num(line(buf, &mut pos));
            let args = (0..n)
                .map(|_| {
                    let len = num(line(buf, &mut pos));
                    let arg = buf[pos..pos + len].to_vec();
                    pos += len + 2;
                    arg
                })
                .collect();
            out.push(args);
        }
        out
    }

    /// The index in a key "memtier-<index>".
    fn key_index(key: &[u8]) -> u64 {
        std::str::from_utf8(key).unwrap().strip_prefix("memtier-").unwrap().parse().unwrap()
    }

    #[test]
    fn ratio_and_each_commands_key_pattern_over_a_run() {
        let c = cfg(&["--ratio", "3:7", "--key-pattern", "S:R", "--key-maximum", "999"]);
        let (_, buf) = run(&c, 100_000);
        let cmds = commands(&buf);
        let sets: Vec<u64> = cmds.iter().filter(|a| a[0] == b"SET").map(|a| key_index(&a[1])).collect();
        let gets: Vec<u64> = cmds.iter().filter(|a| a[0] == b"GET").map(|a| key_index(&a[1])).collect();
        assert_eq!((sets.len(), gets.len()), (30_000, 70_000));
        // SETs walk the range in order and wrap.
        assert!(sets.iter().enumerate().all(|(i, &k)| k == i as u64 % 1000));
        // GETs are uniform: 7000 a decile, standard error 79.
        let mut deciles = [0u32; 10];
        for k in gets {
            deciles[(k / 100) as usize] += 1;
        }
        assert!(deciles.iter().all(|d| (6_600..7_400).contains(d)), "{deciles:?}");
    }

    #[test]
    fn parallel_pattern_gives_each_client_its_own_sequential_slice() {
        let c = cfg(&["-t", "1", "-c", "3", "--key-pattern", "P:P", "--key-minimum", "1", "--key-maximum", "99", "--ratio", "1:0", "-n", "allkeys"]);
        assert_eq!(c.limit, crate::config::Limit::Requests(33));
        let values = Values::new(&c, 0);
        let mut all = Vec::new();
        for client in 0..3 {
            let mut w = Workload::new(Arc::clone(&c), client, 3);
            let mut buf = Vec::new();
            for _ in 0..33 {
                w.next(&mut buf, &values);
            }
            let keys: Vec<u64> = commands(&buf).iter().map(|a| key_index(&a[1])).collect();
            let first = 1 + 33 * client;
            assert_eq!(keys, (first..first + 33).collect::<Vec<_>>(), "client {client}");
            all.extend(keys);
        }
        all.sort_unstable();
        assert_eq!(all, (1..=99).collect::<Vec<_>>(), "every key exactly once");
    }

    #[test]
    fn zipf_exponent_option_shapes_the_keys() {
        let c = cfg(&["--key-pattern", "Z:Z", "--key-zipf-exp", "1.5", "--key-minimum", "1", "--key-maximum", "1000", "--ratio", "0:1"]);
        let (_, buf) = run(&c, 100_000);
        let mut counts = vec![0u64; 1001];
        for a in commands(&buf) {
            counts[key_index(&a[1]) as usize] += 1;
        }
        let fitted = crate::gen::tests::fitted_zipf_exponent(&counts[1..=20]);
        assert!((fitted - 1.5).abs() < 0.05, "fitted {fitted}");
    }

    #[test]
    fn data_size_list_weights_hold_over_a_run() {
        let c = cfg(&["--data-size-list", "10:2,20:1,40:3", "--ratio", "1:0"]);
        let (_, buf) = run(&c, 6000);
        let mut by_size = std::collections::BTreeMap::new();
        for a in commands(&buf) {
            *by_size.entry(a[2].len()).or_insert(0) += 1;
        }
        assert_eq!(by_size.into_iter().collect::<Vec<_>>(), vec![(10, 2000), (20, 1000), (40, 3000)]);
    }

    #[test]
    fn mget_batches_up_to_the_ratio() {
        let c = cfg(&["--ratio", "1:5", "--multi-key-get", "2", "--key-maximum", "9"]);
        let (m, buf) = run(&c, 4);
        let keys: Vec<u16> = m.iter().map(|m| m.keys).collect();
        assert_eq!(keys, vec![1, 2, 2, 1]);
        assert!(buf.windows(4).any(|w| w == b"MGET"));
    }

    #[test]
    fn arbitrary_commands_with_placeholders() {
        let c = cfg(&["--command=set __key__ __data__", "--command-ratio=2", "--command=hget h:__key__ f", "-d", "5", "--key-maximum", "0"]);
        let (m, buf) = run(&c, 3);
        assert_eq!(m.iter().map(|m| m.slot).collect::<Vec<_>>(), vec![0, 0, 1]);
        let s = String::from_utf8(buf).unwrap();
        assert_eq!(s, "*3\r\n$3\r\nset\r\n$9\r\nmemtier-0\r\n$5\r\nxxxxx\r\n".repeat(2) + "*3\r\n$4\r\nhget\r\n$11\r\nh:memtier-0\r\n$1\r\nf\r\n");
    }

    #[test]
    fn same_seed_same_keys_distinct_seed_differs() {
        let c = cfg(&["--ratio", "0:1"]);
        let v = Values::new(&c, 0);
        let mut a = Workload::new(Arc::clone(&c), 0, 2);
        let mut b = Workload::new(Arc::clone(&c), 1, 2);
        let (mut ba, mut bb) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            a.next(&mut ba, &v);
            b.next(&mut bb, &v);
        }
        assert_eq!(ba, bb, "memtier: one seed for all clients by default");
        let c = cfg(&["--ratio", "0:1", "--distinct-client-seed"]);
        let mut a = Workload::new(Arc::clone(&c), 0, 2);
        let mut b = Workload::new(Arc::clone(&c), 1, 2);
        let (mut ba, mut bb) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            a.next(&mut ba, &v);
            b.next(&mut bb, &v);
        }
        assert_ne!(ba, bb);
    }
}
