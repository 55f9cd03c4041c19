//! The authorization server's signing keys: found through its metadata, cached, and fetched
//! again on a schedule and when a token names a key the cache does not hold, so a key rotation
//! needs no restart (issue 15).
//!
//! Discovery: `jwks_uri` from the issuer's metadata, RFC 8414
//! (`<origin>/.well-known/oauth-authorization-server<path>`) first, then OpenID Connect
//! Discovery (`<issuer>/.well-known/openid-configuration`); the metadata's `issuer` must equal
//! the configured one (RFC 8414 section 3.3), else it is not used. Keys whose `use` is not
//! `sig`, or whose type `jsonwebtoken` cannot verify with, are skipped.
//!
//! Fetches on an unknown `kid` are at most one per [`MIN_REFETCH`]: a client sending made-up
//! key ids cannot make the proxy hammer the authorization server. A request that misses waits
//! for the next allowed fetch (at most [`MIN_REFETCH`]) rather than being refused, so a key
//! the issuer created just after the last fetch is accepted; concurrent misses share one fetch.
//! Right after a failed fetch, a miss is refused at once as unavailable.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use berth_crds::proxy_config::oauth;

use crate::observe::metrics::auth::AuthMetrics;

/// Shortest time between two fetches caused by unknown key ids: a token naming a key the
/// cache lacks waits until this long after the last fetch began, then one fetch serves every
/// waiting request.
pub const MIN_REFETCH: Duration = Duration::from_secs(2);
/// Budget of one metadata or key-set request.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest metadata or key-set document read, in bytes.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// One verification key and the algorithm it is bound to, when the key set says so.
#[derive(Clone)]
pub struct VerificationKey {
    /// The key.
    pub key: Arc<DecodingKey>,
    /// The JWK's `alg`, when present: a token must then use exactly this algorithm.
    pub algorithm: Option<Algorithm>,
}

/// Why no key could be found for a token.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key set was fetched and has no key with this id (or, for a token without `kid`, no
    /// key at all).
    /// The token's `kid` is not echoed: it is the client's, of any length (issue 39, item 8).
    #[error("the authorization server has no signing key with the token's kid")]
    Unknown,
    /// The keys could not be fetched and none are cached.
    #[error("the authorization server's keys are unavailable: {0}")]
    Unavailable(String),
}

#[derive(Default)]
struct FetchState {
    /// When the last fetch began.
    began: Option<Instant>,
    /// Why it failed, if it did.
    error: Option<String>,
}

struct Keys {
    by_id: HashMap<String, VerificationKey>,
    without_id: Vec<VerificationKey>,
    /// When they were fetched: past the cache's `max_age` they are not trusted.
    fetched: Instant,
}

/// The cached key set of one issuer.
pub struct KeyCache {
    issuer: String,
    client: reqwest::Client,
    metrics: AuthMetrics,
    keys: RwLock<Option<Arc<Keys>>>,
    /// Held while fetching (one fetch at a time).
    fetching: tokio::sync::Mutex<FetchState>,
    jwks_uri: RwLock<Option<String>>,
    min_refetch: Duration,
    /// How long fetched keys stay trusted without a successful fetch since (`maxKeyAge`).
    max_age: Duration,
}

impl KeyCache {
    /// An empty cache for `issuer`; nothing is fetched until [`KeyCache::refresh`] or the first
    /// [`KeyCache::key_for`].
    pub fn new(issuer: String, client: reqwest::Client, metrics: AuthMetrics) -> Self {
        Self {
            issuer,
            client,
            metrics,
            keys: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(FetchState::default()),
            jwks_uri: RwLock::new(None),
            min_refetch: MIN_REFETCH,
            max_age: oauth::DEFAULT_MAX_KEY_AGE,
        }
    }

    /// The same cache trusting fetched keys for `max_age` without a successful fetch since
    /// (`maxKeyAge`, issue 39 item 8): older keys are as good as none, and a token needs a
    /// fetch that succeeds.
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// The same cache with another shortest time between fetches (tests).
    #[cfg(test)]
    pub(crate) fn with_min_refetch(mut self, min_refetch: Duration) -> Self {
        self.min_refetch = min_refetch;
        self
    }

