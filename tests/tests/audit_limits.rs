//! The audit log under hostile input (issue 39, item 6; `docs/audit.md`): the `berth-proxy`
//! binary with its stdout a pipe nobody reads keeps answering `/healthz` and calls, a 1 MiB tool
//! name gives a bounded audit line, and a full audit queue drops events (`Drop`) or refuses
//! calls before the upstream (`RefuseCalls`). No authorization server needed.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::{Duration, Instant};

use berth_crds::proxy_config::audit::AuditLog;
use berth_crds::proxy_config::limits::{AuditOverflow, LimitsSpec};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{call, config, open_session, post_raw, sample};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStdout;

const DROPPED: &str = "berth_proxy_audit_events_dropped_total";

/// An HTTP client (the TLS provider installed first, as reqwest needs).
fn http_client() -> reqwest::Client {
    berth_proxy::install_crypto_provider();
    reqwest::Client::new()
}

/// The proxy binary in front of `upstream_url` with audit on and `limits`, its stdout piped
/// (taken, for the test to read or leave unread), and the directory of its config.
async fn start(
    upstream_url: &str,
    limits: LimitsSpec,
    client: &reqwest::Client,
) -> (ProxyProcess, ChildStdout, tempfile::TempDir) {
    berth_proxy::install_crypto_provider();
    let mut cfg = config(upstream_url, "30s");
    cfg.audit = AuditLog::Stdout;
    cfg.limits = limits;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.yaml");
    std::fs::write(&path, cfg.to_yaml().expect("yaml")).expect("write config");
    let args: Vec<OsString> = vec!["--config".into(), path.into()];
    let mut proxy = ProxyProcess::start_with_stdout(
        &proxy_bin(None, false).expect("the proxy binary"),
        &args,
        &[],
        Stdio::piped(),
        Stdio::inherit(),
        client,
    )
    .await
    .expect("proxy starts");
    let stdout = proxy.take_stdout().expect("piped stdout");
    (proxy, stdout, dir)
}

/// One sessionless `tools/call` of `tool` (refused by the front, `missing_session`, and
/// audited), answered within `within`; its HTTP status.
async fn sessionless_call(
    client: &reqwest::Client,
    url: &str,
    tool: &str,
    within: Duration,
) -> u16 {
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(call(json!(1), tool, json!({"n": 1})))
        .timeout(within)
        .send()
        .await;
    match sent {
        Ok(reply) => reply.status().as_u16(),
        Err(error) => panic!("a call is answered within {within:?}: {error}"),
    }
}

/// Fills the audit queue of a proxy whose stdout nobody reads: sessionless calls with
/// `tool_bytes`-long tool names until `berth_proxy_audit_events_dropped_total` counts one more
/// drop than before (so what room is left is less than one such call's line).
async fn fill_audit_queue(client: &reqwest::Client, proxy: &ProxyProcess, tool_bytes: usize) {
    let tool = "f".repeat(tool_bytes);
    let metrics = proxy.metrics(client).await.expect("metrics");
    let before = sample(&metrics, DROPPED);
    for round in 0..200 {
        for _ in 0..20 {
            sessionless_call(client, &proxy.mcp_url, &tool, Duration::from_secs(10)).await;
        }
        let metrics = proxy.metrics(client).await.expect("metrics");
        if sample(&metrics, DROPPED) > before {
            return;
        }
        assert!(round < 199, "the audit queue never filled: {metrics}");
    }
}

#[tokio::test]
async fn audit_stalled_stdout_healthz_and_calls_keep_answering() {
    let upstream = FaultUpstream::start().await;
    let client = http_client();
    let limits = LimitsSpec {
        audit_queue_bytes: 65536,
        audit_field_bytes: 4096,
        ..LimitsSpec::default()
    };
    // Held open and never read: once the pipe's buffer is full, the writer thread blocks.
    let (proxy, _stdout, _dir) = start(&upstream.url, limits, &client).await;
    // More lines than the pipe and any bounded queue hold (the old queue held 16,384 lines).
    let tool = "t".repeat(1000);
    let url = proxy.mcp_url.clone();
    let started = Instant::now();
    let statuses: Vec<u16> = futures::stream::iter(0..17_000)
        .map(|_| sessionless_call(&client, &url, &tool, Duration::from_secs(10)))
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == 400),
        "each refused: {statuses:?}"
    );
    let healthz = format!("http://127.0.0.1:{}/healthz", proxy.admin_port);
    let health = client
        .get(&healthz)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .expect("/healthz answers within 2 s");
    assert!(health.status().is_success(), "{}", health.status());
    let session = open_session(&proxy.mcp_url).await;
    let reply = post_raw(
        &proxy.mcp_url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "still here"})),
    )
    .await;
    assert_eq!(reply.last()["id"], 2, "{}", reply.text);
    assert!(reply.last().get("result").is_some(), "{}", reply.text);
    let metrics = proxy.metrics(&client).await.expect("metrics");
    assert!(sample(&metrics, DROPPED) > 0.0, "drops counted: {metrics}");
    eprintln!("17,000 calls in {:?}", started.elapsed());
}

