//! The operator's status and Events against the real local control plane, with real proxies.
//!
//! No kubelet runs here, so each test plays it ([`play_kubelet`]): it reports the McpUpstream's
//! pod running on `127.0.0.1` and ready or not. Behind that "pod" a real berth proxy (this
//! workspace's, started in-process) listens on the McpUpstream's `spec.proxy.adminPort`, in front
//! of the Node reference server `@modelcontextprotocol/server-everything`, so what the operator
//! reads from `/tools` and `/readyz` is what a proxy really says.
//!
//! Each test runs an operator of its own scoped to its namespace, so its metrics count only its
//! objects. Needs `KUBECONFIG` (tests/controlplane/up.sh) and the Node peer (`npm ci` in
//! tests/peers/node); `make test` provides both.

use std::time::{Duration, Instant};

use berth_crds::{McpUpstream, ProxyConfig};
use berth_operator::status::current_condition;
use berth_proxy::RunningProxy;
use berth_tests::cluster::operator::{Operator, eventually_pod, play_kubelet, settings};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::{peers, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use tokio::net::TcpListener;

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
/// Resync of the test operators.
const RESYNC: Duration = Duration::from_secs(10);
/// Deadline for the operator and the controllers to react.
const DEADLINE: Duration = Duration::from_secs(60);
/// The upstream image ID the fake kubelet reports (the example's pinned digest).
const IMAGE_ID: &str = "docker.io/mcp/everything@sha256:3f1c6a1bd5bd4d0f8a5a2b8c63b2c4e7a9d0e1f2a3b4c5d6e7f8091a2b3c4d5e";

fn upstream(name: &str, admin_port: u16, allow: Option<&[&str]>) -> McpUpstream {
    let mut upstream: McpUpstream =
        serde_yaml::from_str(EVERYTHING).expect("examples/everything.yaml parses");
    upstream.metadata.name = Some(name.to_owned());
    upstream.spec.proxy.admin_port = i32::from(admin_port);
    upstream.spec.tools.allow = allow.map(|names| names.iter().map(|n| (*n).to_owned()).collect());
    upstream
}

/// A real proxy in front of `peer` whose admin endpoints listen on `admin`, exposing `allow`.
async fn proxy(peer: &peers::Peer, admin: TcpListener, allow: Option<&[&str]>) -> RunningProxy {
    berth_proxy::install_crypto_provider();
    let mut config: ProxyConfig = berth_tests::proxy::config(&peer.url, "30s");
    config.tools.allow = allow.map(|names| names.iter().map(|n| (*n).to_owned()).collect());
    let mcp = TcpListener::bind("127.0.0.1:0").await.expect("bind mcp");
    berth_proxy::start_on(&config, mcp, admin, &|_| None)
        .await
        .expect("proxy starts")
}

async fn admin_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    let port = listener.local_addr().expect("admin addr").port();
    (listener, port)
}

