//! `DUMP` and `RESTORE` payloads, and `FUNCTION DUMP` and `FUNCTION
//! RESTORE` ones.
//!
//! ```text
//! <value type u8> <value as in an RDB file> <RDB version u16 LE> <CRC64 u64 LE>
//! (<FUNCTION2 u8> <library code: string>)* <RDB version u16 LE> <CRC64 u64 LE>
//! ```
//!
//! The CRC covers everything before it, version included.

use crate::crc64::crc64;
use crate::decode::read_value;
use crate::encode::{EncodeOptions, Output, Plan};
use crate::error::RdbError;
use crate::format::{is_value_type, OP_FUNCTION2, RDB_VERSION};
use crate::input::Input;
use crate::RdbValue;

const FOOTER: usize = 10;

/// Serializes `value` as `DUMP` does, encoded as `options` say.
pub fn dump_payload(value: &RdbValue, options: &EncodeOptions) -> Vec<u8> {
    let plan = Plan::new(value, &options.thresholds);
    let mut out = Output::new(Vec::new());
    let payload = out
        .u8(plan.rdb_type())
        .and_then(|()| plan.write(&mut out, value, options.compression))
        .and_then(|()| out.into_inner())
        .expect("writing into a Vec cannot fail");
    seal(payload)
}

/// Appends the footer: RDB version and the CRC64 of all before it.
fn seal(mut payload: Vec<u8>) -> Vec<u8> {
    payload.extend_from_slice(&(RDB_VERSION as u16).to_le_bytes());
    let crc = crc64(0, &payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

/// Whether RESTORE checks a payload's CRC64: DEBUG
/// SET-SKIP-CHECKSUM-VALIDATION skips it, so that tests can hand damaged
/// payloads to the value checks without forging a checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    Verify,
    Skip,
}

/// The body of a payload whose footer is good: RDB version at most 10,
/// CRC64 matching unless skipped (Redis's `verifyDumpPayload`).
fn unseal(payload: &[u8], checksum: Checksum) -> Result<&[u8], RdbError> {
    if payload.len() < FOOTER {
        return Err(RdbError::BadDumpPayload);
    }
    let (body, footer) = payload.split_at(payload.len() - FOOTER);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if u32::from(version) > RDB_VERSION {
        return Err(RdbError::BadDumpPayload);
    }
    let stored = u64::from_le_bytes([footer[2], footer[3], footer[4], footer[5], footer[6], footer[7], footer[8], footer[9]]);
    if checksum == Checksum::Verify && crc64(0, &payload[..payload.len() - 8]) != stored {
        return Err(RdbError::BadDumpPayload);
    }
    Ok(body)
}

/// `FUNCTION DUMP`'s payload of the libraries whose code is `libraries`.
pub fn dump_functions<'a>(libraries: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Output::new(Vec::new());
    for code in libraries {
        out.u8(OP_FUNCTION2).and_then(|()| out.string(code, false)).expect("writing into a Vec cannot fail");
    }
    seal(out.into_inner().expect("writing into a Vec cannot fail"))
}

/// Why a `FUNCTION RESTORE` payload is refused, in Redis's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FunctionsPayloadError {
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    #[error("given type is not a function")]
    NotAFunction,
    #[error("can not read data type")]
    Unreadable,
}

/// The library codes of a `FUNCTION DUMP` payload.
pub fn restore_functions(payload: &[u8]) -> Result<Vec<Vec<u8>>, FunctionsPayloadError> {
    let body = unseal(payload, Checksum::Verify).map_err(|_| FunctionsPayloadError::Footer)?;
    let mut input = Input::new(body);
    let mut libraries = Vec::new();
    while input.offset() < body.len() as u64 {
        if input.u8().map_err(|_| FunctionsPayloadError::Unreadable)? != OP_FUNCTION2 {
            return Err(FunctionsPayloadError::NotAFunction);
        }
        libraries.push(input.string().map_err(|_| FunctionsPayloadError::Unreadable)?);
    }
    Ok(libraries)
}

/// Decodes a payload for `RESTORE`: checks the footer as Redis does (RDB
/// version at most 10, CRC64 matching; [`RdbError::BadDumpPayload`]
/// otherwise, whose message is Redis's reply), then the value. Unlike
/// Redis, bytes left over after the value are refused too.
/// [`RdbError::restore_reply`] gives the reply for any error.
pub fn restore_payload(payload: &[u8]) -> Result<RdbValue, RdbError> {
    restore_payload_with(payload, Checksum::Verify)
}

/// [`restore_payload`], with the CRC64 checked or not.
pub fn restore_payload_with(payload: &[u8], checksum: Checksum) -> Result<RdbValue, RdbError> {
    let body = unseal(payload, checksum)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Libraries go through FUNCTION DUMP and RESTORE whole and in order;
    /// a damaged footer or a non-function item is refused with Redis's
    /// reason.
    #[test]
    fn function_payloads_round_trip_and_refuse_damage() {
        let libraries: [&[u8]; 2] = [b"#!lua name=a\nredis.register_function('f', function() end)", b"#!lua name=b\n"];
        let payload = dump_functions(libraries);
        let restored = restore_functions(&payload).expect("a good payload");
        assert_eq!(restored, libraries.iter().map(|l| l.to_vec()).collect::<Vec<_>>());
        assert_eq!(restore_functions(&dump_functions([])), Ok(vec![]));

        let mut damaged = payload.clone();
        damaged[3] ^= 1;
        assert_eq!(restore_functions(&damaged), Err(FunctionsPayloadError::Footer));
        assert_eq!(restore_functions(b"short"), Err(FunctionsPayloadError::Footer));

        let not_a_function = seal(vec![0x00, 0x01, b'x']);
        assert_eq!(restore_functions(&not_a_function), Err(FunctionsPayloadError::NotAFunction));
        let truncated = seal(vec![OP_FUNCTION2, 0x05, b'x']);
        assert_eq!(restore_functions(&truncated), Err(FunctionsPayloadError::Unreadable));
    }
}
