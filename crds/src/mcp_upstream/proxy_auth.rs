//! `spec.proxy.auth`: how clients authenticate to the proxy (issue 5 "API").
//!
//! Not responsible for: checking tokens (the proxy, through `downstreamAuth` in its config).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Client authentication on the proxy's MCP endpoint.
///
/// Example: `{bearerTokenSecretRef: {name: weather-clients, key: token}}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyAuth {
    /// A key of a Secret in the McpUpstream's namespace holding the bearer token every client
    /// must send as `Authorization: Bearer <token>`. The kubelet passes it to the proxy as the
    /// environment variable `BERTH_DOWNSTREAM_TOKEN`; it never appears in the ConfigMap, status,
    /// Events or logs. Changing the Secret's value takes effect when the pods restart.
    pub bearer_token_secret_ref: SecretKeyReference,
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
