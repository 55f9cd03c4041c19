//! What the pod's containers share, whichever transport shapes the pod: the names of the
//! upstream and proxy containers, the users the pod and the proxy run as, and the security
//! context that passes the "restricted" Pod Security Standard.
//!
//! Not responsible for: the containers themselves ([`super::deployment`], [`super::stdio`]).

use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile, SecurityContext};

/// Name of the upstream sidecar (an init container with `restartPolicy: Always`).
pub const UPSTREAM_CONTAINER: &str = "upstream";
/// Name of the proxy container.
pub const PROXY_CONTAINER: &str = "proxy";
/// User and group the pod runs as unless an image needs otherwise: the conventional
/// "nonroot" id of distroless images. Set so that images built to run as root (common for MCP
/// servers) still start under `runAsNonRoot` instead of failing with CreateContainerConfigError.
pub const RUN_AS_ID: i64 = 65532;
/// User and group of the proxy container: another user than the server's, so that the stdio
/// host serves only the proxy (`stdio-host --allow-uid`, peer credentials) and a server's
/// process can be told from the proxy (issue 40, item 7). `spec.upstream.securityContext` may
/// not choose it (CEL on the CRD).
pub const PROXY_RUN_AS_ID: i64 = berth_crds::PROXY_RUN_AS_ID;

/// A container security context that passes the "restricted" Pod Security Standard.
pub(super) fn container_security_context(read_only_root_filesystem: bool) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        read_only_root_filesystem: read_only_root_filesystem.then_some(true),
        ..SecurityContext::default()
    }
}

/// The `RuntimeDefault` seccomp profile, for the pod and each of its containers.
pub(super) fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    }
}
