//! `DUMP` and `RESTORE` payloads.
//!
//! ```text
//! <value type u8> <value as in an RDB file> <RDB version u16 LE> <CRC64 u64 LE>
//! ```
//!
//! The CRC covers everything before it, version included.

use crate::crc64::crc64;
use crate::decode::read_value;
use crate::encode::{EncodeOptions, Output, Plan};
use crate::error::RdbError;
use crate::format::{is_value_type, RDB_VERSION};
use crate::input::Input;
use crate::RdbValue;

const FOOTER: usize = 10;

/// Serializes `value` as `DUMP` does, encoded as `options` say.
pub fn dump_payload(value: &RdbValue, options: &EncodeOptions) -> Vec<u8> {
    let plan = Plan::new(value, &options.thresholds);
    let mut out = Output::new(Vec::new());
    let mut payload = out
        .u8(plan.rdb_type())
        .and_then(|()| plan.write(&mut out, value, options.compression))
        .and_then(|()| out.into_inner())
        .expect("writing into a Vec cannot fail");
    payload.extend_from_slice(&(RDB_VERSION as u16).to_le_bytes());
    let crc = crc64(0, &payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

/// Decodes a payload for `RESTORE`: checks the footer as Redis does (RDB
/// version at most 10, CRC64 matching; [`RdbError::BadDumpPayload`]
/// otherwise, whose message is Redis's reply), then the value. Unlike
/// Redis, bytes left over after the value are refused too.
/// [`RdbError::restore_reply`] gives the reply for any error.
pub fn restore_payload(payload: &[u8]) -> Result<RdbValue, RdbError> {
    if payload.len() < FOOTER {
        return Err(RdbError::BadDumpPayload);
    }
    let (body, footer) = payload.split_at(payload.len() - FOOTER);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if u32::from(version) > RDB_VERSION {
        return Err(RdbError::BadDumpPayload);
    }
    let stored = u64::from_le_bytes([footer[2], footer[3], footer[4], footer[5], footer[6], footer[7], footer[8], footer[9]]);
    if crc64(0, &payload[..payload.len() - 8]) != stored {
        return Err(RdbError::BadDumpPayload);
    }
    let mut input = Input::new(body);
    let rdb_type = input.u8()?;
    if !is_value_type(rdb_type) {
        return Err(RdbError::corrupt(0, format!("unknown value type {rdb_type}")));
    }
    let value = read_value(&mut input, rdb_type, 0)?.ok_or_else(|| RdbError::corrupt(1, "empty collection"))?;
    if input.offset() != body.len() as u64 {
        return Err(RdbError::corrupt(input.offset(), "bytes left after the value"));
    }
    Ok(value)
}
