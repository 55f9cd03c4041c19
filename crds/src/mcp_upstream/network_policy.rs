//! `spec.networkPolicy`: the NetworkPolicy of the generated pods (issue 5 "API"): ingress
//! limited to the proxy's ports by default (issue 40, item 3), egress limited on request.
//!
//! Not responsible for: rendering the policy (the operator's `build::network_policy`).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The NetworkPolicy `<name>` selecting the McpUpstream's pods.
///
/// By default it admits ingress only to the proxy's MCP and admin ports, so no other pod can
/// call the upstream server's own port on the pod IP and skip authentication, grants, rate
/// limits, drift checks and audit (issue 40, item 3). With `enabled: true` it also limits
/// egress: to DNS (UDP and TCP 53, any destination) and the listed destinations. The pod's
/// loopback (proxy to HTTP sidecar) is never filtered. A NetworkPolicy takes effect only where
/// the cluster's network plugin enforces NetworkPolicies.
///
/// Examples: `{}` (the default: ingress to the proxy's ports only), `{ingress: false}` (no
/// NetworkPolicy), `{enabled: true, egress: [{cidr: 203.0.113.0/24, ports: [{port: 443}]}]}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Whether the NetworkPolicy `<name>` admits ingress only to the proxy's MCP and admin
    /// ports. Default `true`. `false` opts out: with `enabled: false` as well, no NetworkPolicy
    /// is created and an existing one the operator created is deleted; the upstream's port then
    /// answers any pod that can reach the pod IP, unless the server listens on loopback only
    /// (condition `UpstreamExposed`). McpUpstreams created before this default get the
    /// NetworkPolicy on their next reconcile.
    #[serde(default = "default_ingress")]
    pub ingress: bool,
    /// Whether the NetworkPolicy also limits egress, to DNS and the destinations in `egress`;
    /// `true` limits ingress too, whatever `ingress` says. Turning it off removes the egress
    /// rules. Default `false`.
    #[serde(default)]
    pub enabled: bool,
    /// Destinations the pods may reach besides DNS when `enabled`. Default: none (DNS only).
    /// At most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub egress: Vec<EgressRule>,
}

fn default_ingress() -> bool {
    true
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self {
            ingress: default_ingress(),
            enabled: false,
            egress: Vec::new(),
        }
    }
}

impl NetworkPolicySpec {
    /// Whether the operator creates the NetworkPolicy at all: `ingress` or `enabled`.
    pub fn wanted(&self) -> bool {
        self.ingress || self.enabled
    }
}

/// One allowed egress destination: an IP range and, optionally, ports.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressRule {
    /// Destination range in CIDR notation, network address first, for example `10.0.0.0/8`,
    /// `203.0.113.7/32` or `2001:db8::/32`; `0.0.0.0/0` is any IPv4 destination.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isCIDR(self) && cidr(self) == cidr(self).masked()").message("spec.networkPolicy.egress[].cidr must be a CIDR with its network address, for example 10.0.0.0/8 or 2001:db8::/32"))]
    pub cidr: String,
    /// Ports allowed to that range, for example `[{port: 443}]`. Default: every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ports: Vec<EgressPort>,
}

/// A destination port.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressPort {
    /// Port number, 1-65535.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: Protocol,
}

/// An IP protocol, spelled as Kubernetes spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Protocol {
    /// TCP.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
    /// SCTP.
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The Kubernetes spelling: `TCP`, `UDP` or `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}
