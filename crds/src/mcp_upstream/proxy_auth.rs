//! `spec.proxy.auth`: how clients authenticate to the proxy (issue 5 "API").
//!
//! Not responsible for: checking tokens (the proxy, through `downstreamAuth` in its config).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Client authentication on the proxy's MCP endpoint: exactly one of a static bearer token
/// (simple set-ups) or OAuth 2.1 access tokens (MCP "Authorization").
///
/// Examples: `{bearerTokenSecretRef: {name: weather-clients, key: token}}`;
/// `{oauth: {issuer: https://auth.example.com/, audience: https://weather.example.com/mcp,
/// requiredScopes: [mcp:tools]}}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.bearerTokenSecretRef) != has(self.oauth)").message("spec.proxy.auth must set exactly one of bearerTokenSecretRef and oauth"))]
pub struct ProxyAuth {
    /// A key of a Secret in the McpUpstream's namespace holding the bearer token every client
    /// must send as `Authorization: Bearer <token>`. The kubelet passes it to the proxy as the
    /// environment variable `BERTH_DOWNSTREAM_TOKEN`; it never appears in the ConfigMap, status,
    /// Events or logs. Changing the Secret's value takes effect when the pods restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_secret_ref: Option<SecretKeyReference>,
    /// OAuth 2.1 resource server: the proxy accepts JWT access tokens that `issuer` signed for
    /// `audience` with the `requiredScopes`, serves its protected resource metadata (RFC 9728)
    /// at `/.well-known/oauth-protected-resource` and the path-suffixed form, and answers a
    /// request without a valid token with HTTP 401 and
    /// `WWW-Authenticate: Bearer resource_metadata="…"`, one without a required scope with 403
    /// `insufficient_scope`. The client's token never reaches the upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<crate::proxy_config::oauth::OAuthSpec>,
}

/// A key of a Secret in the same namespace.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Name of the Secret, for example `weather-clients`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret, for example `token`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}
