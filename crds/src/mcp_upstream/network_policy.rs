//! `spec.networkPolicy`: an opt-in NetworkPolicy for the generated pods (issue 5 "API").
//!
//! Not responsible for: rendering the policy (the operator's `build::network_policy`).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A NetworkPolicy selecting the McpUpstream's pods: ingress only to the proxy's MCP and admin
/// ports; egress only to DNS (UDP and TCP 53, any destination) and the listed destinations.
/// The pod's loopback (proxy to HTTP sidecar) is never filtered.
///
/// Example: `{enabled: true, egress: [{cidr: 203.0.113.0/24, ports: [{port: 443}]}]}`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Whether the operator creates the NetworkPolicy `<name>`. Turning it off deletes it.
    /// Default `false`.
    #[serde(default)]
    pub enabled: bool,
    /// Destinations the pods may reach besides DNS. Default: none (DNS only). At most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub egress: Vec<EgressRule>,
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