fn has(upstream: &McpUpstream, type_: &str, status: &str, reason: &str) -> bool {
    current_condition(upstream, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

async fn eventually(
    ns: &TestNamespace,
    name: &str,
    what: &str,
    deadline: Duration,
    check: impl Fn(&McpUpstream) -> bool,
) -> McpUpstream {
    let api = ns.api::<McpUpstream>();
    let end = tokio::time::Instant::now() + deadline;
    let mut last = None;
    loop {
        if let Ok(upstream) = api.get(name).await {
            if check(&upstream) {
                return upstream;
            }
            last = Some(upstream);
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {deadline:?} waiting for {name}: {what}; last seen conditions: {:#?}",
            last.as_ref()
                .and_then(|u| u.status.as_ref())
                .map(|s| &s.conditions)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn events_about(ns: &TestNamespace, name: &str) -> Vec<Event> {
    ns.api::<Event>()
        .list(&ListParams::default())
        .await
        .expect("events listed")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

async fn eventually_event(ns: &TestNamespace, name: &str, reason: &str) -> Event {
    wait_for(
        &format!("an Event {reason} about {name}"),
        DEADLINE,
        || async {
            events_about(ns, name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        },
    )
    .await
}

async fn create(ns: &TestNamespace, upstream: &McpUpstream) {
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), upstream)
        .await
        .expect("McpUpstream accepted");
}

#[tokio::test]
async fn tools_allow_naming_a_tool_the_upstream_lacks_is_tools_discovered_false_end_to_end() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-missing").await;
    let operator = Operator::start("berth-operator-missing", settings(&ns.name, RESYNC));
    let peer = peers::everything().await;
    let allow: &[&str] = &["echo", "no-such-tool"];
    let (admin, port) = admin_listener().await;
    let running = proxy(&peer, admin, Some(allow)).await;

    create(&ns, &upstream("everything", port, Some(allow))).await;
    let pod = eventually_pod(&ns, "everything", DEADLINE).await;
    // The proxy is not ready (an allowed tool is missing), so neither is the pod.
    play_kubelet(&ns, &pod, false, IMAGE_ID).await;

    let upstream = eventually(&ns, "everything", "ToolsDiscovered=False", DEADLINE, |u| {
        has(u, "ToolsDiscovered", "False", "AllowedToolMissing")
    })
    .await;
    let tools = current_condition(&upstream, "ToolsDiscovered").expect("ToolsDiscovered");
    assert!(tools.message.contains("no-such-tool"), "{tools:?}");
    assert!(
        !tools.message.contains("echo"),
        "only missing tools named: {tools:?}"
    );
    assert_eq!(tools.observed_generation, upstream.metadata.generation);
    let status = upstream.status.as_ref().expect("status");
    let listed = status.tools.as_ref().expect("status.tools");
    assert_eq!(listed.missing, ["no-such-tool"]);
    assert_eq!(listed.count, 1, "echo is exposed: {listed:?}");
    assert!(
        has(&upstream, "Degraded", "True", "AllowedToolMissing"),
        "{status:?}"
    );
    let upstream_ready = current_condition(&upstream, "UpstreamReady").expect("UpstreamReady");
    assert_eq!(upstream_ready.status, "False");
    assert!(
        upstream_ready
            .message
            .contains("allowed tools missing upstream: no-such-tool"),
        "the proxy's /readyz reason: {upstream_ready:?}"
    );
    assert!(
        has(&upstream, "Ready", "False", "Progressing")
            || has(&upstream, "Ready", "False", "DeploymentUnavailable")
    );

    let event = eventually_event(&ns, "everything", "AllowedToolMissing").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("no-such-tool")),
        "{event:?}"
    );

    running.shutdown().await;
    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_ready_transitions_publish_events_and_report_image_id() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-transit").await;
    let operator = Operator::start("berth-operator-transit", settings(&ns.name, RESYNC));
    let peer = peers::everything().await;
    let allow: &[&str] = &["echo"];
    let (admin, port) = admin_listener().await;
    let running = proxy(&peer, admin, Some(allow)).await;
    berth_tests::proxy::wait_ready(&running, DEADLINE).await;
    let served: serde_json::Value = reqwest::get(format!("http://{}/tools", running.admin_addr))
        .await
        .expect("/tools answers")
        .json()
        .await
        .expect("/tools is JSON");

    create(&ns, &upstream("everything", port, Some(allow))).await;
    let first = eventually(&ns, "everything", "Progressing=True", DEADLINE, |u| {
        has(u, "Ready", "False", "Progressing") && has(u, "Progressing", "True", "RollingOut")
    })
    .await;
    assert!(
        has(&first, "UpstreamReady", "False", "NoPods")
            || has(&first, "UpstreamReady", "False", "PodsNotReady")
    );

    let pod = eventually_pod(&ns, "everything", DEADLINE).await;
    play_kubelet(&ns, &pod, true, IMAGE_ID).await;
    let ready = eventually(&ns, "everything", "Ready=True", DEADLINE, |u| {
        has(u, "Ready", "True", "DeploymentAvailable")
            && has(u, "ToolsDiscovered", "True", "ToolsListed")
            && has(u, "Progressing", "False", "RolloutComplete")
    })
    .await;
    assert!(
        has(&ready, "UpstreamReady", "True", "PodsReady"),
        "{:?}",
        ready.status
    );
    assert!(
        has(&ready, "Degraded", "False", "AsExpected"),
        "{:?}",
        ready.status
    );
    let status = ready.status.as_ref().expect("status");
    for c in &status.conditions {
        assert_eq!(c.observed_generation, ready.metadata.generation, "{c:?}");
    }
    let tools = status.tools.as_ref().expect("status.tools");
    assert_eq!(tools.count, 1);
    assert_eq!(tools.fingerprint.as_deref(), served["fingerprint"].as_str());
    let image = status.upstream.as_ref().expect("status.upstream");
    assert_eq!(image.image_id.as_deref(), Some(IMAGE_ID));
    assert_eq!(
        image.image.as_deref(),
        Some(ready.spec.upstream.image.as_str())
    );
    assert_eq!(image.digest_matches, Some(true));
    let event = eventually_event(&ns, "everything", "DeploymentAvailable").await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("Ready=True")),
        "{event:?}"
    );

    // The pod turns unready and runs another image than the one pinned: the status says so.
    play_kubelet(&ns, &pod, false, "docker.io/mcp/everything@sha256:0000").await;
    let unready = eventually(&ns, "everything", "Ready=False again", DEADLINE, |u| {
        has(u, "UpstreamReady", "False", "PodsNotReady")
            && has(u, "Ready", "False", "DeploymentUnavailable")
    })
    .await;
    let image = unready
        .status
        .as_ref()
        .and_then(|s| s.upstream.clone())
        .expect("status.upstream");
    assert_eq!(image.digest_matches, Some(false), "{image:?}");
    let event = eventually_event(&ns, "everything", "DeploymentUnavailable").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("Ready=False")),
        "{event:?}"
    );
    // The gauge is recounted from the controller's cache every few seconds.
    let gauge = "berth_operator_mcpupstreams{condition=\"UpstreamReady\",status=\"False\"} 1";
    wait_for("the condition gauge", Duration::from_secs(15), || async {
        operator.metrics.render().contains(gauge).then_some(())
    })
    .await;

    running.shutdown().await;
    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

