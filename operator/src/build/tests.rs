//! Unit tests of [`super::build`] from YAML fixtures: the shipped example and
//! `operator/tests/fixtures/`.

use berth_crds::{McpUpstream, PROXY_CONFIG_KEY, ProxyConfig, SessionStrategy, ToolsProbePolicy};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::{CONFIG_DIR, CONFIG_HASH_ANNOTATION};
use super::*;
use crate::validate::validate;

const EVERYTHING: &str = include_str!("../../../examples/everything.yaml");
const TUNED: &str = include_str!("../../tests/fixtures/tuned.yaml");
const PROXY_IMAGE: &str = "ghcr.io/berth-dev/berth-proxy:test";

/// The shipped example as the API server would hand it to the operator.
fn everything() -> McpUpstream {
    let mut upstream: McpUpstream = serde_yaml::from_str(EVERYTHING).expect("example parses");
    upstream.metadata.namespace = Some("demo".to_owned());
    upstream.metadata.uid = Some("uid-everything".to_owned());
    upstream
}

fn build_from(upstream: &McpUpstream) -> Children {
    let config = validate(upstream).expect("fixture is valid");
    build(upstream, PROXY_IMAGE, &config).expect("builds")
}

fn pod_spec(children: &Children) -> &PodSpec {
    children
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .expect("deployment has a pod spec")
}

fn init_container<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    pod.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .expect("init container present")
}

fn container<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    pod.containers
        .iter()
        .find(|c| c.name == name)
        .expect("container present")
}

fn rendered_config(children: &Children) -> ProxyConfig {
    let text = children
        .config_map
        .data
        .as_ref()
        .and_then(|d| d.get(PROXY_CONFIG_KEY))
        .expect("config key present");
    ProxyConfig::from_yaml(text).expect("rendered config parses and checks")
}

#[test]
fn build_example_config_points_at_loopback_sidecar() {
    let children = build_from(&everything());
    assert_eq!(
        children.config_map.metadata.name.as_deref(),
        Some("everything-proxy")
    );
    let config = rendered_config(&children);
    assert_eq!(config.listen, "0.0.0.0:8080");
    assert_eq!(config.admin_listen, "0.0.0.0:9090");
    assert_eq!(
        config.upstream.url.as_deref(),
        Some("http://127.0.0.1:3001/mcp")
    );
}

#[test]
fn build_tuned_spec_copies_session_probe_and_timeouts() {
    let upstream: McpUpstream = serde_yaml::from_str(TUNED).expect("fixture parses");
    let config = rendered_config(&build_from(&upstream));
    assert_eq!(
        config.upstream.url.as_deref(),
        Some("http://127.0.0.1:7000/v1/mcp")
    );
    assert_eq!(config.session.strategy, SessionStrategy::Shared);
    assert_eq!(config.session.idle_timeout.0, "5m");
    assert_eq!(config.tools_probe.policy, ToolsProbePolicy::Interval);
    assert_eq!(config.tools_probe.interval.0, "90s");
    assert_eq!(config.timeouts, upstream.spec.timeouts);
}

#[test]
fn build_example_upstream_is_native_sidecar_with_startup_probe() {
    let children = build_from(&everything());
    let pod = pod_spec(&children);
    let upstream = init_container(pod, "upstream");
    assert_eq!(upstream.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        upstream.image.as_deref(),
        Some(everything().spec.upstream.image.as_str())
    );
    assert_eq!(upstream.args, Some(vec!["streamableHttp".to_owned()]));
    let env = upstream.env.as_ref().expect("env set");
    assert_eq!(env[0].name, "PORT");
    assert_eq!(env[0].value.as_deref(), Some("3001"));
    let port = &upstream.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("upstream"), 3001)
    );
    let probe = upstream.startup_probe.as_ref().expect("startup probe");
    assert_eq!(
        probe.tcp_socket.as_ref().map(|t| &t.port),
        Some(&IntOrString::String("upstream".to_owned()))
    );
}

#[test]
fn build_tuned_spec_passes_env_value_from_unchanged() {
    let upstream: McpUpstream = serde_yaml::from_str(TUNED).expect("fixture parses");
    let children = build_from(&upstream);
    let sidecar = init_container(pod_spec(&children), "upstream");
    assert_eq!(
        sidecar.env.as_deref(),
        Some(upstream.spec.upstream.env.as_slice())
    );
    assert_eq!(sidecar.args, None, "no args: the image's own CMD runs");
}

