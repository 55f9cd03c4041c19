//! Issue 12, item 3: a response the upstream delivers on its standalone GET stream, after
//! answering the call's POST with a bodiless 202 or an SSE stream that ends without it, reaches
//! the client that made the call under its own id, within the call's budget, and is counted in
//! `berth_proxy_standalone_responses_total{result="routed"}`. A response on the standalone
//! stream for no pending call is counted `unmatched` and dropped.

use std::time::{Duration, Instant};

use berth_crds::SessionStrategy;
use berth_tests::fault::{FaultUpstream, StandaloneAnswer};
use berth_tests::proxy::{
    call, config, mcp_url, open_session, post_with, sample, scrape, start_ready,
};
use berth_tests::wait_for;
use serde_json::json;

const ROUTED: &str = r#"berth_proxy_standalone_responses_total{result="routed"}"#;
const UNMATCHED: &str = r#"berth_proxy_standalone_responses_total{result="unmatched"}"#;

/// Starts the proxy in front of an upstream that answers `echo` on its standalone stream, and
/// waits until the proxy holds that stream open (the upstream counts open GET streams).
async fn setup(
    shape: StandaloneAnswer,
    strategy: SessionStrategy,
) -> (FaultUpstream, berth_proxy::RunningProxy, String, String) {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.answer_on_standalone = Some(shape));
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.strategy = strategy;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    wait_for(
        "the proxy's standalone stream",
        Duration::from_secs(10),
        || async { (upstream.open_streams() >= 1).then_some(()) },
    )
    .await;
    (upstream, proxy, url, session)
}

async fn assert_routed(shape: StandaloneAnswer, strategy: SessionStrategy, accept: &str) {
    let (_upstream, proxy, url, session) = setup(shape, strategy).await;
    let started = Instant::now();
    let reply = post_with(
        &url,
        Some(&session),
        &[("accept", accept)],
        &call(json!("mine-1"), "echo", json!({"message": "late"})),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, 200, "{shape:?} {strategy:?}: {}", reply.text);
    let last = reply.last();
    assert_eq!(
        last["id"],
        json!("mine-1"),
        "{shape:?} {strategy:?}: {last}"
    );
    assert_eq!(
        last["result"]["content"][0]["text"],
        json!("late"),
        "{shape:?} {strategy:?}: {last}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "answered when the response arrived, not at the 10 s budget: {elapsed:?}"
    );
    assert_eq!(sample(&scrape(&proxy).await, ROUTED), 1.0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_03_response_after_a_bodiless_202_is_routed_to_the_call() {
    assert_routed(
        StandaloneAnswer::Accepted,
        SessionStrategy::Shared,
        "application/json, text/event-stream",
    )
    .await;
}

#[tokio::test]
async fn rel_03_response_after_an_empty_sse_stream_is_routed_to_the_call() {
    assert_routed(
        StandaloneAnswer::EmptyStream,
        SessionStrategy::Shared,
        "application/json, text/event-stream",
    )
    .await;
}

#[tokio::test]
async fn rel_03_json_only_client_gets_the_standalone_response_as_json() {
    assert_routed(
        StandaloneAnswer::EmptyStream,
        SessionStrategy::Shared,
        "application/json",
    )
    .await;
}

#[tokio::test]
async fn rel_03_per_client_session_routes_its_standalone_response() {
    assert_routed(
        StandaloneAnswer::Accepted,
        SessionStrategy::PerClient,
        "application/json, text/event-stream",
    )
    .await;
}

#[tokio::test]
async fn rel_03_response_for_no_pending_call_is_counted_and_dropped() {
    let (upstream, proxy, url, session) =
        setup(StandaloneAnswer::Accepted, SessionStrategy::Shared).await;
    let mut stream = berth_tests::proxy::open_get_stream(&url, &session).await;
    assert_eq!(
        upstream.broadcast(&json!({"jsonrpc": "2.0", "id": 999_999, "result": {}})),
        1
    );
    wait_for("the unmatched count", Duration::from_secs(5), || async {
        (sample(&scrape(&proxy).await, UNMATCHED) == 1.0).then_some(())
    })
    .await;
    assert_eq!(sample(&scrape(&proxy).await, ROUTED), 0.0);
    let leaked = tokio::time::timeout(Duration::from_millis(300), stream.recv()).await;
    assert!(
        leaked.is_err(),
        "a response for no call must not reach a client: {leaked:?}"
    );
    proxy.shutdown().await;
}