#[tokio::test]
async fn audit_megabyte_tool_name_gives_a_bounded_line() {
    let upstream = FaultUpstream::start().await;
    let client = http_client();
    let (proxy, stdout, _dir) = start(&upstream.url, LimitsSpec::default(), &client).await;
    let tool = "n".repeat(1 << 20);
    let status = sessionless_call(&client, &proxy.mcp_url, &tool, Duration::from_secs(10)).await;
    assert_eq!(status, 400);
    let line = tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stdout).lines().next_line(),
    )
    .await
    .expect("an audit line within 10 s")
    .expect("read stdout")
    .expect("stdout open");
    assert!(line.len() < 2048, "a bounded line: {} bytes", line.len());
    let event: Value = serde_json::from_str(&line).expect("one JSON object");
    let expected = format!("{}…[truncated {} bytes]", "n".repeat(256), (1 << 20) - 256);
    assert_eq!(
        event["tool"],
        json!(expected),
        "cut at limits.auditFieldBytes"
    );
}

#[tokio::test]
async fn audit_full_queue_refuse_calls_refuses_before_the_upstream() {
    let upstream = FaultUpstream::start().await;
    let client = http_client();
    let limits = LimitsSpec {
        audit_queue_bytes: 65536,
        audit_field_bytes: 4096,
        audit_on_overflow: AuditOverflow::RefuseCalls,
        ..LimitsSpec::default()
    };
    let (proxy, _stdout, _dir) = start(&upstream.url, limits, &client).await;
    let session = open_session(&proxy.mcp_url).await;
    fill_audit_queue(&client, &proxy, 4096).await;
    let before = upstream.handle().received_count();
    let reply = post_raw(
        &proxy.mcp_url,
        Some(&session),
        &call(json!(3), "echo", json!({"message": "unaudited?"})),
    )
    .await;
    let answer = reply.last();
    assert_eq!(answer["id"], 3, "{}", reply.text);
    assert_eq!(answer["error"]["code"], -32016, "{}", reply.text);
    assert_eq!(answer["error"]["data"]["retryable"], true, "{}", reply.text);
    assert_eq!(
        answer["error"]["data"]["outcome"], "rejected",
        "{}",
        reply.text
    );
    let sent: Vec<_> = upstream
        .handle()
        .received_since(before)
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .collect();
    assert!(sent.is_empty(), "nothing reached the upstream: {sent:?}");
}

#[tokio::test]
async fn audit_full_queue_drop_forwards_the_call_and_counts_the_event() {
    let upstream = FaultUpstream::start().await;
    let client = http_client();
    let limits = LimitsSpec {
        audit_queue_bytes: 65536,
        audit_field_bytes: 4096,
        ..LimitsSpec::default()
    };
    let (proxy, _stdout, _dir) = start(&upstream.url, limits, &client).await;
    let session = open_session(&proxy.mcp_url).await;
    fill_audit_queue(&client, &proxy, 4096).await;
    // Then with lines shorter than the call's own, so its line cannot fit in what is left.
    fill_audit_queue(&client, &proxy, 1).await;
    let metrics = proxy.metrics(&client).await.expect("metrics");
    let dropped = sample(&metrics, DROPPED);
    let reply = post_raw(
        &proxy.mcp_url,
        Some(&session),
        &call(json!(4), "echo", json!({"message": "forwarded"})),
    )
    .await;
    assert_eq!(reply.last()["id"], 4, "{}", reply.text);
    assert!(reply.last().get("result").is_some(), "{}", reply.text);
    let metrics = proxy.metrics(&client).await.expect("metrics");
    assert!(
        sample(&metrics, DROPPED) > dropped,
        "the call's event dropped and counted: {metrics}"
    );
}

/// `{"rows": [{"id": 0, "name": "row 0", "tags": ["a", "b"]}, …]}` of about `bytes` bytes.
fn big_arguments(bytes: usize) -> Value {
    let row = |n: usize| json!({"id": n, "name": format!("row {n}"), "tags": ["a", "b"]});
    let per_row = row(0).to_string().len() + 4;
    json!({ "rows": (0..bytes / per_row).map(row).collect::<Vec<_>>() })
}

#[tokio::test]
async fn audit_digest_of_a_big_call_builds_no_json_tree() {
    let upstream = FaultUpstream::start().await;
    let client = http_client();
    let limits = LimitsSpec {
        max_request_bytes: 16 << 20,
        ..LimitsSpec::default()
    };
    let (proxy, _stdout, _dir) = start(&upstream.url, limits, &client).await;
    let session = open_session(&proxy.mcp_url).await;
    let body = call(json!(6), "nope", big_arguments(7_050_000));
    let before = proxy.status_kib("VmHWM").expect("VmHWM");
    let reply = post_raw(&proxy.mcp_url, Some(&session), &body).await;
    assert_eq!(reply.last()["id"], 6, "{}", reply.text);
    let after = proxy.status_kib("VmHWM").expect("VmHWM");
    let rise_mib = (after.saturating_sub(before)) / 1024;
    eprintln!(
        "one {:.1} MiB tools/call, audit on: peak RSS (VmHWM) {before} KiB -> {after} KiB, +{rise_mib} MiB",
        body.len() as f64 / f64::from(1 << 20)
    );
    assert!(
        rise_mib < 64,
        "the digest costs no JSON tree: VmHWM rose {rise_mib} MiB"
    );
}
