//! The Deployment: one pod per McpUpstream with the berth proxy as the main container and the
//! upstream MCP server as a native sidecar.
//!
//! Pod shape (see DESIGN.md, "The pod"):
//! - init container `upstream` with `restartPolicy: Always` (a native sidecar: started before
//!   the proxy, kept running, stopped after it), the user's digest-pinned image, and a TCP
//!   startup probe so the proxy starts only once the upstream listens;
//! - container `proxy`: MCP on port `mcp` (8080), `/healthz` (liveness: the process only) and
//!   `/readyz` (readiness: upstream session initialized, tools listed) on port `admin` (9090),
//!   the ConfigMap mounted read-only at [`CONFIG_DIR`];
//! - "restricted" Pod Security Standard: non-root, no privilege escalation, no capabilities,
//!   `RuntimeDefault` seccomp, and a read-only root filesystem for the proxy.
//!
//! Not responsible for: the config's content ([`super::config_map`]).

use std::collections::BTreeMap;

use berth_crds::{McpUpstreamSpec, PROXY_CONFIG_KEY};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile,
    SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Owner;
use super::config_hash::config_hash;
use crate::labels;

/// Pod-template annotation carrying [`config_hash`] of the rendered proxy config, so a config
/// change alone rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "berth.dev/config-hash";

/// Name of the upstream sidecar (an init container with `restartPolicy: Always`).
pub const UPSTREAM_CONTAINER: &str = "upstream";
/// Name of the proxy container.
pub const PROXY_CONTAINER: &str = "proxy";
/// Name of the upstream sidecar's port.
pub const UPSTREAM_PORT_NAME: &str = "upstream";
/// Name of the proxy's MCP port (the Service targets it).
pub const MCP_PORT_NAME: &str = "mcp";
/// Name of the proxy's admin port (`/metrics`, `/healthz`, `/readyz`).
pub const ADMIN_PORT_NAME: &str = "admin";
/// Directory the ConfigMap is mounted at in the proxy container.
pub const CONFIG_DIR: &str = "/etc/berth";
/// User and group the pod runs as unless an image needs otherwise: the conventional
/// "nonroot" id of distroless images. Set so that images built to run as root (common for MCP
/// servers) still start under `runAsNonRoot` instead of failing with CreateContainerConfigError.
pub const RUN_AS_ID: i64 = 65532;

const CONFIG_VOLUME: &str = "config";

/// The Deployment of the McpUpstream `owner`, named after it, one replica.
pub(super) fn deployment(
    owner: &Owner,
    spec: &McpUpstreamSpec,
    proxy_image: &str,
    config_map: &ConfigMap,
) -> Deployment {
    let rendered = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(PROXY_CONFIG_KEY))
        .map_or("", String::as_str);
    let template_metadata = ObjectMeta {
        labels: Some(labels::labels(&owner.name)),
        annotations: Some(BTreeMap::from([(
            CONFIG_HASH_ANNOTATION.to_owned(),
            config_hash(rendered.as_bytes()),
        )])),
        ..ObjectMeta::default()
    };
    let config_map_name = config_map.metadata.name.clone().unwrap_or_default();
    Deployment {
        metadata: owner.child_metadata(owner.name.clone()),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels::selector(&owner.name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(template_metadata),
                spec: Some(pod_spec(spec, proxy_image, config_map_name)),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

fn pod_spec(spec: &McpUpstreamSpec, proxy_image: &str, config_map_name: String) -> PodSpec {
    PodSpec {
        init_containers: Some(vec![upstream_container(spec)]),
        containers: vec![proxy_container(proxy_image, spec)],
        volumes: Some(vec![Volume {
            name: CONFIG_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name,
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }]),
        // Neither container talks to the Kubernetes API, and Service environment variables
        // would only leak into the upstream's environment.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_ID),
            run_as_group: Some(RUN_AS_ID),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    }
}

/// The upstream MCP server as a native sidecar.
fn upstream_container(spec: &McpUpstreamSpec) -> Container {
    let upstream = &spec.upstream;
    Container {
        name: UPSTREAM_CONTAINER.to_owned(),
        image: Some(upstream.image.clone()),
        args: (!upstream.args.is_empty()).then(|| upstream.args.clone()),
        env: (!upstream.env.is_empty()).then(|| upstream.env.clone()),
        ports: Some(vec![ContainerPort {
            name: Some(UPSTREAM_PORT_NAME.to_owned()),
            container_port: upstream.port,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        restart_policy: Some("Always".to_owned()),
        // Up to 2 minutes for the server to listen (npm-based servers can be slow to start).
        startup_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(UPSTREAM_PORT_NAME.to_owned()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(2),
            failure_threshold: Some(60),
            ..Probe::default()
        }),
        security_context: Some(container_security_context(false)),
        ..Container::default()
    }
}

/// The berth proxy. Secret-backed upstream headers reach it as environment variables filled by
/// the kubelet from the Secret (see [`super::config_map::header_env_var`]).
fn proxy_container(proxy_image: &str, spec: &McpUpstreamSpec) -> Container {
    let header_env: Vec<EnvVar> = spec
        .upstream
        .headers
        .iter()
        .enumerate()
        .filter_map(|(index, header)| {
            let source = header.value_from.as_ref()?;
            Some(EnvVar {
                name: super::config_map::header_env_var(index),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(source.secret_key_ref.clone()),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
        })
        .collect();
    Container {
        env: (!header_env.is_empty()).then_some(header_env),
        name: PROXY_CONTAINER.to_owned(),
        image: Some(proxy_image.to_owned()),
        args: Some(vec![
            "--config".to_owned(),
            format!("{CONFIG_DIR}/{PROXY_CONFIG_KEY}"),
        ]),
        ports: Some(vec![
            tcp_port(MCP_PORT_NAME, spec.proxy.port),
            tcp_port(ADMIN_PORT_NAME, spec.proxy.admin_port),
        ]),
        liveness_probe: Some(admin_probe("/healthz", 10, 3)),
        readiness_probe: Some(admin_probe("/readyz", 5, 1)),
        volume_mounts: Some(vec![VolumeMount {
            name: CONFIG_VOLUME.to_owned(),
            mount_path: CONFIG_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        security_context: Some(container_security_context(true)),
        ..Container::default()
    }
}

fn tcp_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

fn admin_probe(path: &str, period_seconds: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(ADMIN_PORT_NAME.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

/// A container security context that passes the "restricted" Pod Security Standard.
fn container_security_context(read_only_root_filesystem: bool) -> SecurityContext {
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

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    }
}
