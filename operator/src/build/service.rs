//! The Service: a stable ClusterIP name in front of the proxy's MCP port.
//!
//! No session affinity, on purpose (field case BR-35): every replica accepts every client
//! session because session ids are signed with the shared key of [`super::secret`], and
//! affinity would pin every client behind one ingress or gateway to a single pod.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::MCP_PORT_NAME;
use super::owner::Owner;
use crate::labels;

/// The Service of the McpUpstream `owner`: named after it, `port` (`spec.proxy.port`) `mcp` to the pods' `mcp`
/// port, selecting the pods by [`labels::selector`].
pub(super) fn service(owner: &Owner, port: i32) -> Service {
    Service {
        metadata: owner.child_metadata(owner.name.clone()),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            session_affinity: Some("None".to_owned()),
            selector: Some(labels::selector(&owner.name)),
            ports: Some(vec![ServicePort {
                name: Some(MCP_PORT_NAME.to_owned()),
                port,
                target_port: Some(IntOrString::String(MCP_PORT_NAME.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
