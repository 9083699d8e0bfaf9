//! Sorted sets: a listpack of (member, score) pairs in score order while
//! small, a skiplist with a member index past `zset-max-listpack-*`.

use crate::listpack::Listpack;

#[derive(Debug, Clone)]
pub enum ZSet {
    Listpack(Listpack),
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Listpack(Listpack::new())
    }
}

impl ZSet {
    pub fn len(&self) -> usize {
        match self {
            ZSet::Listpack(lp) => lp.len() / 2,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Listpack(_) => "listpack",
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            ZSet::Listpack(lp) => lp.heap_size(),
        }
    }
}
