//! Content digests: sha256 as lowercase hex, the one form qhost writes anywhere (plugin
//! versions, compiled-cache names, payload checks and keys, `body-sha256` idempotency keys).

use sha2::{Digest, Sha256};

/// The sha256 of `bytes`, as 64 lowercase hex digits.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_lowercase_hex_of_the_standard_digest() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
