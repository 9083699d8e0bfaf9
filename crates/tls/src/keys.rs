//! Private keys from PEM files, encrypted or not, as OpenSSL reads them
//! for Redis's `tls-key-file-pass`: PKCS#8's `ENCRYPTED PRIVATE KEY`
//! (PBES2, what `openssl pkcs8 -topk8` and `openssl genrsa -aes256`
//! write) and the older form with `Proc-Type: 4,ENCRYPTED` and
//! `DEK-Info` headers (what `openssl ec -aes256` and `openssl rsa
//! -traditional` write). rustls reads only keys in the clear.

use std::path::Path;

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
use base64::Engine as _;
use md5::{Digest, Md5};
use pkcs8::EncryptedPrivateKeyInfo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("malformed PEM: {0}")]
    Malformed(&'static str),
    #[error("the key is encrypted and no passphrase is set")]
    NoPassphrase,
    #[error("bad decrypt: a wrong passphrase, or a damaged key")]
    BadDecrypt,
    #[error("unsupported key encryption: {0}")]
    Unsupported(String),
}

/// The first private key in the PEM file at `path`, decrypted with
/// `passphrase` where it is encrypted.
pub fn private_key(path: &Path, passphrase: Option<&str>) -> Result<PrivateKeyDer<'static>, KeyError> {
    private_key_from_pem(&std::fs::read(path)?, passphrase)
}

/// The first private key in PEM `text`, decrypted with `passphrase`
/// where it is encrypted. A passphrase given for a key in the clear is
/// not used, as in OpenSSL.
pub fn private_key_from_pem(text: &[u8], passphrase: Option<&str>) -> Result<PrivateKeyDer<'static>, KeyError> {
    for block in pem_blocks(text)? {
        let encrypted = block.label == "ENCRYPTED PRIVATE KEY" || block.header("Proc-Type") == Some("4,ENCRYPTED");
        if !encrypted {
            continue;
        }
        let passphrase = passphrase.ok_or(KeyError::NoPassphrase)?;
        let der = block.der()?;
        return match block.label {
            "ENCRYPTED PRIVATE KEY" => pkcs8_decrypt(&der, passphrase),
            _ => traditional_decrypt(&block, &der, passphrase),
        };
    }
    Ok(PrivateKeyDer::from_pem_slice(text)?)
}

fn pkcs8_decrypt(der: &[u8], passphrase: &str) -> Result<PrivateKeyDer<'static>, KeyError> {
    let info = EncryptedPrivateKeyInfo::try_from(der).map_err(|_| KeyError::Malformed("not PKCS#8's EncryptedPrivateKeyInfo"))?;
    let plain = info.decrypt(passphrase).map_err(|e| match e {
        pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::UnsupportedAlgorithm { oid }) => KeyError::Unsupported(oid.to_string()),
        _ => KeyError::BadDecrypt,
    })?;
    // A wrong passphrase can leave padding that happens to be valid: the
    // result must still read as a key.
    pkcs8::PrivateKeyInfo::try_from(plain.as_bytes()).map_err(|_| KeyError::BadDecrypt)?;
    Ok(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec()).into())
}

/// OpenSSL's older encryption of a PKCS#1 (RSA) or SEC1 (EC) key: the
/// cipher and IV in `DEK-Info`, the key from the passphrase by
/// EVP_BytesToKey (MD5, one round, salted with the IV's first 8 bytes).
fn traditional_decrypt(block: &PemBlock, der: &[u8], passphrase: &str) -> Result<PrivateKeyDer<'static>, KeyError> {
    let info = block.header("DEK-Info").ok_or(KeyError::Malformed("Proc-Type without DEK-Info"))?;
    let (cipher, iv) = info.split_once(',').ok_or(KeyError::Malformed("DEK-Info without an IV"))?;
    let iv = hex(iv.trim()).ok_or(KeyError::Malformed("DEK-Info's IV is not hex"))?;
    let salt = iv.get(..8).ok_or(KeyError::Malformed("DEK-Info's IV is short"))?;
    let (key_len, decrypt): (usize, CbcDecrypt) = match cipher.to_ascii_uppercase().as_str() {
        "AES-128-CBC" => (16, cbc::<aes::Aes128>),
        "AES-192-CBC" => (24, cbc::<aes::Aes192>),
        "AES-256-CBC" => (32, cbc::<aes::Aes256>),
        "DES-EDE3-CBC" => (24, cbc::<des::TdesEde3>),
        other => return Err(KeyError::Unsupported(other.to_string())),
    };
    let plain = decrypt(&bytes_to_key(passphrase.as_bytes(), salt, key_len), &iv, der).ok_or(KeyError::BadDecrypt)?;
    // A DER SEQUENCE, or the passphrase was wrong.
    if plain.first() != Some(&0x30) {
        return Err(KeyError::BadDecrypt);
    }
    match block.label {
        "RSA PRIVATE KEY" => Ok(PrivatePkcs1KeyDer::from(plain).into()),
        "EC PRIVATE KEY" => Ok(PrivateSec1KeyDer::from(plain).into()),
        other => Err(KeyError::Unsupported(format!("an encrypted {other}"))),
    }
}

