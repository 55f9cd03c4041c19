//! Unit tests of the production API (issue 5) and the stdio pod shape (issue 4) in
//! [`super::build`], from the YAML fixtures `operator/tests/fixtures/full.yaml` and
//! `stdio.yaml`.

use berth_crds::{McpUpstream, PROXY_CONFIG_KEY, ProxyConfig, SessionStrategy, Transport};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::CONFIG_HASH_ANNOTATION;
use super::*;
use crate::validate::validate;

const FULL: &str = include_str!("../../tests/fixtures/full.yaml");
const STDIO: &str = include_str!("../../tests/fixtures/stdio.yaml");
const PROXY_IMAGE: &str = "ghcr.io/berth-dev/berth-proxy:test";

fn build_yaml(yaml: &str) -> (McpUpstream, Children) {
    let upstream: McpUpstream = serde_yaml::from_str(yaml).expect("fixture parses");
    let config = validate(&upstream).expect("fixture is valid");
    let children = build(&upstream, PROXY_IMAGE, &config).expect("builds");
    (upstream, children)
}

fn pod_spec(children: &Children) -> &PodSpec {
    children
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .expect("pod spec")
}

fn named<'a>(containers: Option<&'a Vec<Container>>, name: &str) -> &'a Container {
    containers
        .into_iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name}"))
}

fn rendered(children: &Children) -> ProxyConfig {
    let text = &children.config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY];
    ProxyConfig::from_yaml(text).expect("rendered config checks")
}

fn env_secret(container: &Container, name: &str) -> Option<(String, String)> {
    let var = container.env.iter().flatten().find(|e| e.name == name)?;
    let source = var.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some((source.name.clone(), source.key.clone()))
}

#[test]
fn build_full_spec_renders_replicas_resources_and_upstream_overrides() {
    let (upstream, children) = build_yaml(FULL);
    assert_eq!(children.deployment.spec.replicas, Some(3));
    let pod = pod_spec(&children);
    let sidecar = named(pod.init_containers.as_ref(), "upstream");
    assert_eq!(
        sidecar.command,
        Some(vec!["node".to_owned(), "dist/index.js".to_owned()])
    );
    assert_eq!(sidecar.args, Some(vec!["--http".to_owned()]));
    assert_eq!(
        sidecar.env_from.as_deref(),
        Some(upstream.spec.upstream.env_from.as_slice())
    );
    assert_eq!(sidecar.resources, upstream.spec.upstream.resources);
    let security = sidecar.security_context.as_ref().expect("security");
    assert_eq!(
        (security.run_as_user, security.run_as_group),
        (Some(1000), Some(1001))
    );
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let capabilities = security.capabilities.as_ref().expect("capabilities");
    assert_eq!(capabilities.drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(capabilities.add, Some(vec!["NET_BIND_SERVICE".to_owned()]));
    let proxy = named(Some(&pod.containers), "proxy");
    assert_eq!(proxy.resources, upstream.spec.proxy.resources);
}

#[test]
fn build_full_spec_proxy_gets_client_token_and_session_key_from_secrets() {
    let (_, children) = build_yaml(FULL);
    let proxy = named(Some(&pod_spec(&children).containers), "proxy");
    assert_eq!(
        env_secret(proxy, "BERTH_DOWNSTREAM_TOKEN"),
        Some(("search-clients".to_owned(), "token".to_owned()))
    );
    assert_eq!(
        env_secret(proxy, "BERTH_SESSION_KEY"),
        Some(("search-session-key".to_owned(), "key".to_owned()))
    );
    let config = rendered(&children);
    assert_eq!(
        config
            .downstream_auth
            .and_then(|a| a.bearer_token_env)
            .as_deref(),
        Some("BERTH_DOWNSTREAM_TOKEN")
    );
    assert_eq!(config.session_key_env.as_deref(), Some("BERTH_SESSION_KEY"));
    assert_eq!(
        config.request_origin.allowed_origins,
        ["https://inspector.example.com"]
    );
    assert_eq!(config.request_origin.allowed_hosts, ["search.example.com"]);
    // The token itself is nowhere in the ConfigMap.
    let text = &children.config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY];
    assert!(!text.contains("search-clients"), "{text}");
}

