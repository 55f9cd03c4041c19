//! The chart's Grafana dashboard (`charts/berth/files/dashboards/berth.json`, issue 16) against
//! a real Prometheus: a proxy in front of a fixture upstream serves calls that succeed and fail
//! while an operator reconciles an McpUpstream on the local control plane; Prometheus scrapes
//! both, and every panel query, with Grafana's variables filled in as "All" would, must parse
//! and return data. A renamed metric or label breaks this test, not the dashboard.

use std::time::{Duration, Instant};

use berth_crds::McpUpstream;
use berth_tests::cluster::operator::{Operator, settings};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::fault::FaultUpstream;
use berth_tests::prometheus::{self, Prometheus};
use berth_tests::proxy::{call, config, mcp_url, open_session, post_raw, start_ready};
use kube::api::PostParams;
use serde_json::{Value, json};

const DASHBOARD: &str = include_str!("../../charts/berth/files/dashboards/berth.json");
const EVERYTHING: &str = include_str!("../../examples/everything.yaml");

/// Every panel's (title, query), rows' panels included.
fn panel_queries(panels: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a target has an expr");
            queries.push((title.to_owned(), expr.to_owned()));
        }
        queries.extend(panel_queries(&panel["panels"]));
    }
    queries
}

/// `expr` as Grafana sends it with every variable at "All" (`allValue` `.*`) and a 30 s rate
/// interval (four scrapes here).
fn as_sent(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$namespace", ".*")
        .replace("$mcpupstream", ".*")
}

#[tokio::test]
async fn dashboard_every_panel_query_returns_data_from_a_prometheus_scraping_a_proxy_under_load() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let queries = panel_queries(&dashboard["panels"]);
    assert!(queries.len() >= 15, "{queries:?}");
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if variable["type"] == "query" {
            assert_eq!(variable["allValue"], ".*", "{variable}");
        }
    }

    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "dashboard").await;
    let operator_metrics = std::net::SocketAddr::from(([127, 0, 0, 1], berth_tests::free_port()));
    let mut operator_settings = settings(&ns.name, Duration::from_secs(2));
    operator_settings.metrics_listen = Some(operator_metrics);
    let operator = Operator::start("berth-operator-dashboard", operator_settings);
    let mcp_upstream: McpUpstream = serde_yaml::from_str(EVERYTHING).expect("example parses");
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &mcp_upstream)
        .await
        .expect("create the McpUpstream");

    let prometheus = Prometheus::start_static(
        &prometheus::binary(),
        &[
            ("berth-proxy", proxy.admin_addr.to_string()),
            ("berth-operator", operator_metrics.to_string()),
        ],
    )
    .await;

    // Load until every query has data: calls that succeed (echo) and fail (bad: isError).
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut id = 0;
    let missing = loop {
        for tool in ["echo", "bad"] {
            id += 1;
            let body = call(json!(id), tool, json!({"message": "dashboard"}));
            let reply = post_raw(&url, Some(&session), &body).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
        }
        let mut missing = Vec::new();
        for (title, expr) in &queries {
            match prometheus.query(&as_sent(expr)).await {
                Ok(series) if !series.is_empty() => {}
                Ok(_) => missing.push(format!("{title}: no data for {expr}")),
                Err(error) => panic!("panel {title:?}: Prometheus refuses {expr}: {error}"),
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        missing.is_empty(),
        "panels without data:\n{}",
        missing.join("\n")
    );

    // The failure ratio panel shows the failing half of the load, per tool.
    let ratio = queries
        .iter()
        .find(|(title, _)| title == "Failure ratio by tool")
        .expect("the failure ratio panel");
    let series = prometheus.query(&as_sent(&ratio.1)).await.expect("query");
    let of = |tool: &str| {
        series
            .iter()
            .find(|s| s["metric"]["tool"] == tool)
            .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
    };
    assert_eq!(of("bad"), Some(1.0), "{series:?}");
    assert_eq!(of("echo"), Some(0.0), "{series:?}");

    operator.stop().await.expect("operator stops");
    proxy.shutdown().await;
    ns.delete().await;
}
