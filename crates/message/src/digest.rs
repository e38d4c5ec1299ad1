//! Content digests: sha256 as lowercase hex, the one form qhost writes anywhere (plugin
//! versions, compiled-cache names, payload checks and keys, `body-sha256` idempotency keys).

use sha2::{Digest, Sha256};

/// The sha256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The first eight bytes of the sha256 of `bytes`, as a number: a stable, evenly spread hash
/// (the same on every host and in every release), for splitting keys or ids into shares.
pub fn sha256_u64(bytes: &[u8]) -> u64 {
    let digest = Sha256::digest(bytes);
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
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
