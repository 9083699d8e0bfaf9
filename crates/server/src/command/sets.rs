//! Set commands: SADD, SREM, the algebra (SINTER, SUNION, SDIFF and STORE forms), SPOP and SRANDMEMBER.

use super::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
