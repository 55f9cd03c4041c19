//! The token the operator shows each proxy's admin diagnostics (`/tools`, `/upstream`; issue
//! 39, item 10): the proxy answers a peer that is not on loopback only with it, so tool names
//! and a stdio child's last stderr lines are not public on the pod network.
//!
//! Each `McpUpstream` gets its own token, `hex(HMAC-SHA256(key, "berth-diagnostics/" +
//! namespace + "/" + name))`, derived from the operator's key (`BERTH_DIAGNOSTICS_KEY`, which
//! the chart fills from a Secret it keeps across upgrades), so every operator replica derives
//! the same token and the operator stores none. The proxy's ConfigMap carries only the token's
//! SHA-256 (`diagnosticsTokenSha256`): reading the ConfigMap does not give the token.
//!
//! Not responsible for: sending the token (`report`) or checking it (the proxy).

use hmac::{KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};

/// The operator's diagnostics key. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DiagnosticsKey([u8; 32]);

impl std::fmt::Debug for DiagnosticsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DiagnosticsKey(..)")
    }
}

impl Default for DiagnosticsKey {
    /// A random key of this process: tokens change when the operator restarts, and with them
    /// every proxy's ConfigMap (a rollout), so a deployed operator sets `BERTH_DIAGNOSTICS_KEY`.
    fn default() -> Self {
        let mut key = [0u8; 32];
        // The OS's random source does not fail on the platforms the operator runs on; an
        // all-zero key would still keep the diagnostics off loopback-only but guessable.
        if getrandom::fill(&mut key).is_err() {
            tracing::error!("no random source: the diagnostics key is fixed");
        }
        Self(key)
    }
}

impl DiagnosticsKey {
    /// The key from `text` (any length; its SHA-256 is the key).
    pub fn from_text(text: &str) -> Self {
        Self(Sha256::digest(text.as_bytes()).into())
    }

    /// The bearer token of the proxies of `McpUpstream` `namespace/name`: 64 lowercase hex
    /// digits.
    pub fn token(&self, namespace: &str, name: &str) -> String {
        #[allow(clippy::expect_used)] // HMAC takes a key of any length.
        let mut mac =
            hmac::Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts any key length");
        mac.update(b"berth-diagnostics/");
        mac.update(namespace.as_bytes());
        mac.update(b"/");
        mac.update(name.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The SHA-256 of [`Self::token`], 64 lowercase hex digits: the proxy's
    /// `diagnosticsTokenSha256`.
    pub fn token_sha256(&self, namespace: &str, name: &str) -> String {
        hex::encode(Sha256::digest(self.token(namespace, name).as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_per_upstream_and_key_and_the_config_holds_only_their_digest() {
        let key = DiagnosticsKey::from_text("k1");
        let token = key.token("ns", "a");
        assert_eq!(token.len(), 64);
        assert_eq!(token, key.token("ns", "a"), "stable");
        assert_ne!(token, key.token("ns", "b"));
        assert_ne!(token, key.token("ns2", "a"));
        assert_ne!(token, DiagnosticsKey::from_text("k2").token("ns", "a"));
        let digest = key.token_sha256("ns", "a");
        assert_eq!(digest, hex::encode(Sha256::digest(token.as_bytes())));
        assert_ne!(digest, token);
        assert!(!format!("{key:?}").contains("k1"));
    }
}
