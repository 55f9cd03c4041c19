//! The OAuth 2.1 resource server: decides whether an access token admits a request (MCP
//! 2025-06-18 and later, "Authorization", "Access Token Usage" and "Token Handling"; RFC 9068
//! JWT access tokens; issue 15).
//!
//! A token is accepted when, in this order: it is a JWS whose `alg` is in `allowedAlgorithms`
//! (never `none`, never HMAC); the issuer's key set has its `kid` (fetched again once when it
//! does not, see [`super::jwks`]), bound to the same algorithm when the key says so; the
//! signature verifies; `iss` is the configured issuer; `aud` contains the configured audience
//! (RFC 8707); `exp` is present and not past, and `nbf` not ahead, each with `clockSkew`; and it
//! carries every required scope (else [`Rejection::InsufficientScope`]).

use std::collections::HashSet;
use std::time::Duration;

use berth_crds::proxy_config::oauth::{JwsAlgorithm, OAuthSpec};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Value, json};

use super::jwks::{KeyCache, KeyError};
use super::principal::{Claims, Principal};
use crate::observe::metrics::auth::AuthMetrics;

/// Why a request's token does not admit it; each kind maps to one HTTP answer (`front::mcp::auth`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No `Authorization: Bearer` header: 401 without an error code (RFC 6750 section 3.1).
    #[error("no bearer token")]
    Missing,
    /// The token is not valid: 401 `invalid_token`, with the reason as `error_description`.
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// A valid token without the scopes listed: 403 `insufficient_scope`.
    #[error("the token lacks scope {0:?}")]
    InsufficientScope(Vec<String>),
    /// The keys to check the token with cannot be fetched: 503.
    #[error("{0}")]
    Unavailable(String),
}

/// Longest token parsed when `limits.maxTokenBytes` is not given, in bytes (its default).
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 16 * 1024;

/// One McpUpstream's resource server.
pub struct ResourceServer {
    spec: OAuthSpec,
    /// One validation per allowed algorithm: `jsonwebtoken` wants every algorithm of a
    /// validation to be of the key's family, so each token is checked against its own.
    validations: Vec<(Algorithm, Validation)>,
    keys: KeyCache,
    refresh: Duration,
    /// Longest token parsed, in bytes (`limits.maxTokenBytes`).
    max_token_bytes: usize,
}

impl ResourceServer {
    /// A resource server for `spec`, fetching keys with `client`.
    ///
    /// # Errors
    /// A message naming the field when a duration in `spec` does not parse.
    pub fn new(
        spec: &OAuthSpec,
        client: reqwest::Client,
        metrics: AuthMetrics,
    ) -> Result<Self, String> {
        let refresh = spec
            .jwks_refresh()
            .map_err(|e| format!("oauth.jwksRefresh: {e}"))?;
        let skew = spec
            .clock_skew()
            .map_err(|e| format!("oauth.clockSkew: {e}"))?;
        let max_key_age = spec
            .max_key_age()
            .map_err(|e| format!("oauth.maxKeyAge: {e}"))?;
        let algorithms: Vec<Algorithm> = spec
            .allowed_algorithms
            .iter()
            .copied()
            .map(algorithm)
            .collect();
        let validations = algorithms
            .into_iter()
            .map(|alg| {
                let mut validation = Validation::new(alg);
                validation.leeway = skew.as_secs();
                validation.validate_exp = true;
                validation.validate_nbf = true;
                validation.required_spec_claims = ["exp", "iss", "aud"].map(str::to_owned).into();
                validation.iss = Some(HashSet::from([spec.issuer.clone()]));
                validation.aud = Some(HashSet::from([spec.audience.clone()]));
                (alg, validation)
            })
            .collect();
        Ok(Self {
            keys: KeyCache::new(spec.issuer.clone(), client, metrics).with_max_age(max_key_age),
            spec: spec.clone(),
            validations,
            refresh,
            max_token_bytes: DEFAULT_MAX_TOKEN_BYTES,
        })
    }

    /// The settings this server enforces.
    pub fn spec(&self) -> &OAuthSpec {
        &self.spec
    }

    /// The same server with another shortest time between key fetches (tests).
    #[cfg(test)]
    pub(crate) fn with_min_refetch(mut self, min_refetch: Duration) -> Self {
        self.keys = self.keys.with_min_refetch(min_refetch);
        self
    }