#[test]
fn build_oauth_spec_renders_the_resource_server_and_no_token_variable() {
    let yaml = STDIO.replacen(
        "spec:\n",
        "spec:\n  proxy:\n    auth:\n      oauth: {issuer: 'https://auth.example.com/', audience: 'https://clock.example.com/mcp', requiredScopes: ['mcp:tools'], allowedAlgorithms: [ES256], jwksRefresh: 10m}\n",
        1,
    );
    let (upstream, children) = build_yaml(&yaml);
    let config = rendered(&children);
    let auth = config.downstream_auth.expect("downstreamAuth rendered");
    assert_eq!(auth.bearer_token_env, None);
    let wanted = upstream.spec.proxy.auth.and_then(|a| a.oauth);
    assert_eq!(auth.oauth, wanted, "oauth copied unchanged");
    assert_eq!(
        auth.oauth.as_ref().map(|o| o.required_scopes.clone()),
        Some(vec!["mcp:tools".to_owned()])
    );
    let proxy = named(Some(&pod_spec(&children).containers), "proxy");
    assert_eq!(env_secret(proxy, "BERTH_DOWNSTREAM_TOKEN"), None);
}

#[test]
fn build_minimal_spec_has_no_auth_but_always_a_session_key() {
    let (_, children) = build_yaml(STDIO);
    let config = rendered(&children);
    assert_eq!(config.downstream_auth, None);
    assert_eq!(config.session_key_env.as_deref(), Some("BERTH_SESSION_KEY"));
    let secret = &children.session_key;
    assert_eq!(secret.metadata.name.as_deref(), Some("clock-session-key"));
    assert_eq!(secret.data, None, "the key is generated only when created");
    let owner = &secret.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.uid, "9a7d2b3c-4e5f-4a6b-8c7d-0e1f2a3b4c5d");
}

#[test]
fn build_full_spec_pod_overrides_merge_without_touching_selector_labels() {
    let (upstream, children) = build_yaml(FULL);
    let template = &children.deployment.spec.template;
    let metadata = template.metadata.as_ref().expect("metadata");
    let labels = metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["team"], "search");
    assert_eq!(labels["app.kubernetes.io/instance"], "search");
    let annotations = metadata.annotations.as_ref().expect("annotations");
    assert_eq!(annotations["example.com/owner"], "search-team");
    assert!(annotations.contains_key(CONFIG_HASH_ANNOTATION));
    let pod = pod_spec(&children);
    let overrides = &upstream.spec.pod;
    assert_eq!(pod.node_selector.as_ref(), Some(&overrides.node_selector));
    assert_eq!(
        pod.tolerations.as_deref(),
        Some(overrides.tolerations.as_slice())
    );
    assert_eq!(pod.affinity, overrides.affinity);
    assert_eq!(pod.priority_class_name.as_deref(), Some("mcp-critical"));
    assert_eq!(pod.service_account_name.as_deref(), Some("search-mcp"));
    assert_eq!(
        pod.image_pull_secrets.as_deref(),
        Some(overrides.image_pull_secrets.as_slice())
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
}

#[test]
fn build_user_label_cannot_replace_the_selector_label() {
    let mut upstream: McpUpstream = serde_yaml::from_str(FULL).expect("parses");
    upstream
        .spec
        .pod
        .labels
        .insert("app.kubernetes.io/instance".to_owned(), "hijack".to_owned());
    let config = validate(&upstream).expect("valid");
    let children = build(&upstream, PROXY_IMAGE, &config).expect("builds");
    let metadata = children
        .deployment
        .spec
        .template
        .metadata
        .expect("metadata");
    assert_eq!(
        metadata.labels.expect("labels")["app.kubernetes.io/instance"],
        "search"
    );
}

