//! One trace from the client through the proxy to the upstream (issue 16), read back from a
//! real Jaeger (`tests/tracing/build.sh`): the real `berth-proxy` binary configured only by the
//! standard `OTEL_*` variables, the Python SDK peer with the OpenTelemetry SDK as a traced
//! upstream (over Streamable HTTP and over stdio), and the Rust fault fixture for timeouts and
//! replays.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use berth_tests::fault::FaultUpstream;
use berth_tests::jaeger::{Jaeger, Span};
use berth_tests::peers::{python_interpreter, python_traced_server};
use berth_tests::proxy::{call, config, open_session, post_with, sample};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use berth_tests::repo_root;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

/// The client's span: a trace id and a parent span id of our own, sampled.
fn traceparent(trace_id: &str, parent: &str, sampled: bool) -> String {
    format!(
        "00-{trace_id}-{parent}-{}",
        if sampled { "01" } else { "00" }
    )
}

/// The span id of the client's own span in every test trace.
const CLIENT_PARENT: &str = "b7ad6b7169203331";

/// POSTs `body` with a `traceparent` header naming trace `trace_id` and [`CLIENT_PARENT`].
async fn traced(
    url: &str,
    session: Option<&str>,
    trace_id: &str,
    sampled: bool,
    body: &str,
) -> berth_tests::proxy::RawReply {
    let header = traceparent(trace_id, CLIENT_PARENT, sampled);
    post_with(url, session, &[("traceparent", &header)], body).await
}

/// 32 hex digits, fresh per call.
fn new_trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The proxy binary with `args`, exporting to `otlp` (and `extra` variables).
async fn traced_proxy(
    args: Vec<OsString>,
    otlp: &str,
    extra: &[(&str, &str)],
    stderr: Stdio,
) -> ProxyProcess {
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("RUST_LOG", "warn,berth_proxy=debug"),
    ];
    env.extend_from_slice(extra);
    ProxyProcess::start(
        &proxy_bin(None, false).expect("the proxy binary"),
        &args,
        &env,
        stderr,
        &reqwest::Client::new(),
    )
    .await
    .expect("proxy starts")
}

fn url_args(upstream: &str) -> Vec<OsString> {
    vec!["--upstream-url".into(), upstream.into()]
}

fn config_args(dir: &tempfile::TempDir, upstream: &str, call_timeout: &str) -> Vec<OsString> {
    let path = dir.path().join("proxy.yaml");
    let yaml = config(upstream, call_timeout).to_yaml().expect("yaml");
    std::fs::write(&path, yaml).expect("write config");
    vec!["--config".into(), path.into()]
}

fn one<'a>(spans: &'a [Span], what: &str, pick: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| pick(s)).collect();
    assert_eq!(found.len(), 1, "exactly one {what} in {spans:#?}");
    found[0]
}

fn kind(span: &Span) -> String {
    span.tag("span.kind").unwrap_or_default()
}

/// The trace context the traced peer reports it received (`trace_context` tool).
fn seen_by_upstream(reply: &Value) -> Value {
    let text = reply
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a text result: {reply}"));
    serde_json::from_str(text).expect("trace_context JSON")
}