/// A block cipher's CBC decryption with PKCS#7 padding: (key, IV,
/// ciphertext) to the plaintext, or None where the padding is wrong.
type CbcDecrypt = fn(&[u8], &[u8], &[u8]) -> Option<Vec<u8>>;

fn cbc<C>(key: &[u8], iv: &[u8], ciphertext: &[u8]) -> Option<Vec<u8>>
where
    C: aes::cipher::BlockCipher + aes::cipher::BlockDecrypt + aes::cipher::KeyInit,
{
    let decryptor = cbc::Decryptor::<C>::new_from_slices(key, iv).ok()?;
    decryptor.decrypt_padded_vec_mut::<Pkcs7>(ciphertext).ok()
}

/// OpenSSL's EVP_BytesToKey with MD5 and one round: D1 = MD5(pass ||
/// salt), Di = MD5(Di-1 || pass || salt), concatenated to `len` bytes.
fn bytes_to_key(passphrase: &[u8], salt: &[u8], len: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(len + 16);
    let mut last: Vec<u8> = Vec::new();
    while key.len() < len {
        last = Md5::new().chain_update(&last).chain_update(passphrase).chain_update(salt).finalize().to_vec();
        key.extend_from_slice(&last);
    }
    key.truncate(len);
    key
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// One `-----BEGIN label-----` section: its RFC 1421 headers and body.
struct PemBlock<'a> {
    label: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    body: Vec<&'a str>,
}

impl PemBlock<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }

    fn der(&self) -> Result<Vec<u8>, KeyError> {
        let base64: String = self.body.concat();
        base64::engine::general_purpose::STANDARD.decode(base64).map_err(|_| KeyError::Malformed("a body that is not base64"))
    }
}

/// The PEM sections of `text`, headers apart; text outside them is
/// passed over, as OpenSSL passes it over.
fn pem_blocks(text: &[u8]) -> Result<Vec<PemBlock<'_>>, KeyError> {
    let text = std::str::from_utf8(text).map_err(|_| KeyError::Malformed("not text"))?;
    let mut blocks = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line.strip_prefix("-----BEGIN ").and_then(|l| l.strip_suffix("-----")) else { continue };
        let mut block = PemBlock { label, headers: Vec::new(), body: Vec::new() };
        loop {
            let line = lines.next().ok_or(KeyError::Malformed("no END line"))?;
            if line.starts_with("-----END ") {
                break;
            }
            match line.split_once(':') {
                Some((name, value)) if block.body.is_empty() => block.headers.push((name.trim(), value.trim())),
                _ => block.body.push(line),
            }
        }
        blocks.push(block);
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One P-256 key, in the clear and encrypted by `openssl ec -aes256`,
    /// `openssl ec -des3`, `openssl pkcs8 -topk8` (PBES2, PBKDF2 with
    /// HMAC-SHA256, AES-256-CBC) and `openssl pkcs8 -topk8 -v2 aes128
    /// -v2prf hmacWithSHA1`, each with the passphrase "secret".
    const CLEAR: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIN23GT9rsGQ8yn2JFu89/vSJfLEpZscfP48UsBKK6HF5oAoGCCqGSM49
AwEHoUQDQgAEQZGZmODLmjKVPxav7QP/WgYMEIP/uOuRSUUSm1W1Mp80v5dXukdc
f/rIEvwVMFG2F84BSHoL4sgyYHyehbwVHg==
-----END EC PRIVATE KEY-----
";
    const AES: &str = "-----BEGIN EC PRIVATE KEY-----
Proc-Type: 4,ENCRYPTED
DEK-Info: AES-256-CBC,75C081FE2B0637D772AFFB4B4B8925C7

Kz/UTB6VDvWy3n7grMzB5EeWA78DaFBD3AORDWgd95EWPNhoSeLIppZMw/SBbrTa
KUGogf4oSrWCGszZpwuv9BHzSbsIc+9yY8C0nyFikBWCtrblSoPV4sia7sNjxNJQ
Hd2VDVqYIM/1Q3p49lFlKpL9csziFq7B5s7AizfBABY=
-----END EC PRIVATE KEY-----
";
    const DES3: &str = "-----BEGIN EC PRIVATE KEY-----