    /// How often the key set is fetched again (`jwksRefresh`).
    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    /// The same resource server refusing tokens longer than `max_token_bytes` before parsing
    /// them (`limits.maxTokenBytes`; default [`DEFAULT_MAX_TOKEN_BYTES`]).
    pub fn with_max_token_bytes(mut self, max_token_bytes: usize) -> Self {
        self.max_token_bytes = max_token_bytes;
        self
    }

    /// Fetches the key set now (the scheduled refresh).
    pub async fn refresh_keys(&self) {
        self.keys.refresh().await;
    }

    /// Whether `token` admits a request, and whose it is.
    ///
    /// # Errors
    /// [`Rejection::InvalidToken`], [`Rejection::InsufficientScope`] or
    /// [`Rejection::Unavailable`], as the module doc describes.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Rejection> {
        // Checked before anything parses it, and nothing of it is echoed (issue 39, item 8).
        if token.len() > self.max_token_bytes {
            return Err(Rejection::InvalidToken(format!(
                "the token is longer than {} bytes (limits.maxTokenBytes)",
                self.max_token_bytes
            )));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Rejection::InvalidToken(format!("not a signed JWT: {}", reason(&e))))?;
        // RFC 9068 section 2.1: `at+jwt`, or its media type form; compared without case.
        if self.spec.require_access_token_type
            && !header.typ.as_deref().is_some_and(|typ| {
                typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("application/at+jwt")
            })
        {
            return Err(Rejection::InvalidToken(
                "the token is not an access token: its typ is not at+jwt (RFC 9068; oauth.requireAccessTokenType)".to_owned(),
            ));
        }
        let Some((_, validation)) = self.validations.iter().find(|(alg, _)| *alg == header.alg)
        else {
            return Err(Rejection::InvalidToken(format!(
                "signature algorithm {:?} is not allowed",
                header.alg
            )));
        };
        let key = self
            .keys
            .key_for(header.kid.as_deref())
            .await
            .map_err(|e| match e {
                KeyError::Unknown => Rejection::InvalidToken(e.to_string()),
                KeyError::Unavailable(_) => Rejection::Unavailable(e.to_string()),
            })?;
        if key.algorithm.is_some_and(|bound| bound != header.alg) {
            return Err(Rejection::InvalidToken(format!(
                "signature algorithm {:?} does not match the key's",
                header.alg
            )));
        }
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, validation)
            .map_err(|e| Rejection::InvalidToken(reason(&e)))?;
        let principal = Principal::from(data.claims);
        let missing = principal.missing_scopes(&self.spec.required_scopes);
        if !missing.is_empty() {
            return Err(Rejection::InsufficientScope(
                missing.into_iter().map(str::to_owned).collect(),
            ));
        }
        Ok(principal)
    }

    /// The protected resource metadata document (RFC 9728 section 2).
    pub fn metadata(&self) -> Value {
        let mut document = json!({
            "resource": self.spec.audience,
            "authorization_servers": [self.spec.issuer],
            "bearer_methods_supported": ["header"],
        });
        if !self.spec.required_scopes.is_empty() {
            document["scopes_supported"] = json!(self.spec.required_scopes);
        }
        document
    }
}

/// The `jsonwebtoken` algorithm of a CRD algorithm name.
fn algorithm(alg: JwsAlgorithm) -> Algorithm {
    match alg {
        JwsAlgorithm::RS256 => Algorithm::RS256,
        JwsAlgorithm::RS384 => Algorithm::RS384,
        JwsAlgorithm::RS512 => Algorithm::RS512,
        JwsAlgorithm::PS256 => Algorithm::PS256,
        JwsAlgorithm::PS384 => Algorithm::PS384,
        JwsAlgorithm::PS512 => Algorithm::PS512,
        JwsAlgorithm::ES256 => Algorithm::ES256,
        JwsAlgorithm::ES384 => Algorithm::ES384,
        JwsAlgorithm::EdDSA => Algorithm::EdDSA,
    }
}

/// A client-facing reason: which check failed, never the token or a key.
fn reason(error: &jsonwebtoken::errors::Error) -> String {
    match error.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => "the token's issuer (iss) is not the configured one".into(),
        ErrorKind::InvalidAudience => {
            "the token's audience (aud) does not include this resource".into()
        }
        ErrorKind::InvalidSignature => "the signature does not verify".into(),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            "the signature algorithm does not fit the key".into()
        }
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("the token's {claim} claim is malformed"),
        ErrorKind::InvalidAlgorithmName => "unknown signature algorithm".into(),
        _ => "the token is malformed".into(),
    }
}

#[cfg(test)]
#[path = "resource_server_tests.rs"]
mod tests;
