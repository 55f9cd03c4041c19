//! `spec.upstream.securityContext`: the few security settings of the upstream container a user
//! may change, each limited by CEL to what the Pod Security Standard `restricted` profile allows,
//! so every generated pod is admitted in a namespace that enforces it (issue 5 "API").
//!
//! Not responsible for: the settings the operator always applies (`runAsNonRoot`, no privilege
//! escalation, every capability dropped, `RuntimeDefault` seccomp; see the operator's
//! `build::deployment`).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// User and group id of the proxy container, which the server may not use (issue 40, item 7).
pub const PROXY_RUN_AS_ID: i64 = 65533;

/// Security overrides of the upstream container, within the `restricted` Pod Security profile.
///
/// Example: `{runAsUser: 1000, runAsGroup: 1000, readOnlyRootFilesystem: true}`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSecurityContext {
    /// User id the server runs as, for images that need a particular one (for example `1000`).
    /// Must not be `0` (root) nor `65533` (the proxy's user: the stdio host serves only that
    /// user, so the server may not run as it; issue 40, item 7). Default: the pod's `65532`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != 0").message("spec.upstream.securityContext.runAsUser must not be 0 (root is not allowed by the restricted Pod Security profile)"))]
    #[x_kube(validation = Rule::new("self != 65533").message("spec.upstream.securityContext.runAsUser must not be 65533, the proxy's user"))]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_user: Option<i64>,
    /// Primary group id of the server's processes, for example `1000`. Default: the pod's
    /// `65532`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_group: Option<i64>,
    /// Whether the server's root filesystem is read-only. Default `false` (many MCP servers
    /// write caches under their home directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    /// Must be `true` if set: the restricted profile requires non-root containers. Default
    /// `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == true").message("spec.upstream.securityContext.runAsNonRoot must be true (the restricted Pod Security profile requires non-root containers)"))]
    pub run_as_non_root: Option<bool>,
    /// Must be `false` if set: the restricted profile forbids privilege escalation. Default
    /// `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == false").message("spec.upstream.securityContext.allowPrivilegeEscalation must be false (the restricted Pod Security profile forbids privilege escalation)"))]
    pub allow_privilege_escalation: Option<bool>,
    /// Must be `false` if set: privileged containers are not allowed. Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == false").message("spec.upstream.securityContext.privileged must be false (the restricted Pod Security profile forbids privileged containers)"))]
    pub privileged: Option<bool>,
    /// Linux capabilities added back after the operator drops `ALL`. Only `NET_BIND_SERVICE`
    /// is allowed (the restricted profile's only addable capability). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<UpstreamCapabilities>,
}

/// Capabilities of the upstream container: `add` may hold only `NET_BIND_SERVICE`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamCapabilities {
    /// Capabilities to add, for example `["NET_BIND_SERVICE"]`. Anything else is rejected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    #[x_kube(validation = Rule::new("self.all(c, c == 'NET_BIND_SERVICE')").message("spec.upstream.securityContext.capabilities.add may only contain NET_BIND_SERVICE (the restricted Pod Security profile allows no other capability)"))]
    pub add: Vec<String>,
}