Proc-Type: 4,ENCRYPTED
DEK-Info: DES-EDE3-CBC,628AD292CFFD9F94

k1itME+XC41sT7GyjLEHi9kw4TgNyV8Lun0aHTttDWPxy4pPHeUAVnX5aVjbVMmM
6pUsbFhbA/V2Er6v9ccp1tldZkjW2wGJSYOvPBLQZ6qKy824e13E4DYZdjj11Zwo
1aXvxVk/N5l3q0skDc0jDLiYoaLUl67GESRtfhna89w=
-----END EC PRIVATE KEY-----
";
    const PKCS8: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAiDHa9P06NckwICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEIx1H+Gw4bG403PcgfJMGasEgZCq
tK7QX2ckEDDNC7C7jcz5pI6kmLAstS/7ja87fWGY4nRQ15P0Gw7M762NDQqLq8hc
evgbDDkyLFFNJl5nolXcwT6xrAr0bX8V+dNvcr5L/3KzHIBM4AJwK3XlPxuNj+Rz
qyZ3v7lnjiiaiuNmK4PBUWpcNMCnEvruuE1kufTVmW/RFsFoLlHPWbh+cBQ6BBY=
-----END ENCRYPTED PRIVATE KEY-----
";
    const PKCS8_SHA1: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHeMEkGCSqGSIb3DQEFDTA8MBsGCSqGSIb3DQEFDDAOBAifcMHxIHYaPgICCAAw
HQYJYIZIAWUDBAECBBDxhR+3fljqU663cImVH/5sBIGQJIGqAS3Z4//qgKxHV5/z
ZVLfouF3vmV5hxsCL1RL79V2ZIu9oXkNu7z1Ljw6+yWqFQSptrNJD8JeZx5COIpq
kQ+euFoMOKBvsug2eGcfYwmjHaXNROCt8ymeIW8eYYZdQHi2vCzKeL/M1DTITUwM
Ly5vlU4m3FERzFj9v77ERRlN2WxNTAlQrM4bDAYsBr54
-----END ENCRYPTED PRIVATE KEY-----
";

    fn read(pem: &str, passphrase: Option<&str>) -> Result<PrivateKeyDer<'static>, KeyError> {
        private_key_from_pem(pem.as_bytes(), passphrase)
    }

    /// The public half of `key`, as ring's signer derives it.
    fn public_key(key: &PrivateKeyDer<'static>) -> Vec<u8> {
        let signer = rustls::crypto::ring::default_provider().key_provider.load_private_key(key.clone_key()).expect("a usable key");
        signer.public_key().expect("public key").to_vec()
    }

    #[test]
    fn encrypted_keys_read_as_the_key_in_the_clear() {
        let clear = public_key(&read(CLEAR, None).expect("clear"));
        // A passphrase is not needed for a key in the clear, and not used.
        assert_eq!(public_key(&read(CLEAR, Some("unused")).expect("clear")), clear);
        for pem in [AES, DES3, PKCS8, PKCS8_SHA1] {
            assert_eq!(public_key(&read(pem, Some("secret")).expect("decrypted")), clear);
            assert!(matches!(read(pem, None), Err(KeyError::NoPassphrase)));
            assert!(matches!(read(pem, Some("wrong")), Err(KeyError::BadDecrypt)));
        }
    }

    #[test]
    fn bad_pem_is_refused_with_a_reason() {
        let unknown = AES.replace("AES-256-CBC", "CAMELLIA-256-CBC");
        assert!(matches!(read(&unknown, Some("secret")), Err(KeyError::Unsupported(c)) if c == "CAMELLIA-256-CBC"));
        let cut = &AES[..AES.find("-----END").expect("end")];
        assert!(matches!(read(cut, Some("secret")), Err(KeyError::Malformed(_))));
        assert!(matches!(read("no key here\n", None), Err(KeyError::Pem(_))));
    }

    #[test]
    fn bytes_to_key_is_openssl_s() {
        // `openssl enc -aes-256-cbc -P -md md5 -pass pass:secret -S 0102030405060708`
        let key = bytes_to_key(b"secret", &[1, 2, 3, 4, 5, 6, 7, 8], 32);
        assert_eq!(hex("C9E5A1BD216DBE1317E230CEF48F38EE7F0E17AD64022144BCCEC4A1AA2879AB"), Some(key));
    }
}
