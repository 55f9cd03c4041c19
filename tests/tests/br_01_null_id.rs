//! Field case BR-01, its last rule: an upstream error with `"id": null` that comes back for a
//! forwarded request reaches the client under that request's JSON-RPC request id, never as
//! `id: null`, and at once (not at the call budget). An HTTP upstream sends it on the call's
//! own reply (JSON, or an SSE event, with status 200); a stdio child prints it while the call
//! is the only one pending.

use std::time::{Duration, Instant};

use berth_crds::{DurationString, SessionStrategy};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    RawReply, call, config, mcp_url, open_session, post_raw, sample, scrape, start_ready,
    wait_ready,
};
use berth_tests::stdio::{Marker, fault_child, start};
use serde_json::json;

/// The call budget of these proxies: an answer "at once" comes well before it.
const CALL_BUDGET: &str = "20s";
const AT_ONCE: Duration = Duration::from_secs(5);

/// Asserts `reply` is the upstream's error under the client's `id`, and came at once.
fn assert_rekeyed(reply: &RawReply, id: i64, took: Duration) {
    assert_eq!(reply.status, 200, "{reply:?}");
    let answer = reply.last();
    assert_eq!(answer["id"], json!(id), "{reply:?}");
    assert_eq!(answer["error"]["code"], json!(-32603), "{reply:?}");
    assert_eq!(
        answer["error"]["message"],
        json!("could not read the request"),
        "{reply:?}"
    );
    assert!(
        !reply.text.contains("\"id\":null"),
        "id null reached the client: {reply:?}"
    );
    assert!(
        took < AT_ONCE,
        "answered at once, not at the budget: {took:?}"
    );
}

async fn through_http_upstream(sse_replies: bool, id: i64) {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| {
        f.null_id_error = true;
        f.sse_replies = sse_replies;
    });
    let proxy = start_ready(&config(&upstream.url, CALL_BUDGET)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let started = Instant::now();
    let reply = post_raw(&url, Some(&session), &call(json!(id), "raw", json!({}))).await;
    assert_rekeyed(&reply, id, started.elapsed());
    let metrics = scrape(&proxy).await;
    // `raw` is not in the fault upstream's listing, so its calls are labelled `other`.
    let failed = sample(
        &metrics,
        r#"berth_proxy_tool_calls_total{outcome="rpc_error",tool="other"}"#,
    );
    assert_eq!(failed, 1.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_01_upstream_null_id_error_in_a_json_reply_reaches_the_client_under_its_id() {
    through_http_upstream(false, 7).await;
}

#[tokio::test]
async fn br_01_upstream_null_id_error_in_an_sse_reply_reaches_the_client_under_its_id() {
    through_http_upstream(true, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn br_01_stdio_child_null_id_error_answers_the_only_pending_call_under_its_id() {
    let marker = Marker::new("br01null");
    let mut cfg = berth_tests::stdio::config(fault_child(&marker, &[]), SessionStrategy::PerClient);
    cfg.timeouts.call = DurationString::new(CALL_BUDGET);
    let proxy = start(&cfg, &[]).await;
    wait_ready(&proxy, Duration::from_secs(20)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let started = Instant::now();
    let reply = post_raw(&url, Some(&session), &call(json!(9), "null-id", json!({}))).await;
    assert_rekeyed(&reply, 9, started.elapsed());
    // The session goes on: the next call is answered as usual.
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(10), "echo", json!({"tag": "after"})),
    )
    .await;
    assert_eq!(reply.last()["id"], json!(10), "{reply:?}");
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("after"),
        "{reply:?}"
    );
    proxy.shutdown().await;
}

/// Issue 39, item 11: an `id: null` error the child prints after the proxy wrote it a
/// notification may be that notification's, so it never answers the call pending at the time:
/// the call gets its own answer when it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn br_01_stdio_null_id_error_after_a_notification_never_replaces_the_pending_calls_answer() {
    let marker = Marker::new("br01late");
    let mut cfg = berth_tests::stdio::config(fault_child(&marker, &[]), SessionStrategy::PerClient);
    cfg.timeouts.call = DurationString::new(CALL_BUDGET);
    let proxy = start(&cfg, &[]).await;
    wait_ready(&proxy, Duration::from_secs(20)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let pending = {
        let (url, session) = (url.clone(), session.clone());
        tokio::spawn(async move {
            let body = call(json!(11), "sleep", json!({"ms": 1500, "tag": "its own"}));
            post_raw(&url, Some(&session), &body).await
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let unreadable = json!({"jsonrpc": "2.0", "method": "notifications/unreadable"}).to_string();
    let accepted = post_raw(&url, Some(&session), &unreadable).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let reply = pending.await.expect("the call's task");
    assert_eq!(reply.last()["id"], json!(11), "{reply:?}");
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("its own"),
        "the null-id error replaced the call's answer: {reply:?}"
    );
    proxy.shutdown().await;
}
