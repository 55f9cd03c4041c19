//! OAuth 2.1 resource-server settings: which authorization server issues the access tokens the
//! proxy accepts, for which audience and scopes (MCP 2025-06-18 and later, "Authorization";
//! RFC 9068 JWT access tokens, RFC 8707 resource indicators, RFC 9728 protected resource
//! metadata; issue 15). In the CRD as `spec.proxy.auth.oauth` and in the proxy's config as
//! `downstreamAuth.oauth`, unchanged.
//!
//! Not responsible for: validating tokens (the proxy's `auth` module does).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{DurationError, DurationString};

/// Access tokens the proxy accepts: JWTs signed by `issuer`'s keys, for `audience`, carrying
/// every scope in `requiredScopes`.
///
/// Example:
/// `{issuer: https://auth.example.com/, audience: https://weather.example.com/mcp,
/// requiredScopes: [mcp:tools]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuthSpec {
    /// The authorization server's issuer identifier, exactly as it appears in the tokens' `iss`
    /// claim and in its metadata, for example `https://auth.example.com/` (a trailing slash
    /// matters). The proxy finds the signing keys from the issuer's metadata
    /// (`/.well-known/oauth-authorization-server`, RFC 8414, else
    /// `/.well-known/openid-configuration`) and lists the issuer as the authorization server in
    /// its protected resource metadata. Use `https` outside a test set-up.
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('^https?://[^/?#\\\\s]+(/[^?#\\\\s]*)?$')", "message": "spec.proxy.auth.oauth.issuer must be an http(s) URL without query or fragment, for example https://auth.example.com/"}]))]
    pub issuer: String,
    /// The canonical URI of this MCP endpoint as clients reach it, for example
    /// `https://weather.example.com/mcp`: a token is accepted only when its `aud` claim
    /// contains it (RFC 8707; MCP "Token Audience Binding"). Also the `resource` of the
    /// protected resource metadata, whose URL is derived from it
    /// (`https://weather.example.com/.well-known/oauth-protected-resource/mcp`).
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('^https?://[^/?#\\\\s]+(/[^?#\\\\s]*)?$')", "message": "spec.proxy.auth.oauth.audience must be an http(s) URL without query or fragment, for example https://weather.example.com/mcp"}]))]
    pub audience: String,
    /// Scopes every token must carry (in its `scope` or `scp` claim), for example `[mcp:tools]`.
    /// A valid token without one of them gets HTTP 403 `insufficient_scope` naming them.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(s, s.matches('^[!#-\\\\[\\\\]-~]+$'))", "message": "spec.proxy.auth.oauth.requiredScopes entries must be scope tokens: printable ASCII without spaces, quotes or backslashes (RFC 6749 section 3.3)"}]))]
    pub required_scopes: Vec<String>,
    /// Signature algorithms a token may use. Only asymmetric ones exist here: `none` and the
    /// HMAC algorithms are never accepted. Default: every listed algorithm.
    #[serde(default = "all_algorithms", skip_serializing_if = "is_all_algorithms")]
    #[schemars(length(min = 1, max = 9))]
    pub allowed_algorithms: Vec<JwsAlgorithm>,
    /// How often the issuer's keys are fetched again, so a rotated key is known before a token
    /// needs it, for example `5m`. A token naming a key the proxy does not know also triggers a
    /// fetch (at most one every 2s). Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('10s') && duration(self) <= duration('24h')", "message": "spec.proxy.auth.oauth.jwksRefresh must be at least 10s and at most 24h"}]))]
    pub jwks_refresh: Option<DurationString>,
    /// Clock difference tolerated when checking `exp` and `nbf`, for example `30s`. Default
    /// `60s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) <= duration('5m')", "message": "spec.proxy.auth.oauth.clockSkew must be at most 5m"}]))]
    pub clock_skew: Option<DurationString>,
    /// How long signing keys fetched from the issuer stay trusted when every fetch since has
    /// failed, for example `6h` (issue 39, item 8): past it the proxy fails closed (HTTP 503,
    /// counted in `berth_proxy_invalid_messages_total{reason="auth_unavailable"}`, alert `BerthAuthUnavailable`) until a fetch
    /// succeeds, so a key the issuer revoked while unreachable is not trusted forever. Default
    /// `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('1m') && duration(self) <= duration('720h')", "message": "spec.proxy.auth.oauth.maxKeyAge must be at least 1m and at most 720h"}]))]
    pub max_key_age: Option<DurationString>,
    /// Accept only access tokens whose JOSE header `typ` is `at+jwt` (RFC 9068 section 2.1),
    /// so an ID token or another JWT the issuer signed cannot be used as an access token.
    /// Default `false`: many authorization servers issue access tokens typed `JWT`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_access_token_type: bool,
}

