//! Hashes: a listpack of alternating fields and values while small, an
//! incrementally rehashed [`Dict`] once past `hash-max-listpack-*`.

use crate::dict::Dict;
use crate::listpack::Listpack;

#[derive(Debug, Clone)]
pub enum Hash {
    Listpack(Listpack),
    Table(Box<Dict<Box<[u8]>, Box<[u8]>>>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Listpack(Listpack::new())
    }
}

impl Hash {
    pub fn len(&self) -> usize {
        match self {
            Hash::Listpack(lp) => lp.len() / 2,
            Hash::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Listpack(_) => "listpack",
            Hash::Table(_) => "hashtable",
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            Hash::Listpack(lp) => lp.heap_size(),
            Hash::Table(t) => t.memory_usage() + t.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>(),
        }
    }
}
