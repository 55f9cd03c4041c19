//! How clients authenticate to the proxy's MCP endpoint (`downstreamAuth`): a static bearer
//! token or OAuth 2.1 access tokens ([`super::oauth`]), and the check that exactly one is set.
//!
//! Not responsible for: checking a client's credential (the proxy's `access::auth` does).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::ProxyConfigError;
use super::oauth;
use crate::duration::DurationError;

/// How clients authenticate to the proxy: exactly one of a static bearer token or OAuth 2.1
/// access tokens (checked by [`ProxyConfig::check`](crate::ProxyConfig::check)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DownstreamAuth {
    /// Name of an environment variable of the proxy holding the bearer token clients must send
    /// as `Authorization: Bearer <token>` (the operator fills it from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// JWT access tokens from an OAuth 2.1 authorization server (issue 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<oauth::OAuthSpec>,
}

impl DownstreamAuth {
    /// Checks that exactly one way of authenticating is set and that its fields are usable.
    ///
    /// # Errors
    /// [`ProxyConfigError::DownstreamAuth`] naming the field.
    pub fn check(&self) -> Result<(), ProxyConfigError> {
        let bad = |why: &str| Err(ProxyConfigError::DownstreamAuth(why.to_owned()));
        match (&self.bearer_token_env, &self.oauth) {
            (Some(_), Some(_)) => bad("set exactly one of bearerTokenEnv and oauth, not both"),
            (None, None) => bad("set one of bearerTokenEnv and oauth"),
            (Some(var), None) if var.trim().is_empty() => bad("bearerTokenEnv is empty"),
            (Some(_), None) => Ok(()),
            (None, Some(oauth)) => {
                let url = |u: &str| u.starts_with("https://") || u.starts_with("http://");
                if !url(&oauth.issuer) {
                    return bad("oauth.issuer must be an http(s) URL");
                }
                if !url(&oauth.audience) {
                    return bad("oauth.audience must be an http(s) URL");
                }
                if oauth.allowed_algorithms.is_empty() {
                    return bad("oauth.allowedAlgorithms is empty");
                }
                if let Some(scope) = oauth.required_scopes.iter().find(|s| {
                    s.is_empty() || s.bytes().any(|b| b <= b' ' || b == b'"' || b == b'\\')
                }) {
                    return Err(ProxyConfigError::DownstreamAuth(format!(
                        "oauth.requiredScopes entry {scope:?} is not a scope token"
                    )));
                }
                let duration = |r: Result<Duration, DurationError>, field: &str| {
                    r.map(drop).map_err(|e| {
                        ProxyConfigError::DownstreamAuth(format!("oauth.{field}: {e}"))
                    })
                };
                duration(oauth.jwks_refresh(), "jwksRefresh")?;
                duration(oauth.clock_skew(), "clockSkew")
            }
        }
    }

    /// A static bearer token read from environment variable `var`.
    pub fn bearer(var: impl Into<String>) -> Self {
        Self {
            bearer_token_env: Some(var.into()),
            oauth: None,
        }
    }
}