#[test]
fn build_example_proxy_has_config_mount_ports_and_probes() {
    let children = build_from(&everything());
    let pod = pod_spec(&children);
    let proxy = container(pod, "proxy");
    assert_eq!(proxy.image.as_deref(), Some(PROXY_IMAGE));
    assert_eq!(
        proxy.args,
        Some(vec![
            "--config".to_owned(),
            "/etc/berth/proxy.yaml".to_owned()
        ])
    );
    let ports: Vec<_> = proxy
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap_or_default(), p.container_port))
        .collect();
    assert_eq!(ports, [("mcp", 8080), ("admin", 9090)]);
    let path_of = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("httpGet probe");
        (get.path.clone().unwrap_or_default(), get.port.clone())
    };
    let admin = IntOrString::String("admin".to_owned());
    assert_eq!(
        path_of(&proxy.liveness_probe),
        ("/healthz".to_owned(), admin.clone())
    );
    assert_eq!(
        path_of(&proxy.readiness_probe),
        ("/readyz".to_owned(), admin)
    );
    let mount = &proxy.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        (CONFIG_DIR, Some(true))
    );
    let volume = &pod.volumes.as_ref().expect("volumes")[0];
    assert_eq!(volume.name, mount.name);
    assert_eq!(
        volume.config_map.as_ref().map(|c| c.name.as_str()),
        Some("everything-proxy")
    );
}

#[test]
fn build_example_pod_meets_restricted_pod_security() {
    let children = build_from(&everything());
    let pod = pod_spec(&children);
    let pod_context = pod.security_context.as_ref().expect("pod security context");
    assert_eq!(pod_context.run_as_non_root, Some(true));
    assert_eq!(
        pod_context
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let sidecar = init_container(pod, "upstream");
    let proxy = container(pod, "proxy");
    for c in [sidecar, proxy] {
        let sc = c
            .security_context
            .as_ref()
            .expect("container security context");
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|cap| cap.drop.clone()),
            Some(vec!["ALL".to_owned()]),
            "{}",
            c.name
        );
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{}",
            c.name
        );
    }
    let proxy_context = proxy.security_context.as_ref().expect("proxy context");
    assert_eq!(proxy_context.read_only_root_filesystem, Some(true));
}

#[test]
fn build_every_child_is_labelled_and_owned_by_the_upstream() {
    let upstream = everything();
    let children = build_from(&upstream);
    let metas = [
        &children.config_map.metadata,
        &children.deployment.metadata,
        &children.service.metadata,
    ];
    for meta in metas {
        assert_eq!(meta.namespace.as_deref(), Some("demo"));
        let labels = meta.labels.as_ref().expect("labels");
        assert_eq!(labels["app.kubernetes.io/name"], "berth-proxy");
        assert_eq!(labels["app.kubernetes.io/instance"], "everything");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "berth-operator");
        assert_eq!(labels["berth.dev/mcpupstream"], "everything");
        let owner = &meta.owner_references.as_ref().expect("owner refs")[0];
        assert_eq!(owner.api_version, "berth.dev/v1alpha1");
        assert_eq!(owner.kind, "McpUpstream");
        assert_eq!(
            (owner.name.as_str(), owner.uid.as_str()),
            ("everything", "uid-everything")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }
}

#[test]
fn build_example_service_targets_named_mcp_port_of_instance_pods() {
    let children = build_from(&everything());
    let spec = children.service.spec.as_ref().expect("service spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let port = &spec.ports.as_ref().expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("mcp"), 8080));
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("mcp".to_owned()))
    );
    let deployment_spec = &children.deployment.spec;
    assert_eq!(spec.selector, deployment_spec.selector.match_labels);
    let template_labels = deployment_spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .expect("template labels");
    for (key, value) in spec.selector.iter().flatten() {
        assert_eq!(template_labels.get(key), Some(value), "{key}");
    }
    assert_eq!(deployment_spec.replicas, Some(1));
}

