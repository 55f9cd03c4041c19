//! Issue 12, item 2: a call the client cancels is not answered.
//!
//! The receiver of `notifications/cancelled` should not answer the cancelled request (MCP
//! 2025-11-25, "Cancellation"). Over HTTP the proxy answered it with -32800, which the
//! TypeScript SDK client reports through `onerror` as a response to an unknown request. Now a
//! client that accepts SSE gets a stream that ends without a response, and a client whose
//! `Accept` names only JSON gets `202 Accepted` with no body (proxy/README.md, "Cancellation").
//! In every case the upstream gets `notifications/cancelled` under its own id and the call is
//! counted once, `cancelled`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    RawReply, call, config, mcp_url, open_session, post_raw, post_stream, post_with, sample,
    scrape, start_ready,
};
use berth_tests::{repo_root, wait_for};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long the `slow` tool would take: far beyond every wait below, so only the cancellation
/// can end the call.
const SLOW_MS: u64 = 20_000;
/// Bound for the cancelled call's reply to end: well under [`SLOW_MS`].
const REPLY_BOUND: Duration = Duration::from_secs(5);

const JSON_ONLY: [(&str, &str); 1] = [("accept", "application/json")];

/// Waits until the upstream has the `tools/call` (any id, as the proxy rewrote it); returns the
/// id the upstream saw.
async fn upstream_call_id(upstream: &FaultUpstream) -> Value {
    wait_for("the call to reach the upstream", REPLY_BOUND, || async {
        upstream
            .received()
            .into_iter()
            .find(|r| r.method.as_deref() == Some("tools/call"))
            .and_then(|r| r.id)
    })
    .await
}

/// Sends the client's `notifications/cancelled` for its request `id`; the proxy accepts it.
async fn cancel(url: &str, session: &str, id: Value) {
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "the user gave up"}});
    let reply = post_raw(url, Some(session), &cancel.to_string()).await;
    assert_eq!(reply.status, 202, "{reply:?}");
}

