//! Sorted-set commands: ZADD, ranges by rank, score and lex, the algebra and the pops (the blocking forms are in `blocking`).

use super::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
