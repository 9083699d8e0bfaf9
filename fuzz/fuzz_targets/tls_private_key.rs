//! Any bytes as a PEM key file, read with and without a passphrase: the
//! reader answers a key or an error, never panics. Keys PKCS#8 encrypts
//! are read without one: their decryption is the pkcs8 crate's, and the
//! costs it reads from the file (PBKDF2's rounds, scrypt's memory) are
//! as large as the file says, as in OpenSSL.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = keel_tls::private_key_from_pem(data, None);
    if !data.windows(21).any(|w| w == b"ENCRYPTED PRIVATE KEY") {
        let _ = keel_tls::private_key_from_pem(data, Some("secret"));
    }
});
