//! The Deployment: `spec.replicas` pods per McpUpstream with the berth proxy as the main
//! container and the upstream MCP server as a native sidecar.
//!
//! Pod shape for `StreamableHttp` (see README.md, "Design"; for `Stdio` see [`super::stdio`]):
//! - init container `upstream` with `restartPolicy: Always` (a native sidecar: started before
//!   the proxy, kept running, stopped after it), the user's digest-pinned image, and a TCP
//!   startup probe so the proxy starts only once the upstream listens;
//! - container `proxy`: MCP on port `mcp` (8080), `/healthz` (liveness: the process only) and
//!   `/readyz` (readiness: upstream session initialized, tools listed) on port `admin` (9090),
//!   the ConfigMap mounted read-only at [`CONFIG_DIR`];
//! - "restricted" Pod Security Standard: non-root, no privilege escalation, no capabilities,
//!   `RuntimeDefault` seccomp, and a read-only root filesystem for the proxy; the user's
//!   `spec.upstream.securityContext` can only change what stays within it (the CRD's CEL rules);
//! - the proxy gets the session key ([`super::secret`]), the client token
//!   (`spec.proxy.auth`) and Secret-backed upstream headers as environment variables, and with
//!   `spec.telemetry.traces` the standard `OTEL_*` variables (`telemetry_env`);
//! - `spec.pod` overrides (scheduling, extra labels and annotations) are merged in, the
//!   operator's own labels and annotation always winning ([`super::pod`]);
//! - `terminationGracePeriodSeconds` covers the proxy's drain and the longest request
//!   ([`termination_grace_seconds`]), so a rolling update loses no call.
//!
//! Not responsible for: the config's content ([`crate::render`], stored by
//! [`super::config_map`]).

use std::collections::BTreeMap;

use berth_crds::proxy_config::audit::{MCP_UPSTREAM_ENV, NAMESPACE_ENV};
use berth_crds::proxy_config::upstream::POD_IP_ENV;
use berth_crds::{McpUpstreamSpec, PROXY_CONFIG_KEY, TracesSpec, Transport};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SecretKeySelector, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

// Defined in `container`, which `stdio` uses too (issue 17); still reachable here.
pub use super::container::{PROXY_CONTAINER, PROXY_RUN_AS_ID, RUN_AS_ID, UPSTREAM_CONTAINER};

use super::config_hash::config_hash;
use super::container::{container_security_context, runtime_default_seccomp};
use super::owner::Owner;
use super::{pod, secret, stdio};
use crate::labels;
use crate::render::{DOWNSTREAM_TOKEN_ENV, header_env_var};

/// Pod-template annotation carrying [`config_hash`] of the rendered proxy config, so a config
/// change alone rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "berth.dev/config-hash";

/// Name of the upstream sidecar's port.
pub const UPSTREAM_PORT_NAME: &str = "upstream";
/// Name of the proxy's MCP port (the Service targets it).
pub const MCP_PORT_NAME: &str = "mcp";
/// Name of the proxy's admin port (`/metrics`, `/healthz`, `/readyz`).
pub const ADMIN_PORT_NAME: &str = "admin";
/// Directory the ConfigMap is mounted at in the proxy container.
pub const CONFIG_DIR: &str = "/etc/berth";
const CONFIG_VOLUME: &str = "config";

/// Time the proxy gets after its drain and its longest request to close the upstream session
/// and exit, before the kubelet's SIGKILL.
pub const SHUTDOWN_SLACK: std::time::Duration = std::time::Duration::from_secs(5);