/// Calls the traced peer's `trace_context` tool (JSON-RPC id `id`) with a `traceparent` header
/// of trace `trace_id`, and returns the trace context the upstream reports it received.
async fn trace_context_call(
    url: &str,
    session: &str,
    trace_id: &str,
    sampled: bool,
    id: i64,
) -> Value {
    let body = call(json!(id), "trace_context", json!({}));
    let reply = traced(url, Some(session), trace_id, sampled, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    seen_by_upstream(reply.last())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_one_trace_from_the_client_through_the_proxy_to_the_upstream() {
    let jaeger = Jaeger::start().await;
    let upstream = python_traced_server(&jaeger.otlp).await;
    let mut proxy = traced_proxy(url_args(&upstream.url), &jaeger.otlp, &[], Stdio::piped()).await;
    // Read at once, so a full pipe never holds the proxy up.
    let mut pipe = proxy.take_stderr().expect("piped stderr");
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text).await;
        text
    });
    let session = open_session(&proxy.mcp_url).await;

    // Context in from the W3C header.
    let trace_id = new_trace_id();
    let seen = trace_context_call(&proxy.mcp_url, &session, &trace_id, true, 41).await;

    let spans = jaeger.wait_for_spans(&trace_id, 3).await;
    assert_eq!(
        spans.len(),
        3,
        "server, client and upstream spans: {spans:#?}"
    );
    let server = one(&spans, "proxy server span", |s| {
        s.service == "berth-proxy" && kind(s) == "server"
    });
    let client = one(&spans, "proxy client span", |s| {
        s.service == "berth-proxy" && kind(s) == "client"
    });
    let upstream_span = one(&spans, "upstream span", |s| s.service == "python-upstream");
    // Parent order: the client's span -> proxy server -> proxy client -> upstream.
    assert_eq!(server.parent.as_deref(), Some(CLIENT_PARENT));
    assert_eq!(client.parent.as_deref(), Some(server.id.as_str()));
    assert_eq!(upstream_span.parent.as_deref(), Some(client.id.as_str()));
    // Context out, in both places: the proxy's client span is the parent the upstream saw.
    let expected = traceparent(&trace_id, &client.id, true);
    assert_eq!(
        seen["header"],
        json!(expected),
        "traceparent header upstream"
    );
    assert_eq!(
        seen["meta"],
        json!(expected),
        "params._meta.traceparent upstream"
    );
    // The MCP semantic conventions on the server span.
    assert_eq!(server.name, "tools/call trace_context");
    assert_eq!(server.tag("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(
        server.tag("gen_ai.tool.name").as_deref(),
        Some("trace_context")
    );
    assert_eq!(
        server.tag("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        server.tag("mcp.session.id").as_deref(),
        Some(session.as_str())
    );
    assert_eq!(server.tag("jsonrpc.request.id").as_deref(), Some("41"));
    assert_eq!(
        server.tag("mcp.protocol.version").as_deref(),
        Some("2025-06-18")
    );
    assert_eq!(
        server.tag("error.type"),
        None,
        "an ok call has no error.type"
    );
    assert_eq!(client.tag("berth.attempt").as_deref(), Some("1"));

    // Context in from params._meta (SEP-414), which wins over the header.
    let meta_trace = new_trace_id();
    let body = json!({"jsonrpc": "2.0", "id": "m-1", "method": "tools/call", "params": {
        "name": "trace_context", "arguments": {},
        "_meta": {"traceparent": traceparent(&meta_trace, "00f067aa0ba902b7", true)}}});
    let reply = traced(
        &proxy.mcp_url,
        Some(&session),
        &new_trace_id(),
        true,
        &body.to_string(),
    )
    .await;
    let seen_meta = seen_by_upstream(reply.last());
    let spans = jaeger.wait_for_spans(&meta_trace, 3).await;
    let server = one(&spans, "proxy server span", |s| {
        kind(s) == "server" && s.service == "berth-proxy"
    });
    assert_eq!(server.parent.as_deref(), Some("00f067aa0ba902b7"));
    assert_eq!(server.tag("jsonrpc.request.id").as_deref(), Some("m-1"));
    let client = one(&spans, "proxy client span", |s| kind(s) == "client");
    assert_eq!(
        seen_meta["meta"],
        json!(traceparent(&meta_trace, &client.id, true)),
        "the client's _meta.traceparent is replaced by the proxy's span"
    );

    // Sampling honours the parent: an unsampled client trace is not recorded, yet the call
    // works and the upstream is told the decision. The sampled call after it is in Jaeger
    // once its spans arrive, so by then the unsampled one would be too.
    let unsampled = new_trace_id();
    let seen_unsampled = trace_context_call(&proxy.mcp_url, &session, &unsampled, false, 43).await;
    let header = seen_unsampled["header"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        header.starts_with(&format!("00-{unsampled}-")) && header.ends_with("-00"),
        "the upstream sees the unsampled decision: {header}"
    );
    let after = new_trace_id();
    trace_context_call(&proxy.mcp_url, &session, &after, true, 44).await;
    jaeger.wait_for_spans(&after, 3).await;
    let recorded: Vec<Span> = jaeger
        .spans(&unsampled)
        .await
        .into_iter()
        .filter(|s| s.service == "berth-proxy")
        .collect();
    assert!(
        recorded.is_empty(),
        "unsampled parent, spans recorded: {recorded:#?}"
    );

    // Log lines inside a request carry its trace id and span id.
    nix_term(proxy.pid().expect("pid"));
    let stderr = tokio::time::timeout(Duration::from_secs(15), stderr)
        .await
        .expect("the proxy stops on SIGTERM")
        .expect("stderr reader");
    let line = stderr
        .lines()
        .find(|l| l.contains("request finished") && l.contains(&trace_id))
        .unwrap_or_else(|| panic!("a log line of trace {trace_id} in:\n{stderr}"));
    assert!(line.contains("span_id="), "{line}");
}

fn nix_term(pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_sees_the_proxys_span_in_meta() {
    let jaeger = Jaeger::start().await;
    let script = repo_root().join("tests/peers/python/traced_server.py");
    let command = format!(
        "{} {} stdio",
        python_interpreter().display(),
        script.display()
    );
    let args: Vec<OsString> = vec![
        "--upstream-command".into(),
        command.into(),
        "--max-sessions".into(),
        "4".into(),
    ];
    // The child inherits the proxy's environment; the peer reads its own endpoint variable.
    let extra = [("BERTH_TRACED_OTLP_ENDPOINT", jaeger.otlp.as_str())];
    let proxy = traced_proxy(args, &jaeger.otlp, &extra, Stdio::null()).await;
    let session = open_session(&proxy.mcp_url).await;
    let trace_id = new_trace_id();
    let seen = trace_context_call(&proxy.mcp_url, &session, &trace_id, true, 7).await;
    assert_eq!(seen["header"], Value::Null, "stdio has no headers");
    let spans = jaeger.wait_for_spans(&trace_id, 3).await;
    let server = one(&spans, "proxy server span", |s| {
        s.service == "berth-proxy" && kind(s) == "server" && s.name == "tools/call trace_context"
    });
    let client = one(&spans, "proxy client span", |s| kind(s) == "client");
    let upstream_span = one(&spans, "upstream span", |s| s.service == "python-upstream");
    assert_eq!(client.parent.as_deref(), Some(server.id.as_str()));
    assert_eq!(upstream_span.parent.as_deref(), Some(client.id.as_str()));
    assert_eq!(
        seen["meta"],
        json!(traceparent(&trace_id, &client.id, true))
    );

    // The session's own start (PerClient: the handshake and the child's start) is traced too,
    // under the initialize request.
    let init_trace = new_trace_id();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tracing-test", "version": "0"}}});
    let opened = traced(&proxy.mcp_url, None, &init_trace, true, &init.to_string()).await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    let spans = jaeger.wait_for_spans(&init_trace, 3).await;
    let server = one(&spans, "initialize span", |s| s.name == "initialize");
    let handshake = one(&spans, "handshake span", |s| {
        s.name == "berth.upstream.handshake"
    });
    let start = one(&spans, "stdio start span", |s| {
        s.name == "berth.stdio.start"
    });
    assert_eq!(handshake.parent.as_deref(), Some(server.id.as_str()));
    assert_eq!(start.parent.as_deref(), Some(handshake.id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_has_error_type_timeout() {
    let jaeger = Jaeger::start().await;
    let upstream = FaultUpstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = traced_proxy(
        config_args(&dir, &upstream.url, "300ms"),
        &jaeger.otlp,
        &[],
        Stdio::null(),
    )
    .await;
    let session = open_session(&proxy.mcp_url).await;
    let trace_id = new_trace_id();
    let reply = traced(
        &proxy.mcp_url,
        Some(&session),
        &trace_id,
        true,
        &call(json!(5), "slow", json!({"ms": 5000})),
    )
    .await;
    assert_eq!(
        reply.last().pointer("/error/data/outcome"),
        Some(&json!("timeout")),
        "{}",
        reply.text
    );
    let spans = jaeger.wait_for_spans(&trace_id, 2).await;
    let server = one(&spans, "server span", |s| kind(s) == "server");
    assert_eq!(server.tag("error.type").as_deref(), Some("timeout"));
    assert_eq!(server.tag("otel.status_code").as_deref(), Some("ERROR"));
    let client = one(&spans, "client span", |s| kind(s) == "client");
    assert_eq!(client.tag("error.type").as_deref(), Some("timeout"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_call_shows_both_attempts() {
    let jaeger = Jaeger::start().await;
    let upstream = FaultUpstream::builder().record(true).start().await;
    let proxy = traced_proxy(url_args(&upstream.url), &jaeger.otlp, &[], Stdio::null()).await;
    let session = open_session(&proxy.mcp_url).await;
    // The upstream forgets its session: the next call is refused (404) and replayed once.
    assert!(
        upstream.expire_all() > 0,
        "the proxy's upstream session existed"
    );
    let from = upstream.received().len();
    let trace_id = new_trace_id();
    let reply = traced(
        &proxy.mcp_url,
        Some(&session),
        &trace_id,
        true,
        &call(json!(9), "echo", json!({"message": "again"})),
    )
    .await;
    assert!(reply.last().get("result").is_some(), "{}", reply.text);
    let spans = jaeger.wait_for_spans(&trace_id, 4).await;
    let server = one(&spans, "server span", |s| kind(s) == "server");
    assert_eq!(server.tag("error.type"), None, "the replay succeeded");
    let mut attempts: Vec<&Span> = spans.iter().filter(|s| kind(s) == "client").collect();
    attempts.sort_by_key(|s| s.tag("berth.attempt"));
    assert_eq!(attempts.len(), 2, "both attempts: {spans:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.parent.as_deref(), Some(server.id.as_str()));
    }
    assert_eq!(
        attempts[0].tag("error.type").as_deref(),
        Some("session_lost")
    );
    assert_eq!(attempts[1].tag("berth.replay").as_deref(), Some("true"));
    let reinit = one(&spans, "re-initialization span", |s| {
        s.name == "berth.upstream.reinitialize"
    });
    assert_eq!(reinit.parent.as_deref(), Some(server.id.as_str()));

    // Each attempt's POST named its own span, in the header and in params._meta.
    let calls: Vec<_> = upstream
        .received_since(from)
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .collect();
    assert_eq!(
        calls.len(),
        2,
        "the call and its replay reached the upstream"
    );
    for (received, attempt) in calls.iter().zip(&attempts) {
        let expected = traceparent(&trace_id, &attempt.id, true);
        let header = received
            .headers
            .iter()
            .find(|(name, _)| name == "traceparent")
            .map(|(_, value)| value.clone());
        assert_eq!(header.as_deref(), Some(expected.as_str()));
        assert_eq!(
            received.message.pointer("/params/_meta/traceparent"),
            Some(&json!(expected))
        );
        // Everything else the client sent arrives as it was.
        assert_eq!(
            received.message.pointer("/params/arguments"),
            Some(&json!({"message": "again"}))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_no_call_and_its_spans_are_counted_as_dropped() {
    // A collector that never answers (connections hang, like a firewall DROP): each export
    // waits out its 500 ms timeout while calls go on, so the 8-span queue fills.
    let collector = FaultUpstream::black_hole().await;
    let endpoint = format!("http://{}", collector.addr);
    let upstream = FaultUpstream::start().await;
    let extra = [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
    ];
    let proxy = traced_proxy(url_args(&upstream.url), &endpoint, &extra, Stdio::null()).await;
    let session = open_session(&proxy.mcp_url).await;
    let started = std::time::Instant::now();
    for n in 0..40 {
        let body = call(json!(n), "echo", json!({"message": "still served"}));
        let reply = traced(&proxy.mcp_url, Some(&session), &new_trace_id(), true, &body).await;
        assert!(reply.last().get("result").is_some(), "{}", reply.text);
    }
    // Had a call waited for an export, 40 calls would take at least 40 export timeouts
    // (20 s); they take a small fraction of that.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "40 calls took {took:?}");
    let client = reqwest::Client::new();
    let series =
        |reason: &str| format!("berth_proxy_trace_spans_dropped_total{{reason=\"{reason}\"}}");
    let (queue_full, failed) = berth_tests::wait_for(
        "spans counted as dropped for both reasons",
        Duration::from_secs(30),
        || async {
            let metrics = proxy.metrics(&client).await.ok()?;
            let counts = (
                sample(&metrics, &series("queue_full")),
                sample(&metrics, &series("export_failed")),
            );
            (counts.0 > 0.0 && counts.1 > 0.0).then_some(counts)
        },
    )
    .await;
    let metrics = proxy.metrics(&client).await.expect("metrics");
    assert_eq!(
        sample(&metrics, "berth_proxy_trace_spans_exported_total"),
        0.0,
        "nothing reached a collector (queue_full {queue_full}, export_failed {failed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_traces_off_the_clients_trace_context_passes_unchanged() {
    let upstream = FaultUpstream::builder().record(true).start().await;
    let proxy = ProxyProcess::start(
        &proxy_bin(None, false).expect("the proxy binary"),
        &url_args(&upstream.url),
        &[],
        Stdio::null(),
        &reqwest::Client::new(),
    )
    .await
    .expect("proxy starts");
    let session = open_session(&proxy.mcp_url).await;
    let from = upstream.received().len();
    let client = traceparent(&new_trace_id(), CLIENT_PARENT, true);
    let meta = format!(r#""_meta":{{"traceparent":"{client}","tracestate":"k=v"}}"#);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"m"}},{meta}}}}}"#
    );
    let reply = post_with(&proxy.mcp_url, Some(&session), &[], &body).await;
    assert!(reply.last().get("result").is_some(), "{}", reply.text);
    let received = upstream
        .received_since(from)
        .into_iter()
        .find(|r| r.method.as_deref() == Some("tools/call"))
        .expect("the call reached the upstream");
    assert!(
        received.raw.contains(&meta),
        "the client's _meta byte for byte: {}",
        received.raw
    );
}