    /// The key for a token whose header names `kid` (or none), fetching the key set when it is
    /// not cached or does not hold `kid`.
    ///
    /// # Errors
    /// [`KeyError::Unknown`] when the (fresh) key set has no such key;
    /// [`KeyError::Unavailable`] when the keys cannot be fetched.
    pub async fn key_for(&self, kid: Option<&str>) -> Result<VerificationKey, KeyError> {
        let cached = self.cached();
        if let Some(keys) = &cached
            && let Some(key) = find(keys, kid)
        {
            return Ok(key);
        }
        let arrived = Instant::now();
        let fetched = {
            let mut state = self.fetching.lock().await;
            // A fetch that began after this request arrived saw every key the token could
            // name; one that began before may predate the token's key.
            let fresh = state.began.is_some_and(|at| at >= arrived);
            let wait = state.began.map_or(Duration::ZERO, |at| {
                self.min_refetch.saturating_sub(at.elapsed())
            });
            match (fresh, self.cached(), &state.error) {
                (true, Some(keys), None) => Ok(keys),
                (true, _, Some(error)) => Err(KeyError::Unavailable(error.clone())),
                // A fetch failed moments ago: do not queue behind another one.
                (false, _, Some(error)) if !wait.is_zero() => {
                    Err(KeyError::Unavailable(error.clone()))
                }
                _ => {
                    // A key created just after the last fetch (an issuer that makes its keys
                    // lazily, a rotation) is fetched once the interval has passed; requests
                    // naming unknown keys meanwhile wait here for that one fetch.
                    tokio::time::sleep(wait).await;
                    state.began = Some(Instant::now());
                    let result = self.fetch().await;
                    state.error = result.as_ref().err().cloned();
                    result.map_err(KeyError::Unavailable)
                }
            }
        };
        // On a failed fetch, a key the old set holds would have been found above: the token's
        // key is not known, and whether the token is valid cannot be told.
        let keys = fetched?;
        find(&keys, kid).ok_or(KeyError::Unknown)
    }

    /// Fetches the key set now (the scheduled refresh); a failure keeps the cached keys.
    pub async fn refresh(&self) {
        let mut state = self.fetching.lock().await;
        state.began = Some(Instant::now());
        let result = self.fetch().await;
        state.error = result.as_ref().err().cloned();
        if let Err(error) = result {
            tracing::warn!(issuer = %self.issuer, %error, "could not refresh the authorization server's keys; the cached ones stay");
        }
    }

    /// The keys, while they are younger than `max_age`.
    fn cached(&self) -> Option<Arc<Keys>> {
        let keys = self.keys.read().ok().and_then(|k| k.clone())?;
        if keys.fetched.elapsed() > self.max_age {
            tracing::warn!(issuer = %crate::observe::escaped::Escaped(&self.issuer), max_key_age_s = self.max_age.as_secs(), "the authorization server's keys are older than maxKeyAge and no fetch has succeeded since: not trusted");
            return None;
        }
        Some(keys)
    }

    async fn fetch(&self) -> Result<Arc<Keys>, String> {
        let result = self.fetch_inner().await;
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics.jwks_fetches.with_label_values(&[label]).inc();
        let keys = Arc::new(result?);
        if let Ok(mut slot) = self.keys.write() {
            *slot = Some(Arc::clone(&keys));
        }
        tracing::info!(issuer = %self.issuer, keys = keys.by_id.len() + keys.without_id.len(), "fetched the authorization server's keys");
        Ok(keys)
    }

    async fn fetch_inner(&self) -> Result<Keys, String> {
        let known = self.jwks_uri.read().ok().and_then(|u| u.clone());
        let uri = match known {
            Some(uri) => uri,
            None => {
                let uri = self.discover().await?;
                if let Ok(mut slot) = self.jwks_uri.write() {
                    *slot = Some(uri.clone());
                }
                uri
            }
        };
        let set: JwkSet = self.get_json(&uri).await?;
        Ok(keys_of(set))
    }

