//! Field case BR-18 repeated: a black-holed upstream (SYNs dropped) and an accept-then-silent
//! upstream, 100 client handshakes each, with the process's open file descriptors and the
//! runtime's live tasks measured before and after. In its own test binary so the counts see
//! this test only (the proxy runs in-process).

use std::time::{Duration, Instant};

use berth_crds::{DurationString, SessionStrategy};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, mcp_url, open_session, post_raw, sample, scrape, wait_ready};
use serde_json::json;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

fn init(id: u64) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}})
    .to_string()
}

/// 100 concurrent `initialize`s, each dialling its own upstream session (`PerClient`), all of
/// which must fail with a JSON-RPC error under their own id within `bound`.
async fn hundred_failed_handshakes(url: &str, bound: Duration) {
    // One client for all 100 (building an HTTP client per request costs more than the budget).
    let client = reqwest::Client::new();
    let replies = futures::future::join_all((1..=100).map(|id| {
        let request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init(id));
        async move {
            let started = Instant::now();
            let response = request.send().await.expect("post");
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.expect("json error body");
            (id, status, body, started.elapsed())
        }
    }))
    .await;
    for (id, status, body, elapsed) in replies {
        assert_eq!(status, 504, "timed out, not refused: {body}");
        assert_eq!(body["id"], json!(id));
        assert_eq!(
            body["error"]["data"]["outcome"],
            json!("upstream_unavailable")
        );
        assert!(
            elapsed < bound,
            "handshake {id} failed after {elapsed:?}, bound {bound:?}"
        );
    }
}

/// Waits for abandoned handshakes to be reaped, then checks the counts came back to the
/// baseline (a small slack for the runtime's own pooled connections).
async fn assert_flat(what: &str, fds_before: usize, tasks_before: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (fds, tasks) = (open_fds(), alive_tasks());
        if fds <= fds_before + 4 && tasks <= tasks_before + 4 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: fds {fds_before} -> {fds}, tasks {tasks_before} -> {tasks}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A proxy whose every client dials its own upstream session (`PerClient`), with a 2 s connect
/// budget and room for 1,024 sessions.
async fn per_client_proxy(upstream_url: &str) -> berth_proxy::RunningProxy {
    let mut cfg = config(upstream_url, "10s");
    cfg.timeouts.connect = DurationString::new("2s");
    cfg.session.strategy = SessionStrategy::PerClient;
    cfg.session.max_sessions = 1024;
    berth_proxy::start(&cfg).await.expect("proxy starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn br_18_hundred_black_holed_and_silent_handshakes_leak_nothing_and_recover() {
    berth_proxy::install_crypto_provider();
    let hole = FaultUpstream::black_hole().await;
    let proxy = per_client_proxy(&hole.url).await;
    let url = mcp_url(&proxy);
    let (fds_before, tasks_before) = (open_fds(), alive_tasks());

    // Black hole: connect budget 2 s, error within 3 s.
    hundred_failed_handshakes(&url, Duration::from_secs(3)).await;
    assert_flat("black hole", fds_before, tasks_before).await;
    let metrics = scrape(&proxy).await;
    assert!(
        sample(
            &metrics,
            r#"berth_proxy_upstream_initializations_total{result="error"}"#
        ) >= 100.0,
        "{metrics}"
    );

    // Once reachable, the next initialize succeeds without restarting the proxy.
    let upstream = hole.open();
    let session = open_session(&url).await;
    assert!(!session.is_empty());
    drop(upstream);
    proxy.shutdown().await;

    // Accept-then-silent: connect succeeds, the handshake never answers; error within 6 s.
    let silent = FaultUpstream::silent().await;
    let proxy = per_client_proxy(&silent.url).await;
    let url = mcp_url(&proxy);
    let (fds_before, tasks_before) = (open_fds(), alive_tasks());
    hundred_failed_handshakes(&url, Duration::from_secs(6)).await;
    assert!(
        silent.accepted() >= 100,
        "each handshake dialled: {}",
        silent.accepted()
    );
    drop(silent);
    assert_flat("accept-then-silent", fds_before, tasks_before).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn br_18_shared_session_against_a_black_hole_is_not_ready_then_recovers() {
    berth_proxy::install_crypto_provider();
    let hole = FaultUpstream::black_hole().await;
    let mut cfg = config(&hole.url, "10s");
    cfg.timeouts.connect = DurationString::new("2s");
    let proxy = berth_proxy::start(&cfg).await.expect("proxy starts");
    let url = mcp_url(&proxy);
    for id in 1..=3 {
        let started = Instant::now();
        let reply = post_raw(&url, None, &init(id)).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(reply.status, 502 | 504), "{reply:?}");
        assert_eq!(reply.last()["id"], json!(id));
    }
    let ready = reqwest::get(format!("http://{}/readyz", proxy.admin_addr))
        .await
        .expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    let metrics = scrape(&proxy).await;
    let failed = sample(
        &metrics,
        r#"berth_proxy_upstream_initializations_total{result="timeout"}"#,
    ) + sample(
        &metrics,
        r#"berth_proxy_upstream_initializations_total{result="error"}"#,
    );
    assert!(failed >= 1.0, "connect failures counted: {metrics}");
    let _upstream = hole.open();
    wait_ready(&proxy, Duration::from_secs(30)).await;
    let session = open_session(&url).await;
    assert!(!session.is_empty());
    proxy.shutdown().await;
}