/// A JWS signature algorithm (RFC 7518 section 3, RFC 8037), asymmetric only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum JwsAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// Ed25519.
    EdDSA,
}

/// Every [`JwsAlgorithm`], the default of `allowedAlgorithms`.
pub fn all_algorithms() -> Vec<JwsAlgorithm> {
    use JwsAlgorithm::*;
    vec![
        RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA,
    ]
}

fn is_all_algorithms(algorithms: &Vec<JwsAlgorithm>) -> bool {
    *algorithms == all_algorithms()
}

/// Default of `jwksRefresh`.
pub const DEFAULT_JWKS_REFRESH: Duration = Duration::from_secs(300);
/// Default of `clockSkew`.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Default of `maxKeyAge`.
pub const DEFAULT_MAX_KEY_AGE: Duration = Duration::from_secs(24 * 3600);

impl OAuthSpec {
    /// `jwksRefresh`, or [`DEFAULT_JWKS_REFRESH`].
    ///
    /// # Errors
    /// [`DurationError`] when the string does not parse.
    pub fn jwks_refresh(&self) -> Result<Duration, DurationError> {
        self.jwks_refresh
            .as_ref()
            .map_or(Ok(DEFAULT_JWKS_REFRESH), DurationString::to_duration)
    }

    /// `clockSkew`, or [`DEFAULT_CLOCK_SKEW`].
    ///
    /// # Errors
    /// [`DurationError`] when the string does not parse.
    pub fn clock_skew(&self) -> Result<Duration, DurationError> {
        self.clock_skew
            .as_ref()
            .map_or(Ok(DEFAULT_CLOCK_SKEW), DurationString::to_duration)
    }

    /// `maxKeyAge`, or [`DEFAULT_MAX_KEY_AGE`].
    ///
    /// # Errors
    /// [`DurationError`] when the string does not parse.
    pub fn max_key_age(&self) -> Result<Duration, DurationError> {
        self.max_key_age
            .as_ref()
            .map_or(Ok(DEFAULT_MAX_KEY_AGE), DurationString::to_duration)
    }

    /// The protected resource metadata URL (RFC 9728 section 3.1): the `audience`'s origin,
    /// then `/.well-known/oauth-protected-resource`, then the audience's path (none for a root
    /// audience). For example `https://weather.example.com/mcp` gives
    /// `https://weather.example.com/.well-known/oauth-protected-resource/mcp`.
    pub fn resource_metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.audience);
        format!(
            "{origin}{}{}",
            RESOURCE_METADATA_PATH,
            path.trim_end_matches('/')
        )
    }

    /// The audience's path, `""` for a root audience: the suffix of the path-suffixed metadata
    /// route.
    pub fn audience_path(&self) -> &str {
        split_origin(&self.audience).1.trim_end_matches('/')
    }
}

/// The well-known path of protected resource metadata (RFC 9728 section 3).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Splits `scheme://authority/path` into `scheme://authority` and `/path` (or `""`).
fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(slash) => url.split_at(after_scheme + slash),
        None => (url, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(audience: &str) -> OAuthSpec {
        OAuthSpec {
            issuer: "https://auth.example.com/".into(),
            audience: audience.into(),
            required_scopes: vec![],
            allowed_algorithms: all_algorithms(),
            jwks_refresh: None,
            clock_skew: None,
            max_key_age: None,
            require_access_token_type: false,
        }
    }

    #[test]
    fn resource_metadata_url_inserts_the_well_known_path_before_the_audience_path() {
        assert_eq!(
            spec("https://weather.example.com/mcp").resource_metadata_url(),
            "https://weather.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            spec("https://weather.example.com").resource_metadata_url(),
            "https://weather.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            spec("http://127.0.0.1:8080/").resource_metadata_url(),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert_eq!(spec("https://a.example/x/mcp/").audience_path(), "/x/mcp");
    }

    #[test]
    fn defaults_round_trip_without_being_written() {
        let parsed: OAuthSpec = serde_yaml::from_str(
            "{issuer: 'https://auth.example.com/', audience: 'https://a/mcp'}",
        )
        .expect("parses");
        assert_eq!(parsed, spec("https://a/mcp"));
        assert_eq!(
            parsed.jwks_refresh().expect("default"),
            DEFAULT_JWKS_REFRESH
        );
        assert_eq!(parsed.clock_skew().expect("default"), DEFAULT_CLOCK_SKEW);
        let text = serde_yaml::to_string(&parsed).expect("serializes");
        assert!(!text.contains("allowedAlgorithms"), "{text}");
        let err = serde_yaml::from_str::<OAuthSpec>(
            "{issuer: 'https://i/', audience: 'https://a/mcp', allowedAlgorithms: [HS256]}",
        )
        .expect_err("HS256 is not an allowed algorithm");
        assert!(err.to_string().contains("HS256"), "{err}");
    }
}
