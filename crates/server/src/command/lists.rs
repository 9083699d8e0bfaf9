//! List commands: pushes, pops, ranges, LMOVE and LMPOP (the blocking forms are in `blocking`).

use super::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
