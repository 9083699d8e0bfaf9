//! Lists: Redis 7.0's quicklist, a deque of listpack nodes, each bounded
//! by `list-max-listpack-size`.

use std::collections::VecDeque;

use crate::listpack::Listpack;

#[derive(Debug, Clone, Default)]
pub struct List {
    /// Boxed so that a `Value` stays 32 bytes.
    nodes: Box<VecDeque<Listpack>>,
}

impl List {
    pub fn len(&self) -> usize {
        self.nodes.iter().map(Listpack::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    pub fn heap_size(&self) -> usize {
        self.nodes.iter().map(Listpack::heap_size).sum()
    }
}