    async fn discover(&self) -> Result<String, String> {
        let mut problems = Vec::new();
        for url in metadata_urls(&self.issuer) {
            match self.get_json::<Metadata>(&url).await {
                Ok(metadata) if metadata.issuer != self.issuer => problems.push(format!(
                    "{url} names issuer {:?}, not {:?}",
                    metadata.issuer, self.issuer
                )),
                Ok(Metadata {
                    jwks_uri: Some(uri),
                    ..
                }) => return Ok(uri),
                Ok(_) => problems.push(format!("{url} has no jwks_uri")),
                Err(problem) => problems.push(problem),
            }
        }
        Err(problems.join("; "))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        let body = read_bounded(response, url).await?;
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the JSON expected: {e}"))
    }
}

/// The body of `response`, refused as soon as it passes [`MAX_DOCUMENT_BYTES`]: from its
/// `Content-Length` before it is read, else while it is read, so a document without end costs
/// at most that much (issue 39, item 8).
async fn read_bounded(mut response: reqwest::Response, url: &str) -> Result<Vec<u8>, String> {
    let too_large = || format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    #[serde(default)]
    jwks_uri: Option<String>,
}

/// Where the issuer's metadata may be, in the order tried.
fn metadata_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let after_scheme = trimmed.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match trimmed[after_scheme..].find('/') {
        Some(slash) => trimmed.split_at(after_scheme + slash),
        None => (trimmed, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{trimmed}/.well-known/openid-configuration"),
    ]
}

fn find(keys: &Keys, kid: Option<&str>) -> Option<VerificationKey> {
    match kid {
        Some(kid) => keys.by_id.get(kid).cloned(),
        // A token without `kid` can only be matched when the set has exactly one key.
        None => match (keys.by_id.len(), keys.without_id.as_slice()) {
            (0, [only]) => Some(only.clone()),
            (1, []) => keys.by_id.values().next().cloned(),
            _ => None,
        },
    }
}

fn keys_of(set: JwkSet) -> Keys {
    let mut keys = Keys {
        by_id: HashMap::new(),
        without_id: Vec::new(),
        fetched: Instant::now(),
    };
    for jwk in set.keys {
        let Some(key) = verification_key(&jwk) else {
            continue;
        };
        match jwk.common.key_id {
            Some(kid) => {
                keys.by_id.insert(kid, key);
            }
            None => keys.without_id.push(key),
        }
    }
    keys
}

fn verification_key(jwk: &Jwk) -> Option<VerificationKey> {
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let algorithm = match jwk.common.key_algorithm {
        None => None,
        Some(alg) => Some(signature_algorithm(alg)?),
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerificationKey {
        key: Arc::new(key),
        algorithm,
    })
}

fn signature_algorithm(alg: KeyAlgorithm) -> Option<Algorithm> {
    Some(match alg {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        // HMAC keys are secrets, never published; encryption algorithms do not sign.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_rfc_8414_then_openid_discovery() {
        assert_eq!(
            metadata_urls("https://auth.example.com/"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://example.com/tenant1"),
            [
                "https://example.com/.well-known/oauth-authorization-server/tenant1",
                "https://example.com/tenant1/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn hmac_and_encryption_keys_are_never_verification_keys() {
        let set: JwkSet = serde_json::from_value(serde_json::json!({ "keys": [
            { "kty": "oct", "kid": "secret", "alg": "HS256", "k": "c2VjcmV0" },
            { "kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB" },
            { "kty": "RSA", "kid": "sig", "use": "sig", "alg": "RS256", "n": "AQAB", "e": "AQAB" }
        ]}))
        .expect("a key set");
        let keys = keys_of(set);
        assert_eq!(keys.by_id.keys().collect::<Vec<_>>(), ["sig"]);
        assert_eq!(keys.by_id["sig"].algorithm, Some(Algorithm::RS256));
        assert!(
            find(&keys, None).is_some(),
            "one key: a token without kid uses it"
        );
        assert!(find(&keys, Some("secret")).is_none());
    }
}