/// The Deployment of the McpUpstream `owner`, named after it, with `spec.replicas` pods.
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
    let template_metadata = pod::template_metadata(
        &spec.pod,
        labels::labels(&owner.name),
        BTreeMap::from([(
            CONFIG_HASH_ANNOTATION.to_owned(),
            config_hash(rendered.as_bytes()),
        )]),
    );
    let config_map_name = config_map.metadata.name.clone().unwrap_or_default();
    Deployment {
        metadata: owner.child_metadata(owner.name.clone()),
        spec: DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels::selector(&owner.name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(template_metadata),
                spec: Some(pod_spec(&owner.name, spec, proxy_image, config_map_name)),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

fn pod_spec(
    name: &str,
    spec: &McpUpstreamSpec,
    proxy_image: &str,
    config_map_name: String,
) -> PodSpec {
    let mut volumes = vec![Volume {
        name: CONFIG_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name,
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let proxy = proxy_container(name, proxy_image, spec);
    let sidecar = upstream_container(spec);
    let init_containers = match spec.upstream.transport {
        Transport::StreamableHttp => vec![sidecar],
        Transport::Stdio => {
            volumes.extend(stdio::volumes());
            vec![
                stdio::install_container(proxy_image),
                stdio::stdio_host(spec, sidecar),
            ]
        }
    };
    let pod_spec = PodSpec {
        init_containers: Some(init_containers),
        containers: vec![proxy],
        volumes: Some(volumes),
        // Neither container talks to the Kubernetes API, and Service environment variables
        // would only leak into the upstream's environment.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        termination_grace_period_seconds: Some(termination_grace_seconds(spec)),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_ID),
            run_as_group: Some(RUN_AS_ID),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    };
    pod::with_overrides(pod_spec, &spec.pod)
}

/// The pod's `terminationGracePeriodSeconds`: `timeouts.drain` (the proxy reports not ready
/// and keeps serving), then `timeouts.maxCall` or `timeouts.call` (in-flight requests finish),
/// plus [`SHUTDOWN_SLACK`]. The timeouts were checked by validation; one that does not parse
/// counts as zero.
pub fn termination_grace_seconds(spec: &McpUpstreamSpec) -> i64 {
    let timeouts = &spec.timeouts;
    let total = timeouts.drain().unwrap_or_default()
        + timeouts.longest_call().unwrap_or_default()
        + SHUTDOWN_SLACK;
    i64::try_from(total.as_secs()).unwrap_or(i64::MAX)
}

/// The upstream MCP server as a native sidecar (for `Stdio`, [`stdio::stdio_host`] reshapes
/// it): the user's image, `command` (replacing the image's entrypoint), `args`, `env`,
/// `envFrom`, `resources` and security overrides.
fn upstream_container(spec: &McpUpstreamSpec) -> Container {
    let upstream = &spec.upstream;
    let mut security = container_security_context(false);
    if let Some(overrides) = &upstream.security_context {
        security.run_as_user = overrides.run_as_user;
        security.run_as_group = overrides.run_as_group;
        security.read_only_root_filesystem = overrides.read_only_root_filesystem;
        let add = overrides
            .capabilities
            .as_ref()
            .map(|c| c.add.clone())
            .unwrap_or_default();
        if let Some(capabilities) = security.capabilities.as_mut() {
            capabilities.add = (!add.is_empty()).then_some(add);
        }
    }
    Container {
        name: UPSTREAM_CONTAINER.to_owned(),
        image: Some(upstream.image.clone()),
        command: upstream.command.clone(),
        args: (!upstream.args.is_empty()).then(|| upstream.args.clone()),
        env: (!upstream.env.is_empty()).then(|| upstream.env.clone()),
        env_from: (!upstream.env_from.is_empty()).then(|| upstream.env_from.clone()),
        resources: upstream.resources.clone(),
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
        security_context: Some(security),
        ..Container::default()
    }
}

/// The berth proxy of the McpUpstream `name`. Its Secret values reach it as environment
/// variables filled by the kubelet, never through the ConfigMap or a command line: the session
/// key ([`SESSION_KEY_ENV`](crate::render::SESSION_KEY_ENV)), the client token
/// ([`DOWNSTREAM_TOKEN_ENV`], with `spec.proxy.auth`), Secret-backed upstream headers
/// ([`header_env_var`]) and the OTLP export headers (`spec.telemetry.traces.headersSecret`,
/// [`telemetry_env`]).
fn proxy_container(name: &str, proxy_image: &str, spec: &McpUpstreamSpec) -> Container {
    let mut env = vec![secret::session_key_env(name)];
    env.extend(mcp_upstream_env(name));
    // Issue 40, item 3: the proxy checks whether the upstream also answers on this address.
    env.push(field_env(POD_IP_ENV, "status.podIP"));
    if let Some(reference) = spec
        .proxy
        .auth
        .as_ref()
        .and_then(|a| a.bearer_token_secret_ref.as_ref())
    {
        env.push(secret_env(
            DOWNSTREAM_TOKEN_ENV.to_owned(),
            SecretKeySelector {
                name: reference.name.clone(),
                key: reference.key.clone(),
                optional: Some(false),
            },
        ));
    }
    env.extend(
        spec.upstream
            .headers
            .iter()
            .enumerate()
            .filter_map(|(index, header)| {
                let source = header.value_from.as_ref()?;
                Some(secret_env(
                    header_env_var(index),
                    source.secret_key_ref.clone(),
                ))
            }),
    );
    if let Some(traces) = &spec.telemetry.traces {
        env.extend(telemetry_env(name, traces));
    }
    Container {
        env: Some(env),
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
        resources: spec.proxy.resources.clone(),
        volume_mounts: Some(vec![VolumeMount {
            name: CONFIG_VOLUME.to_owned(),
            mount_path: CONFIG_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        // Its own user, never the server's (issue 40, item 7).
        security_context: Some(SecurityContext {
            run_as_user: Some(PROXY_RUN_AS_ID),
            run_as_group: Some(PROXY_RUN_AS_ID),
            ..container_security_context(true)
        }),
        ..Container::default()
    }
}

/// The proxy's [`MCP_UPSTREAM_ENV`] (`<namespace>/<name>`, the audit events' `mcpupstream`):
/// the namespace comes from the downward API, and the kubelet expands `$(…)` references to
/// earlier variables.
fn mcp_upstream_env(name: &str) -> [EnvVar; 2] {
    [
        field_env(NAMESPACE_ENV, "metadata.namespace"),
        plain_env(MCP_UPSTREAM_ENV, format!("$({NAMESPACE_ENV})/{name}")),
    ]
}

/// Name of the proxy's variable holding its pod's name (downward API `metadata.name`), which
/// `telemetry_env`'s `OTEL_RESOURCE_ATTRIBUTES` refers to.
pub const POD_NAME_ENV: &str = "BERTH_POD_NAME";

/// The standard OpenTelemetry variables of the proxy of the McpUpstream `name` for
/// `spec.telemetry.traces`: the OTLP/HTTP endpoint and protocol (`http/protobuf`, the only one
/// the proxy has), the service name, resource attributes naming the namespace, pod and
/// McpUpstream, a parent-based ratio sampler and, with `headersSecret`, the export headers from
/// that Secret key (filled by the kubelet, so the operator never reads the Secret).
///
/// The kubelet expands `$(…)` only to variables defined earlier, so these must follow
/// [`NAMESPACE_ENV`] (from [`mcp_upstream_env`]); [`POD_NAME_ENV`] comes before the attributes.
fn telemetry_env(name: &str, traces: &TracesSpec) -> Vec<EnvVar> {
    // The user's text is taken literally: `$$` is the kubelet's escape for `$`, so a
    // `$(VAR)` written there never expands to another variable (the session key, the client
    // token) and leaves the pod for a collector.
    let literal = |text: &str| text.replace('$', "$$");
    let mut env = vec![
        plain_env("OTEL_EXPORTER_OTLP_ENDPOINT", literal(&traces.endpoint)),
        plain_env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        plain_env("OTEL_SERVICE_NAME", literal(&traces.service_name)),
        field_env(POD_NAME_ENV, "metadata.name"),
        plain_env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!(
                "k8s.namespace.name=$({NAMESPACE_ENV}),k8s.pod.name=$({POD_NAME_ENV}),berth.mcpupstream={name}"
            ),
        ),
        plain_env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".to_owned()),
        // `Display` of an f64 is plain decimal: `1`, `0.25`, never an exponent.
        plain_env("OTEL_TRACES_SAMPLER_ARG", traces.sampling_ratio.to_string()),
    ];
    if let Some(reference) = &traces.headers_secret {
        env.push(secret_env(
            "OTEL_EXPORTER_OTLP_HEADERS".to_owned(),
            SecretKeySelector {
                name: reference.name.clone(),
                key: reference.key.clone(),
                optional: Some(false),
            },
        ));
    }
    env
}

/// An environment variable `name` with the literal `value` (`$(…)` references expanded).
fn plain_env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        ..EnvVar::default()
    }
}

/// An environment variable `name` filled by the kubelet from the pod's field `field_path`
/// (downward API).
fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// An environment variable `name` filled by the kubelet from the Secret key `source`.
fn secret_env(name: String, source: SecretKeySelector) -> EnvVar {
    EnvVar {
        name,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(source),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
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
