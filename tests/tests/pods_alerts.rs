//! The chart's alerts fire for real (issue 11): a real Prometheus finds the proxy pods on the
//! one-node cluster through the API server (`kubernetes_sd_configs`, role `pod`, relabelled as
//! the chart's PodMonitor does), scrapes them, and evaluates the rule groups the chart renders,
//! with short `for:` set through chart values. Failing tool calls made through the Service
//! fire `BerthToolCallFailureRatioHigh`, which resolves once calls succeed again; a proxy
//! without a usable upstream fires `BerthUpstreamNotReady`, which resolves once it is fixed.
//!
//! Needs the one-node cluster and `BERTH_PROMETHEUS` (the server binary from
//! `tests/chart/build.sh`); see `berth_tests::node`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use berth_crds::McpUpstream;
use berth_tests::cluster::{TestNamespace, client};
use berth_tests::node::{
    self, READY_DEADLINE, cluster_ip_url, create, eventually_conditions, everything,
};
use berth_tests::prometheus::{ApiAccess, Prometheus};
use berth_tests::rmcp_client;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// Longest an alert may take to reach the state a step waits for: rule `for` 5 s, rate window
/// 20 s, scrapes and evaluations every second, plus pod start-up where a step rolls pods.
const ALERT_DEADLINE: Duration = Duration::from_secs(180);

/// The chart's PrometheusRule `spec` (its rule groups) as `helm template` renders it with the
/// monitoring API present and short `for` and windows for the two alerts under test.
async fn chart_rule_groups() -> Value {
    let chart = berth_tests::repo_root().join("charts/berth");
    let mut helm = Command::new(node::helm_bin());
    helm.args(["template", "berth"])
        .arg(&chart)
        .args(["--api-versions", "monitoring.coreos.com/v1"])
        .args(["--show-only", "templates/prometheusrule.yaml"]);
    let alerts = "monitoring.prometheusRule.alerts";
    for value in [
        "monitoring.prometheusRule.enabled=true".to_owned(),
        format!("{alerts}.BerthToolCallFailureRatioHigh.for=5s"),
        format!("{alerts}.BerthToolCallFailureRatioHigh.window=20s"),
        format!("{alerts}.BerthUpstreamNotReady.for=5s"),
    ] {
        helm.args(["--set", &value]);
    }
    let rendered = node::run(helm, "helm template the PrometheusRule").await;
    let rule: Value = serde_yaml::from_str(&rendered).expect("PrometheusRule YAML");
    assert_eq!(rule["kind"], "PrometheusRule", "{rendered}");
    rule["spec"].clone()
}

fn api_access() -> ApiAccess {
    let pki = node::state_dir().join("pki");
    ApiAccess {
        server: node::cluster_env("BERTH_CP_SERVER"),
        ca: pki.join("ca.crt"),
        cert: pki.join("admin.crt"),
        key: pki.join("admin.key"),
    }
}

/// Waits until alert `name` for McpUpstream `mcpupstream` is in `state` (`None`: inactive),
/// calling `tick` between looks; returns the states seen on the way, in order, deduplicated.
async fn until_alert<F, Fut>(
    prometheus: &Prometheus,
    name: &str,
    mcpupstream: &str,
    state: Option<&str>,
    mut tick: F,
) -> Vec<Option<String>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let end = Instant::now() + ALERT_DEADLINE;
    let mut seen: Vec<Option<String>> = Vec::new();
    loop {
        let now = prometheus
            .alert_state(name, &[("mcpupstream", mcpupstream)])
            .await;
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        if now.as_deref() == state {
            return seen;
        }
        assert!(
            Instant::now() < end,
            "{name} for {mcpupstream} never became {state:?}; seen {seen:?}"
        );
        tick().await;
    }
}

#[tokio::test]
async fn failing_calls_and_a_dead_upstream_fire_the_chart_alerts_in_a_real_prometheus() {
    node::chart_installed().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "pods-alerts").await;
    create(&ns, &everything("flaky")).await;
    // The upstream process runs, but the proxy is pointed at a path it does not serve: no
    // upstream session, so the proxy is never ready.
    let mut broken = everything("broken");
    broken.spec.upstream.path = "/not-mcp".to_owned();
    create(&ns, &broken).await;
    let upstreams = ns.api::<McpUpstream>();
    eventually_conditions(&upstreams, "flaky", &[("Ready", "True")], READY_DEADLINE).await;

    let binary = std::env::var_os("BERTH_PROMETHEUS").map_or_else(
        || panic!("BERTH_PROMETHEUS names the Prometheus server binary (tests/chart/build.sh)"),
        PathBuf::from,
    );
    let prometheus =
        Prometheus::start(&binary, &api_access(), &ns.name, &chart_rule_groups().await).await;

    // The broken proxy never gets an upstream session: pending, then firing after `for`.
    let pause = || async { tokio::time::sleep(Duration::from_millis(500)).await };
    let seen = until_alert(
        &prometheus,
        "BerthUpstreamNotReady",
        "broken",
        Some("firing"),
        pause,
    )
    .await;
    assert!(seen.contains(&Some("pending".to_owned())), "{seen:?}");
    assert_eq!(
        prometheus
            .alert_state("BerthUpstreamNotReady", &[("mcpupstream", "flaky")])
            .await,
        None,
        "the healthy McpUpstream does not alert"
    );
    let mcp = rmcp_client::connect(&cluster_ip_url(&ns, "flaky").await).await;
    // Every call fails with a tool error (isError: true) while the pods stay Ready.
    let seen = until_alert(
        &prometheus,
        "BerthToolCallFailureRatioHigh",
        "flaky",
        Some("firing"),
        || async {
            let failed = rmcp_client::call_tool(&mcp, "echo", json!({})).await;
            assert_eq!(failed.is_error, Some(true), "{failed:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        },
    )
    .await;
    assert!(
        seen.contains(&Some("pending".to_owned())),
        "pending before firing: {seen:?}"
    );
    // Calls succeed again: once the failures leave the rate window the alert resolves.
    until_alert(
        &prometheus,
        "BerthToolCallFailureRatioHigh",
        "flaky",
        None,
        || async {
            let ok = rmcp_client::call_tool(&mcp, "echo", json!({ "message": "fine" })).await;
            assert_ne!(ok.is_error, Some(true), "{ok:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        },
    )
    .await;
    mcp.cancel().await.expect("client closes");

    // Fixed: the new pod's proxy holds an upstream session and the old pod is gone.
    let fix = json!({ "spec": { "upstream": { "path": "/mcp" } } });
    upstreams
        .patch("broken", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .expect("fix the path");
    until_alert(&prometheus, "BerthUpstreamNotReady", "broken", None, pause).await;
    drop(prometheus);
    ns.delete().await;
}
