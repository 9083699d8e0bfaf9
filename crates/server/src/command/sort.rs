//! SORT and SORT_RO over lists, sets and sorted sets.

use super::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
