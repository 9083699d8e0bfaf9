//! Hash commands: HSET, HGET and the rest of Redis 7.0's hash group.

use super::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
