//! A hash of the rendered proxy config that is stable across Rust versions and platforms, put on
//! the pod template so a config change rolls the pods.
//!
//! `std`'s `DefaultHasher` is explicitly unstable across releases, which would roll every pod on
//! an operator upgrade; FNV-1a (64-bit) is fixed by its definition.

/// FNV-1a 64-bit offset basis.
const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// The 64-bit FNV-1a hash of `bytes` as 16 lowercase hex digits.
///
/// Source: Fowler, Noll, Vo, "The FNV Non-Cryptographic Hash Algorithm" (IETF draft
/// draft-eastlake-fnv). Not a security measure: it only detects change.
pub fn config_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_hash_matches_published_fnv1a_vectors() {
        // Test vectors from the FNV reference (draft-eastlake-fnv, section 7).
        assert_eq!(config_hash(b""), "cbf29ce484222325");
        assert_eq!(config_hash(b"a"), "af63dc4c8601ec8c");
        assert_eq!(config_hash(b"foobar"), "85944171f73967e8");
    }
}