#[test]
fn build_config_change_changes_pod_template_hash() {
    let hash_of = |upstream: &McpUpstream| {
        build_from(upstream)
            .deployment
            .spec
            .template
            .metadata
            .and_then(|m| m.annotations)
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION).cloned())
            .expect("hash annotation")
    };
    let before = everything();
    let mut after = everything();
    after.spec.timeouts.call = berth_crds::DurationString::new("90s");
    assert_eq!(hash_of(&before), hash_of(&everything()), "deterministic");
    assert_ne!(hash_of(&before), hash_of(&after));
    assert_eq!(hash_of(&before).len(), 16);
}

#[test]
fn build_object_without_uid_fails_with_bounded_kind() {
    let mut upstream = everything();
    upstream.metadata.uid = None;
    let config = validate(&upstream).expect("valid");
    let err = build(&upstream, PROXY_IMAGE, &config).expect_err("no owner reference possible");
    assert_eq!(err.kind(), "missing_metadata");
    assert!(err.to_string().contains("metadata.uid"), "{err}");
}

#[test]
fn build_grace_period_covers_the_drain_and_the_longest_call() {
    // The example: drain 5s (default), call 60s, no maxCall, plus 5s to close and exit.
    let children = build_from(&everything());
    assert_eq!(
        pod_spec(&children).termination_grace_period_seconds,
        Some(70)
    );
    let mut tuned = everything();
    tuned.spec.timeouts.drain = berth_crds::DurationString::new("20s");
    tuned.spec.timeouts.max_call = Some(berth_crds::DurationString::new("10m"));
    let children = build_from(&tuned);
    assert_eq!(
        pod_spec(&children).termination_grace_period_seconds,
        Some(625)
    );
}

#[test]
fn build_names_the_mcp_upstream_for_audit_events_from_the_pods_namespace() {
    let upstream = everything();
    let children = build_from(&upstream);
    let proxy = container(pod_spec(&children), deployment::PROXY_CONTAINER);
    let env = proxy.env.as_deref().expect("proxy env");
    let namespace = env
        .iter()
        .find(|v| v.name == "BERTH_NAMESPACE")
        .expect("namespace variable");
    let field = namespace
        .value_from
        .as_ref()
        .and_then(|s| s.field_ref.as_ref())
        .expect("downward API");
    assert_eq!(field.field_path, "metadata.namespace");
    let names: Vec<&str> = env.iter().map(|v| v.name.as_str()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name).expect(name);
    assert!(
        at("BERTH_NAMESPACE") < at("BERTH_MCPUPSTREAM"),
        "the kubelet expands only earlier variables: {names:?}"
    );
    let named = &env[at("BERTH_MCPUPSTREAM")];
    assert_eq!(
        named.value.as_deref(),
        Some("$(BERTH_NAMESPACE)/everything")
    );
    assert_eq!(
        rendered_config(&children).audit,
        berth_crds::proxy_config::audit::AuditLog::Stdout,
        "audit events are on by default"
    );
}

/// The example with `spec.telemetry` from the YAML `telemetry` (flow style).
fn everything_with_telemetry(telemetry: &str) -> McpUpstream {
    let mut upstream = everything();
    upstream.spec.telemetry = serde_yaml::from_str(telemetry).expect("telemetry parses");
    upstream
}

fn proxy_env(children: &Children) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
    container(pod_spec(children), deployment::PROXY_CONTAINER)
        .env
        .clone()
        .expect("proxy env")
}

#[test]
fn build_telemetry_values_are_literal_so_no_other_variable_leaks_to_the_collector() {
    let upstream = everything_with_telemetry(
        "traces: {endpoint: 'http://c:4318/$(BERTH_SESSION_KEY)', serviceName: 'a$(BERTH_NAMESPACE)'}",
    );
    let env = proxy_env(&build_from(&upstream));
    let value = |name: &str| {
        env.iter()
            .find(|v| v.name == name)
            .and_then(|v| v.value.as_deref())
            .expect(name)
    };
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://c:4318/$$(BERTH_SESSION_KEY)"
    );
    assert_eq!(value("OTEL_SERVICE_NAME"), "a$$(BERTH_NAMESPACE)");
}