#[test]
fn build_full_spec_network_policy_allows_dns_listed_egress_and_proxy_ports() {
    let (_, children) = build_yaml(FULL);
    let Optional::Wanted(policy) = &children.network_policy else {
        panic!("network policy wanted");
    };
    let spec = policy.spec.as_ref().expect("spec");
    assert_eq!(
        spec.policy_types,
        Some(vec!["Ingress".to_owned(), "Egress".to_owned()])
    );
    assert_eq!(
        spec.pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(crate::labels::selector("search"))
    );
    let ingress = &spec.ingress.as_ref().expect("ingress")[0];
    assert_eq!(
        ingress.from, None,
        "from anywhere, but only to the proxy's ports"
    );
    let ports: Vec<_> = ingress
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.clone())
        .collect();
    assert_eq!(
        ports,
        [
            Some(IntOrString::String("mcp".to_owned())),
            Some(IntOrString::String("admin".to_owned()))
        ]
    );
    let egress = spec.egress.as_ref().expect("egress");
    assert_eq!(egress.len(), 3, "DNS plus two listed ranges");
    let dns: Vec<_> = egress[0]
        .ports
        .iter()
        .flatten()
        .map(|p| (p.port.clone(), p.protocol.clone()))
        .collect();
    assert_eq!(
        dns,
        [
            (Some(IntOrString::Int(53)), Some("UDP".to_owned())),
            (Some(IntOrString::Int(53)), Some("TCP".to_owned()))
        ]
    );
    let cidr = |i: usize| {
        egress[i].to.as_ref().expect("to")[0]
            .ip_block
            .as_ref()
            .map(|b| b.cidr.clone())
    };
    assert_eq!(cidr(1).as_deref(), Some("203.0.113.0/24"));
    assert_eq!(
        egress[1].ports.as_ref().expect("ports")[0].port,
        Some(IntOrString::Int(443))
    );
    assert_eq!(cidr(2).as_deref(), Some("10.0.0.0/8"));
    assert_eq!(egress[2].ports, None, "every port");
}

#[test]
fn build_full_spec_pod_disruption_budget_selects_the_pods() {
    let (_, children) = build_yaml(FULL);
    let Optional::Wanted(budget) = &children.pod_disruption_budget else {
        panic!("budget wanted");
    };
    let spec = budget.spec.as_ref().expect("spec");
    assert_eq!(spec.min_available, Some(IntOrString::Int(2)));
    assert_eq!(spec.max_unavailable, None);
    assert_eq!(
        spec.selector.as_ref().and_then(|s| s.match_labels.clone()),
        Some(crate::labels::selector("search"))
    );
}

fn unwanted<K>() -> Optional<K> {
    Optional::Unwanted {
        namespace: "team-a".to_owned(),
        name: "clock".to_owned(),
        owner_uid: "9a7d2b3c-4e5f-4a6b-8c7d-0e1f2a3b4c5d".to_owned(),
    }
}

#[test]
fn build_spec_without_budget_marks_it_unwanted() {
    let (_, children) = build_yaml(STDIO);
    assert_eq!(children.pod_disruption_budget, unwanted());
}

#[test]
fn build_spec_without_network_policy_admits_ingress_to_proxy_ports_only() {
    // Issue 40, item 3: on by default, ingress only, egress left alone.
    let (_, children) = build_yaml(STDIO);
    let Optional::Wanted(policy) = &children.network_policy else {
        panic!("network policy wanted by default");
    };
    let spec = policy.spec.as_ref().expect("spec");
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    assert_eq!(spec.egress, None);
    let ports: Vec<_> = spec.ingress.as_ref().expect("ingress")[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.clone())
        .collect();
    assert_eq!(
        ports,
        [
            Some(IntOrString::String("mcp".to_owned())),
            Some(IntOrString::String("admin".to_owned()))
        ]
    );
}

#[test]
fn build_spec_with_ingress_off_marks_network_policy_unwanted() {
    let mut upstream: McpUpstream = serde_yaml::from_str(STDIO).expect("fixture parses");
    upstream.spec.network_policy.ingress = false;
    let config = validate(&upstream).expect("fixture is valid");
    let children = build(&upstream, PROXY_IMAGE, &config).expect("builds");
    assert_eq!(children.network_policy, unwanted());
}

