//! The NetworkPolicy `<name>` (`spec.networkPolicy`): ingress only to the proxy's MCP and
//! admin ports, on by default so no other pod can walk around the proxy to the upstream's own
//! port (issue 40, item 3); with `enabled`, egress only to DNS and the listed destinations.
//!
//! Not responsible for: deleting it when turned off ([`crate::apply`] does that).

use berth_crds::{EgressRule, McpUpstreamSpec, Protocol};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::{ADMIN_PORT_NAME, MCP_PORT_NAME};
use super::owner::Owner;
use crate::labels;

/// Port of DNS, allowed over UDP and TCP to any destination (the cluster DNS Service's address
/// is not known to the operator).
pub const DNS_PORT: i32 = 53;

/// The NetworkPolicy of `owner`: ingress-only unless `spec.networkPolicy.enabled`, which adds
/// the egress rules; `None` when both `ingress` and `enabled` are off (issue 40, item 3).
pub(super) fn network_policy(owner: &Owner, spec: &McpUpstreamSpec) -> Option<NetworkPolicy> {
    if !spec.network_policy.wanted() {
        return None;
    }
    let egress = spec.network_policy.enabled.then(|| egress_rules(spec));
    let ingress = NetworkPolicyIngressRule {
        from: None,
        ports: Some(vec![
            port(IntOrString::String(MCP_PORT_NAME.to_owned()), Protocol::Tcp),
            port(
                IntOrString::String(ADMIN_PORT_NAME.to_owned()),
                Protocol::Tcp,
            ),
        ]),
    };
    let mut policy_types = vec!["Ingress".to_owned()];
    if egress.is_some() {
        policy_types.push("Egress".to_owned());
    }
    Some(NetworkPolicy {
        metadata: owner.child_metadata(owner.name.clone()),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels::selector(&owner.name)),
                ..LabelSelector::default()
            }),
            policy_types: Some(policy_types),
            ingress: Some(vec![ingress]),
            egress,
        }),
    })
}

/// DNS, then the destinations of `spec.networkPolicy.egress`.
fn egress_rules(spec: &McpUpstreamSpec) -> Vec<NetworkPolicyEgressRule> {
    let dns = NetworkPolicyEgressRule {
        ports: Some(vec![
            port(IntOrString::Int(DNS_PORT), Protocol::Udp),
            port(IntOrString::Int(DNS_PORT), Protocol::Tcp),
        ]),
        to: None,
    };
    let mut egress = vec![dns];
    egress.extend(spec.network_policy.egress.iter().map(egress_rule));
    egress
}

fn egress_rule(rule: &EgressRule) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: rule.cidr.clone(),
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: (!rule.ports.is_empty()).then(|| {
            rule.ports
                .iter()
                .map(|p| port(IntOrString::Int(p.port), p.protocol))
                .collect()
        }),
    }
}

fn port(port: IntOrString, protocol: Protocol) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(port),
        protocol: Some(protocol.as_str().to_owned()),
        end_port: None,
    }
}
