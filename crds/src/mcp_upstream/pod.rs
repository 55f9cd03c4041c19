//! `spec.pod`: scheduling and metadata overrides of the generated pods (issue 5 "API").
//!
//! Not responsible for: the containers (`spec.upstream`, `spec.proxy`) or the labels the
//! operator needs to select its pods, which these overrides can never replace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, Toleration};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Label keys the operator sets on every pod; the Deployment and Service select pods by
/// them, so `spec.pod.labels` cannot set them.
pub const RESERVED_POD_LABELS: [&str; 4] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "berth.dev/mcpupstream",
];

/// Annotation keys the operator sets on every pod template (`berth.dev/config-hash` rolls the
/// pods when the proxy config changes), so `spec.pod.annotations` cannot set them.
pub const RESERVED_POD_ANNOTATIONS: [&str; 1] = ["berth.dev/config-hash"];

/// Where the pods run and what extra metadata they carry. Every field is optional; unset fields
/// leave the Kubernetes defaults.
///
/// Example:
/// ```yaml
/// pod:
///   nodeSelector: {kubernetes.io/arch: amd64}
///   tolerations: [{key: dedicated, operator: Equal, value: mcp, effect: NoSchedule}]
///   priorityClassName: mcp-critical
///   labels: {team: search}
/// ```
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Node labels a node must have to run the pods, as in a Pod's `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate, as in a Pod's `tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity, as in a Pod's `affinity`; for example a
    /// `podAntiAffinity` that spreads replicas over nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Name of a PriorityClass for the pods, for example `system-cluster-critical`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// ServiceAccount the pods run as, in the McpUpstream's namespace. Its API token is still not
    /// mounted (neither container talks to the Kubernetes API); use it for identity bound to the
    /// ServiceAccount, such as cloud workload identity, or for its image pull secrets.
    /// Default: the namespace's `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Secrets holding registry credentials for pulling the upstream and proxy images, for
    /// example `[{name: regcred}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Extra labels of the pods, for example `{team: search}`. The operator's own labels
    /// (`app.kubernetes.io/name`, `app.kubernetes.io/instance`, `app.kubernetes.io/managed-by`,
    /// `berth.dev/mcpupstream`) cannot be set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by', 'berth.dev/mcpupstream']))").message("spec.pod.labels cannot set the operator's own labels app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by or berth.dev/mcpupstream"))]
    #[schemars(extend("maxProperties" = 64))]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations of the pods, for example
    /// `{prometheus.io/scrape: "true"}`. `berth.dev/config-hash` cannot be set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("!('berth.dev/config-hash' in self)").message("spec.pod.annotations cannot set berth.dev/config-hash (the operator's own annotation)"))]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
}