#[test]
fn build_stdio_spec_has_install_init_container_and_stdio_host_sidecar() {
    let (_, children) = build_yaml(STDIO);
    let pod = pod_spec(&children);
    let names: Vec<_> = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["berth-install", "upstream"], "install runs first");
    let install = named(pod.init_containers.as_ref(), "berth-install");
    assert_eq!(install.image.as_deref(), Some(PROXY_IMAGE));
    assert_eq!(
        install.args,
        Some(vec![
            "copy-self".to_owned(),
            "/berth/bin/berth-proxy".to_owned()
        ])
    );
    assert_eq!(install.restart_policy, None, "a plain init container");
    let sidecar = named(pod.init_containers.as_ref(), "upstream");
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        sidecar.image.as_deref(),
        Some(
            "registry.example/acme/time-mcp@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
    );
    let expected: Vec<String> = [
        "/berth/bin/berth-proxy",
        "stdio-host",
        "--socket",
        "@berth-stdio-host",
        "--allow-uid",
        "65533",
        "--max-children",
        "8",
        "--",
        "mcp-server-time",
        "--local-timezone",
        "UTC",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(sidecar.command, Some(expected));
    assert_eq!(sidecar.args, None);
    assert_eq!(sidecar.ports, None, "no upstream port for stdio");
    assert_eq!(
        sidecar.startup_probe, None,
        "no HTTP/TCP startup probe for stdio"
    );
    assert_eq!(sidecar.env.as_ref().map(Vec::len), Some(1), "user env kept");
    let mounts = |c: &Container| -> Vec<(String, String, Option<bool>)> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.clone(), m.mount_path.clone(), m.read_only))
            .collect()
    };
    let bin = ("berth-bin".to_owned(), "/berth/bin".to_owned());
    assert_eq!(mounts(install), [(bin.0.clone(), bin.1.clone(), None)]);
    // Issue 40, item 7: no shared writable directory; the socket is abstract.
    assert_eq!(
        mounts(sidecar),
        [(bin.0.clone(), bin.1.clone(), Some(true))]
    );
    let proxy = named(Some(&pod.containers), "proxy");
    assert!(
        mounts(proxy).iter().all(|(name, _, _)| name != "berth-bin"),
        "{:?}",
        mounts(proxy)
    );
    let empty_dirs: Vec<_> = pod
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(empty_dirs, ["berth-bin"]);
}

#[test]
fn build_proxy_runs_as_its_own_user_the_stdio_host_serves_alone() {
    // Issue 40, item 7: the host's --allow-uid is the proxy's user, never the server's.
    let (_, children) = build_yaml(STDIO);
    let pod = pod_spec(&children);
    let proxy = named(Some(&pod.containers), "proxy");
    let security = proxy.security_context.as_ref().expect("security context");
    assert_eq!(
        (security.run_as_user, security.run_as_group),
        (Some(65533), Some(65533))
    );
    let sidecar = named(pod.init_containers.as_ref(), "upstream");
    let command = sidecar.command.as_ref().expect("command");
    let at = command
        .iter()
        .position(|a| a == "--allow-uid")
        .expect("--allow-uid");
    assert_eq!(command[at + 1], "65533");
    let server_user = sidecar
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or(pod.security_context.as_ref().and_then(|s| s.run_as_user));
    assert_ne!(server_user, Some(65533));
}

#[test]
fn build_stdio_spec_renders_socket_upstream_and_per_client_sessions() {
    let (_, children) = build_yaml(STDIO);
    let config = rendered(&children);
    assert_eq!(config.upstream.transport, Transport::Stdio);
    assert_eq!(config.upstream.socket.as_deref(), Some("@berth-stdio-host"));
    assert_eq!(config.upstream.url, None);
    assert!(
        config.upstream.command.is_empty(),
        "the stdio host spawns, not the proxy"
    );
    assert_eq!(config.session.strategy, SessionStrategy::PerClient);
    assert_eq!(config.session.max_sessions, 8);
    assert_eq!(
        config.session.replay_buffer_mib, 8,
        "spec.session.replayBufferMiB renders"
    );
}

#[test]
fn build_http_spec_keeps_shared_default_and_service_has_no_affinity() {
    let (_, children) = build_yaml(FULL);
    assert_eq!(
        rendered(&children).session.strategy,
        SessionStrategy::Shared
    );
    let service = children.service.spec.as_ref().expect("spec");
    assert_eq!(service.session_affinity.as_deref(), Some("None"));
    assert_eq!(service.ports.as_ref().expect("ports")[0].port, 8000);
}

#[test]
fn build_operator_pod_labels_and_annotation_are_the_ones_the_crd_reserves() {
    let (_, children) = build_yaml(STDIO);
    let metadata = children
        .deployment
        .spec
        .template
        .metadata
        .expect("metadata");
    let mut own: Vec<String> = metadata.labels.expect("labels").into_keys().collect();
    own.sort();
    let mut reserved = berth_crds::RESERVED_POD_LABELS.map(str::to_owned).to_vec();
    reserved.sort();
    assert_eq!(
        own, reserved,
        "spec.pod.labels' CEL rule must list exactly these"
    );
    let annotations: Vec<String> = metadata
        .annotations
        .expect("annotations")
        .into_keys()
        .collect();
    assert_eq!(annotations, berth_crds::RESERVED_POD_ANNOTATIONS);
}