#[tokio::test]
async fn invalid_spec_is_ready_false_with_one_warning_event_and_no_hot_loop() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-hotloop").await;
    let operator = Operator::start("berth-operator-hotloop", settings(&ns.name, RESYNC));
    // A valid Kubernetes name the Service cannot carry (not a DNS-1035 label).
    let name = "1-starts-with-a-digit";
    create(&ns, &upstream(name, 9090, None)).await;
    let upstream = eventually(&ns, name, "Ready=False InvalidSpec", DEADLINE, |u| {
        has(u, "Ready", "False", "InvalidSpec")
    })
    .await;
    assert!(has(&upstream, "Degraded", "True", "InvalidSpec"));
    let message = &current_condition(&upstream, "Ready")
        .expect("Ready")
        .message;
    assert!(message.starts_with("metadata.name: "), "{message}");
    eventually_event(&ns, name, "InvalidSpec").await;

    // Well past two resync periods: an invalid spec waits for a change, it is not retried.
    let reconciles = operator.metrics.total_reconciliations();
    let writes = operator.metrics.total_writes();
    tokio::time::sleep(RESYNC * 2 + Duration::from_secs(2)).await;
    let idle_reconciles = operator.metrics.total_reconciliations() - reconciles;
    assert!(
        idle_reconciles <= 1,
        "no hot loop: {idle_reconciles} reconciles"
    );
    assert_eq!(
        operator.metrics.total_writes(),
        writes,
        "no write while waiting"
    );
    let warnings = events_about(&ns, name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidSpec"))
        .count();
    assert_eq!(warnings, 1, "one Warning Event for one invalid generation");
    assert!(
        operator.metrics.total_reconciliations() <= 4,
        "{}",
        operator.metrics.render()
    );

    // A user edit (a new generation, still invalid) is observed.
    let edit = serde_json::json!({"spec": {"timeouts": {"call": "61s"}}});
    ns.api::<McpUpstream>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edited");
    eventually(&ns, name, "the new generation observed", DEADLINE, |u| {
        current_condition(u, "Ready")
            .is_some_and(|c| c.observed_generation == u.metadata.generation)
    })
    .await;
    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

/// Accepts TCP connections and never answers: a wedged admin endpoint.
async fn hung_listener() -> (u16, tokio::task::JoinHandle<()>) {
    let (listener, port) = admin_listener().await;
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (port, task)
}

#[tokio::test]
async fn br_19_hung_proxy_admin_endpoint_does_not_stall_other_upstreams() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-br19").await;
    let mut operator_settings = settings(&ns.name, RESYNC);
    // One worker: the hung object must not starve the other even then.
    operator_settings.concurrency = 1;
    let operator = Operator::start("berth-operator-br19", operator_settings);
    let (hung_port, hung) = hung_listener().await;
    let peer = peers::everything().await;
    let (admin, ok_port) = admin_listener().await;
    let running = proxy(&peer, admin, None).await;
    berth_tests::proxy::wait_ready(&running, DEADLINE).await;

    // `hung` first, then `ok` (BR-19's order).
    create(&ns, &upstream("hung", hung_port, None)).await;
    let hung_pod = eventually_pod(&ns, "hung", DEADLINE).await;
    play_kubelet(&ns, &hung_pod, true, IMAGE_ID).await;
    let hung_ready_at = Instant::now();
    create(&ns, &upstream("ok", ok_port, None)).await;
    let ok_created = Instant::now();
    let ok_pod = eventually_pod(&ns, "ok", DEADLINE).await;
    play_kubelet(&ns, &ok_pod, true, IMAGE_ID).await;

    eventually(
        &ns,
        "ok",
        "Ready=True within 30 s",
        Duration::from_secs(30),
        |u| {
            has(u, "Ready", "True", "DeploymentAvailable")
                && has(u, "ToolsDiscovered", "True", "ToolsListed")
        },
    )
    .await;
    eprintln!("ok Ready after {:?}", ok_created.elapsed());
    let hung_upstream = eventually(
        &ns,
        "hung",
        "Ready=False ProxyReportTimeout",
        DEADLINE,
        |u| has(u, "Ready", "False", "ProxyReportTimeout"),
    )
    .await;
    eprintln!("hung reported after {:?}", hung_ready_at.elapsed());
    assert!(has(
        &hung_upstream,
        "ToolsDiscovered",
        "Unknown",
        "ProxyReportTimeout"
    ));
    assert!(has(
        &hung_upstream,
        "Degraded",
        "True",
        "ProxyReportTimeout"
    ));
    eventually_event(&ns, "hung", "ProxyReportTimeout").await;

    // Retried with backoff (1 s, 2 s, 4 s, ...), not in a hot loop; every reconcile bounded by
    // the 2 s report timeout plus slack.
    let errors = || {
        let text = operator.metrics.render();
        text.lines()
            .find(|l| {
                l.starts_with("berth_operator_reconcile_errors_total{kind=\"proxy_unanswered\"}")
            })
            .and_then(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = errors();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let retries = errors() - before;
    assert!(
        errors() >= 2,
        "hung was retried: {}",
        operator.metrics.render()
    );
    // Retried in a loop, each attempt costs the 2 s report timeout: 10 in 20 s. With backoff
    // (1, 2, 4, 8 s between attempts, plus the retries the object's own status changes trigger)
    // far fewer.
    assert!(
        retries <= 6,
        "hung retried with backoff, not in a loop: {retries} retries in 20 s"
    );
    assert_eq!(
        operator.reconciles_slower_than(Duration::from_secs(5)),
        0,
        "no reconcile ran past the 2 s report timeout plus slack: {}",
        operator.metrics.render()
    );

    hung.abort();
    running.shutdown().await;
    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

#[tokio::test]
async fn br_34_stdio_child_crash_loop_is_ready_false_with_reason_last_stderr_and_restarts() {
    use berth_crds::SessionStrategy;
    use berth_tests::stdio::{Marker, fault_child};
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-crash").await;
    let operator = Operator::start("berth-operator-crash", settings(&ns.name, RESYNC));
    // The pod's proxy: a stdio upstream whose child prints a reason on stderr and exits 1 at
    // start, over and over; the proxy keeps retrying (no give-up) so the operator sees the loop.
    let marker = Marker::new("op-br34");
    let config = berth_tests::stdio::config(
        fault_child(&marker, &["--fail-start", "--exit-code", "1"]),
        SessionStrategy::PerClient,
    );
    let (admin, port) = admin_listener().await;
    let mcp = TcpListener::bind("127.0.0.1:0").await.expect("bind mcp");
    let env = |var: &str| (var == "BERTH_STDIO_MAX_QUICK_FAILURES").then(|| "0".to_owned());
    let running = berth_proxy::start_on(&config, mcp, admin, &env)
        .await
        .expect("proxy starts");

    let mut stdio = upstream("crashy", port, None);
    stdio.spec.upstream.transport = berth_crds::Transport::Stdio;
    stdio.spec.upstream.command = Some(vec!["server".to_owned()]);
    create(&ns, &stdio).await;
    let pod = eventually_pod(&ns, "crashy", DEADLINE).await;
    play_kubelet(&ns, &pod, false, IMAGE_ID).await;

    let crashy = eventually(
        &ns,
        "crashy",
        "Ready=False UpstreamCrashLooping",
        DEADLINE,
        |u| has(u, "Ready", "False", "UpstreamCrashLooping"),
    )
    .await;
    let ready = current_condition(&crashy, "Ready").expect("Ready");
    assert!(
        ready.message.contains("no database URL provided") && ready.message.contains("restarts"),
        "last stderr line and restart count: {ready:?}"
    );
    assert!(
        !ready.message.contains("sk-"),
        "secret-like values redacted: {ready:?}"
    );
    assert!(has(
        &crashy,
        "UpstreamReady",
        "False",
        "UpstreamCrashLooping"
    ));
    assert!(has(&crashy, "Degraded", "True", "UpstreamCrashLooping"));
    let event = eventually_event(&ns, "crashy", "UpstreamCrashLooping").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    running.shutdown().await;
    operator.stop().await.expect("operator stops");
    ns.delete().await;
}