/// The upstream got `notifications/cancelled` for `upstream_id` (its id, not the client's), and
/// the proxy counted the call once, `cancelled`.
async fn assert_cancelled_upstream_and_counted(
    upstream: &FaultUpstream,
    proxy: &berth_proxy::RunningProxy,
    upstream_id: &Value,
) {
    let cancellations = wait_for("notifications/cancelled upstream", REPLY_BOUND, || async {
        let cancellations = upstream.cancellations();
        (!cancellations.is_empty()).then_some(cancellations)
    })
    .await;
    assert_eq!(
        cancellations,
        vec![upstream_id.clone()],
        "under the upstream's id"
    );
    let metrics = scrape(proxy).await;
    let cancelled = r#"berth_proxy_tool_calls_total{outcome="cancelled",tool="slow"}"#;
    assert_eq!(sample(&metrics, cancelled), 1.0, "{metrics}");
    let slow_calls = metrics
        .lines()
        .filter(|l| l.starts_with("berth_proxy_tool_calls_total{") && l.contains(r#"tool="slow""#))
        .count();
    assert_eq!(slow_calls, 1, "one outcome only: {metrics}");
}

/// Starts a `slow` call with client id `id` in the background, with `headers` over the defaults.
fn slow_call_in_background(
    url: &str,
    session: &str,
    id: Value,
    headers: &'static [(&'static str, &'static str)],
) -> tokio::task::JoinHandle<RawReply> {
    let (url, session) = (url.to_owned(), session.to_owned());
    tokio::spawn(async move {
        let body = call(id, "slow", json!({"ms": SLOW_MS}));
        post_with(&url, Some(&session), headers, &body).await
    })
}

/// Cancels the client's request `id` once the upstream has it; returns the client's reply and
/// the upstream's id for the call.
async fn cancel_once_upstream(
    upstream: &FaultUpstream,
    url: &str,
    session: &str,
    id: Value,
    reply: tokio::task::JoinHandle<RawReply>,
) -> (RawReply, Value) {
    let upstream_id = upstream_call_id(upstream).await;
    let cancelled_at = Instant::now();
    cancel(url, session, id).await;
    let reply = tokio::time::timeout(REPLY_BOUND, reply)
        .await
        .expect("the cancelled call's reply ends")
        .expect("the call task");
    assert!(cancelled_at.elapsed() < REPLY_BOUND);
    (reply, upstream_id)
}

#[tokio::test]
async fn rel_02_call_cancelled_before_the_upstream_answers_ends_an_sse_stream_without_a_response() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = slow_call_in_background(&url, &session, json!(7), &[]);
    let (reply, upstream_id) =
        cancel_once_upstream(&upstream, &url, &session, json!(7), reply).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "an SSE stream: {reply:?}"
    );
    assert_eq!(
        reply.messages,
        Vec::<Value>::new(),
        "no response on the stream"
    );
    assert_cancelled_upstream_and_counted(&upstream, &proxy, &upstream_id).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_02_streamed_call_cancelled_mid_stream_ends_its_sse_stream_without_a_response() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let body = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call", "params": {
        "name": "slow", "arguments": {"ms": SLOW_MS, "steps": 200},
        "_meta": {"progressToken": "p-1"}}});
    let (status, mut messages) = post_stream(&url, &session, &body.to_string()).await;
    assert_eq!(status, 200);
    let first = tokio::time::timeout(REPLY_BOUND, messages.recv())
        .await
        .expect("progress within the bound")
        .expect("the stream is open");
    assert_eq!(first["method"], json!("notifications/progress"), "{first}");
    let upstream_id = upstream_call_id(&upstream).await;
    cancel(&url, &session, json!("c-1")).await;
    let rest = tokio::time::timeout(REPLY_BOUND, async {
        let mut rest = Vec::new();
        while let Some(message) = messages.recv().await {
            rest.push(message);
        }
        rest
    })
    .await
    .expect("the stream ends");
    assert!(
        rest.iter()
            .all(|m| m["method"] == json!("notifications/progress")),
        "only progress, no response: {rest:?}"
    );
    assert_cancelled_upstream_and_counted(&upstream, &proxy, &upstream_id).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_02_json_only_client_gets_202_without_a_body_when_the_upstream_answers_json() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = slow_call_in_background(&url, &session, json!(8), &JSON_ONLY);
    let (reply, upstream_id) =
        cancel_once_upstream(&upstream, &url, &session, json!(8), reply).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(reply.messages, Vec::<Value>::new(), "no JSON-RPC body");
    assert_cancelled_upstream_and_counted(&upstream, &proxy, &upstream_id).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_02_json_only_client_gets_202_without_a_body_when_the_upstream_streams() {
    let upstream = FaultUpstream::start().await;
    upstream.update(|f| f.sse_replies = true);
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = slow_call_in_background(&url, &session, json!(9), &JSON_ONLY);
    let (reply, upstream_id) =
        cancel_once_upstream(&upstream, &url, &session, json!(9), reply).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(reply.messages, Vec::<Value>::new(), "no JSON-RPC body");
    assert_cancelled_upstream_and_counted(&upstream, &proxy, &upstream_id).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_02_typescript_sdk_client_cancels_a_call_and_reports_no_error() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let script = repo_root().join("tests/peers/clients/cancel_sdk.mjs");
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .arg(mcp_url(&proxy))
        .arg("slow")
        .arg(json!({"ms": SLOW_MS}).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (tests/peers/node: npm ci)");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let started = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the client starts")
        .expect("stdout");
    assert_eq!(started.as_deref(), Some("started"));
    let upstream_id = upstream_call_id(&upstream).await;
    stdin.write_all(b"cancel\n").await.expect("tell the client");
    let report = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the client reports")
        .expect("stdout")
        .expect("a report line");
    let report: Value = serde_json::from_str(&report).expect("the report is JSON");
    assert!(
        report["rejected"]
            .as_str()
            .is_some_and(|r| r.starts_with("rejected")),
        "{report}"
    );
    assert_eq!(
        report["echo"],
        json!("after"),
        "the session goes on: {report}"
    );
    assert_eq!(report["errors"], json!([]), "{report}");
    let status = child.wait().await.expect("the client exits");
    assert!(status.success());
    assert_cancelled_upstream_and_counted(&upstream, &proxy, &upstream_id).await;
    proxy.shutdown().await;
}