#[test]
fn build_telemetry_traces_set_the_standard_otel_variables_after_those_they_refer_to() {
    let upstream = everything_with_telemetry(
        "traces: {endpoint: 'http://otel-collector.observability:4318', samplingRatio: 0.25}",
    );
    let env = proxy_env(&build_from(&upstream));
    let names: Vec<&str> = env.iter().map(|v| v.name.as_str()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name).expect(name);
    let value = |name: &str| env[at(name)].value.as_deref();
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT"),
        Some("http://otel-collector.observability:4318")
    );
    assert_eq!(value("OTEL_EXPORTER_OTLP_PROTOCOL"), Some("http/protobuf"));
    assert_eq!(value("OTEL_SERVICE_NAME"), Some("berth-proxy"));
    assert_eq!(
        value("OTEL_RESOURCE_ATTRIBUTES"),
        Some(
            "k8s.namespace.name=$(BERTH_NAMESPACE),k8s.pod.name=$(BERTH_POD_NAME),berth.mcpupstream=everything"
        )
    );
    assert_eq!(
        value("OTEL_TRACES_SAMPLER"),
        Some("parentbased_traceidratio")
    );
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG"), Some("0.25"));
    let pod_name = env[at("BERTH_POD_NAME")]
        .value_from
        .as_ref()
        .and_then(|s| s.field_ref.as_ref())
        .expect("downward API");
    assert_eq!(pod_name.field_path, "metadata.name");
    assert!(
        at("BERTH_NAMESPACE") < at("OTEL_RESOURCE_ATTRIBUTES")
            && at("BERTH_POD_NAME") < at("OTEL_RESOURCE_ATTRIBUTES"),
        "the kubelet expands only earlier variables: {names:?}"
    );
    assert!(
        at("BERTH_MCPUPSTREAM") < at("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "the OTEL variables follow the existing ones: {names:?}"
    );
    assert!(
        !names.contains(&"OTEL_EXPORTER_OTLP_HEADERS"),
        "no headers without headersSecret: {names:?}"
    );
    // Defaults: ratio 1 (formatted plainly), a service name given is used as is.
    let upstream = everything_with_telemetry(
        "traces: {endpoint: 'https://otlp.example.com', serviceName: mcp-everything}",
    );
    let env = proxy_env(&build_from(&upstream));
    let value = |name: &str| {
        env.iter()
            .find(|v| v.name == name)
            .and_then(|v| v.value.as_deref())
    };
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG"), Some("1"));
    assert_eq!(value("OTEL_SERVICE_NAME"), Some("mcp-everything"));
}

#[test]
fn build_without_telemetry_sets_no_otel_variable() {
    let upstream = everything();
    assert_eq!(
        upstream.spec.telemetry,
        berth_crds::TelemetrySpec::default()
    );
    let env = proxy_env(&build_from(&upstream));
    let names: Vec<&str> = env.iter().map(|v| v.name.as_str()).collect();
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("OTEL_") && *n != "BERTH_POD_NAME"),
        "{names:?}"
    );
    // `telemetry: {}` (no traces) is off as well, and leaves the env exactly as without it.
    let empty = everything_with_telemetry("{}");
    assert_eq!(proxy_env(&build_from(&empty)), env);
}

#[test]
fn build_telemetry_headers_secret_becomes_a_secret_key_ref() {
    let upstream = everything_with_telemetry(
        "traces: {endpoint: 'http://otel-collector:4318', headersSecret: {name: otel-credentials, key: headers}}",
    );
    let env = proxy_env(&build_from(&upstream));
    let headers = env
        .iter()
        .find(|v| v.name == "OTEL_EXPORTER_OTLP_HEADERS")
        .expect("headers variable");
    assert_eq!(headers.value, None, "the value stays in the Secret");
    let source = headers
        .value_from
        .as_ref()
        .and_then(|s| s.secret_key_ref.as_ref())
        .expect("secretKeyRef");
    assert_eq!(
        (source.name.as_str(), source.key.as_str(), source.optional),
        ("otel-credentials", "headers", Some(false))
    );
}

#[test]
fn build_proxy_gets_its_pod_ip_from_the_downward_api() {
    // Issue 40, item 3: the proxy checks whether the upstream answers on this address.
    let env = proxy_env(&build_from(&everything()));
    let pod_ip = env
        .iter()
        .find(|v| v.name == berth_crds::proxy_config::upstream::POD_IP_ENV)
        .and_then(|v| v.value_from.as_ref())
        .and_then(|s| s.field_ref.as_ref())
        .expect("BERTH_POD_IP from the downward API");
    assert_eq!(pod_ip.field_path, "status.podIP");
}
