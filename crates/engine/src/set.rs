//! Sets: a sorted array of integers (`intset`) while every member is an
//! integer and there are at most `set-max-intset-entries`, else a [`Dict`].

use crate::dict::Dict;

#[derive(Debug, Clone)]
pub enum Set {
    Intset(Vec<i64>),
    Table(Box<Dict<Box<[u8]>, ()>>),
}

impl Default for Set {
    fn default() -> Self {
        Set::Intset(Vec::new())
    }
}

impl Set {
    pub fn len(&self) -> usize {
        match self {
            Set::Intset(v) => v.len(),
            Set::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Intset(_) => "intset",
            Set::Table(_) => "hashtable",
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            Set::Intset(v) => v.capacity() * 8,
            Set::Table(t) => t.memory_usage() + t.iter().map(|(k, _)| k.len()).sum::<usize>(),
        }
    }
}
