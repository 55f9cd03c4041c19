//! The stdio pod shape (issue 4 "CRD and pod") against the real local control plane: the
//! operator renders the install init container, the stdio-host sidecar and the socket config,
//! and the API server admits the pods in a namespace enforcing the "restricted" Pod Security
//! Standard, with and without the user's security overrides.
//!
//! Needs `KUBECONFIG` pointing at `tests/controlplane/up.sh`'s cluster (`make test` does this).

use std::time::Duration;

use berth_crds::{McpUpstream, PROXY_CONFIG_KEY, ProxyConfig, SessionStrategy, Transport};
use berth_tests::cluster::{
    PROXY_IMAGE, TestNamespace, client, eventually_get, eventually_pods, shared_operator,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use kube::api::PostParams;

const RECONCILE_DEADLINE: Duration = Duration::from_secs(30);
const CONTROLLERS_DEADLINE: Duration = Duration::from_secs(60);
const IMAGE: &str = "registry.example/acme/time-mcp@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn stdio(name: &str, extra: &str) -> McpUpstream {
    serde_yaml::from_str(&format!(
        "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\nmetadata: {{name: {name}}}\nspec:\n  \
         upstream:\n    image: '{IMAGE}'\n    transport: Stdio\n    command: [mcp-server-time]\n    \
         args: [--local-timezone, UTC]\n{extra}"
    ))
    .expect("fixture parses")
}

fn init<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    pod.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("init container {name}"))
}

fn mounts(container: &Container) -> Vec<(&str, Option<bool>)> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.as_str(), m.read_only))
        .collect()
}

/// The stdio shape as the API server stored it and as a Pod it admitted.
async fn assert_stdio_shape(ns: &TestNamespace, name: &str, max_children: &str) -> PodSpec {
    let deployment = eventually_get(&ns.api::<Deployment>(), name, RECONCILE_DEADLINE).await;
    let pod = deployment.spec.template.spec.clone().expect("pod spec");
    let order: Vec<_> = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(order, ["berth-install", "upstream"]);
    let install = init(&pod, "berth-install");
    assert_eq!(install.image.as_deref(), Some(PROXY_IMAGE));
    assert_eq!(
        install.args,
        Some(vec![
            "copy-self".to_owned(),
            "/berth/bin/berth-proxy".to_owned()
        ])
    );
    assert_eq!(mounts(install), [("/berth/bin", None)]);
    let host = init(&pod, "upstream");
    assert_eq!(host.restart_policy.as_deref(), Some("Always"));
    assert_eq!(host.image.as_deref(), Some(IMAGE));
    let argv = [
        "/berth/bin/berth-proxy",
        "stdio-host",
        "--socket",
        "@berth-stdio-host",
        "--allow-uid",
        "65533",
        "--max-children",
        max_children,
        "--",
        "mcp-server-time",
        "--local-timezone",
        "UTC",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(host.command, Some(argv));
    assert_eq!(
        (host.ports.as_ref(), host.startup_probe.as_ref()),
        (None, None)
    );
    // Issue 40, item 7: no shared writable directory (the socket is abstract), and the proxy
    // runs as the one user the host serves.
    assert_eq!(mounts(host), [("/berth/bin", Some(true))]);
    let proxy = pod
        .containers
        .iter()
        .find(|c| c.name == "proxy")
        .expect("proxy");
    assert!(
        !mounts(proxy)
            .iter()
            .any(|(path, _)| path.starts_with("/berth")),
        "{:?}",
        mounts(proxy)
    );
    let proxy_user = proxy.security_context.as_ref().and_then(|s| s.run_as_user);
    assert_eq!(proxy_user, Some(65533));

    let config_map = eventually_get(
        &ns.api::<ConfigMap>(),
        &format!("{name}-proxy"),
        RECONCILE_DEADLINE,
    )
    .await;
    let text = &config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY];
    let config = ProxyConfig::from_yaml(text).expect("rendered config checks");
    assert_eq!(config.upstream.transport, Transport::Stdio);
    assert_eq!(config.upstream.socket.as_deref(), Some("@berth-stdio-host"));
    assert_eq!(config.upstream.url, None);

    // The namespace enforces "restricted": the Pod exists only if the API server admitted it.
    let pods = eventually_pods(ns, name, 1, CONTROLLERS_DEADLINE).await;
    let admitted = pods[0].spec.clone().expect("pod spec");
    assert_eq!(init(&admitted, "upstream").command, host.command);
    pod
}

#[tokio::test]
async fn operator_stdio_pod_shape_is_rendered_and_admitted_under_restricted() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "stdio-shape").await;
    ns.api::<McpUpstream>()
        .create(
            &PostParams::default(),
            &stdio("clock", "  session: {maxSessions: 8}\n"),
        )
        .await
        .expect("stdio McpUpstream accepted");
    assert_stdio_shape(&ns, "clock", "8").await;
    let config_map =
        eventually_get(&ns.api::<ConfigMap>(), "clock-proxy", RECONCILE_DEADLINE).await;
    let config = ProxyConfig::from_yaml(&config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY])
        .expect("config");
    assert_eq!(
        config.session.strategy,
        SessionStrategy::PerClient,
        "stdio defaults to one child per client session"
    );
    assert_eq!(config.session.max_sessions, 8);
    ns.delete().await;
}

#[tokio::test]
async fn operator_stdio_shared_strategy_and_security_overrides_are_kept_and_admitted() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "stdio-shared").await;
    let extra = "    securityContext: {runAsUser: 1000, runAsGroup: 1000, readOnlyRootFilesystem: true}\n  \
                 session: {strategy: Shared}\n";
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &stdio("browser", extra))
        .await
        .expect("stdio McpUpstream accepted");
    let pod = assert_stdio_shape(&ns, "browser", "16").await;
    let security = init(&pod, "upstream")
        .security_context
        .clone()
        .expect("security context");
    assert_eq!(
        (
            security.run_as_user,
            security.run_as_group,
            security.read_only_root_filesystem
        ),
        (Some(1000), Some(1000), Some(true))
    );
    let config_map =
        eventually_get(&ns.api::<ConfigMap>(), "browser-proxy", RECONCILE_DEADLINE).await;
    let config = ProxyConfig::from_yaml(&config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY])
        .expect("config");
    assert_eq!(
        config.session.strategy,
        SessionStrategy::Shared,
        "the user's choice wins"
    );
    ns.delete().await;
}
