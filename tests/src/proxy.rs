//! The berth proxy started in-process on loopback, and small raw-HTTP client helpers.

use std::time::Duration;

use berth_crds::{ProxyConfig, Transport, UpstreamEndpoint};
use berth_proxy::RunningProxy;
use serde_json::{Value, json};

/// A proxy config for `upstream_url` on loopback with the given call timeout.
pub fn config(upstream_url: &str, call_timeout: &str) -> ProxyConfig {
    let mut config = ProxyConfig {
        listen: "127.0.0.1:0".into(),
        admin_listen: "127.0.0.1:0".into(),
        upstream: UpstreamEndpoint {
            command: Vec::new(),
            socket: None,
            max_line_bytes: None,
            transport: Transport::StreamableHttp,
            url: Some(upstream_url.to_owned()),
            headers: Vec::new(),
        },
        session: Default::default(),
        tools_probe: Default::default(),
        timeouts: Default::default(),
        tools: Default::default(),
        downstream_auth: None,
        session_key_env: None,
        request_origin: Default::default(),
        audit: berth_crds::proxy_config::audit::AuditLog::Off,
        limits: Default::default(),
        diagnostics_token_sha256: None,
    };
    config.timeouts.call = berth_crds::DurationString::new(call_timeout);
    config
}

/// Starts the proxy and waits until `/readyz` says ready.
///
/// # Panics
/// When it cannot start or is not ready within 30 s.
pub async fn start_ready(config: &ProxyConfig) -> RunningProxy {
    berth_proxy::install_crypto_provider();
    let running = berth_proxy::start(config).await.expect("proxy starts");
    wait_ready(&running, Duration::from_secs(30)).await;
    running
}

/// Waits until the proxy's `/readyz` answers 200.
///
/// # Panics
/// When it does not within `within`, with the last answer `/readyz` gave (its reason names
/// the upstream's last error).
pub async fn wait_ready(running: &RunningProxy, within: Duration) {
    let ready = format!("http://{}/readyz", running.admin_addr);
    let end = tokio::time::Instant::now() + within;
    let mut last = String::from("no answer");
    loop {
        if let Ok(reply) = reqwest::get(&ready).await {
            let status = reply.status();
            if status.is_success() {
                return;
            }
            last = format!("{status}: {}", reply.text().await.unwrap_or_default());
        }
        if tokio::time::Instant::now() >= end {
            panic!("timed out after {within:?} waiting for proxy readiness; /readyz said {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The MCP endpoint URL of a running proxy.
pub fn mcp_url(running: &RunningProxy) -> String {
    format!("http://{}/mcp", running.mcp_addr)
}

/// The `/metrics` text of a running proxy.
///
/// # Panics
/// When the scrape fails.
pub async fn scrape(running: &RunningProxy) -> String {
    let url = format!("http://{}/metrics", running.admin_addr);
    reqwest::get(url)
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics body")
}

/// The value of the sample whose line starts with `series` (name and labels as rendered), or 0.
pub fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A raw HTTP reply: status, `Mcp-Session-Id`, and the JSON-RPC messages of the body (one for
/// JSON, each `data:` line for SSE).
#[derive(Debug)]
pub struct RawReply {
    /// HTTP status.
    pub status: u16,
    /// `Mcp-Session-Id` response header.
    pub session: Option<String>,
    /// `Content-Type` response header.
    pub content_type: Option<String>,
    /// `Retry-After` response header.
    pub retry_after: Option<String>,
    /// The messages in the body.
    pub messages: Vec<Value>,
    /// The body as received.
    pub text: String,
}

impl RawReply {
    /// The last message (the final response of a request).
    ///
    /// # Panics
    /// When the body had no message.
    pub fn last(&self) -> &Value {
        self.messages.last().expect("reply has a message")
    }
}

/// POSTs a raw body to an MCP endpoint, as a Streamable HTTP client would.
///
/// # Panics
/// When the request cannot be sent.
pub async fn post_raw(url: &str, session: Option<&str>, body: &str) -> RawReply {
    post_with(url, session, &[], body).await
}

/// As [`post_raw`], with `headers` set on the request after the defaults (so
/// `("accept", "application/json")` replaces the default `Accept`).
///
/// # Panics
/// When the request cannot be sent.
pub async fn post_with(
    url: &str,
    session: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> RawReply {
    berth_proxy::install_crypto_provider();
    let client = reqwest::Client::new();
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let mut request = request.build().expect("request builds");
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("header name");
        let value = reqwest::header::HeaderValue::from_str(value).expect("header value");
        request.headers_mut().insert(name, value);
    }
    let response = client.execute(request).await.expect("post");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let session = header("mcp-session-id");
    let content_type = header("content-type");
    let retry_after = header("retry-after");
    let text = response.text().await.expect("body");
    let messages = if text.trim_start().starts_with('{') {
        vec![read_json(text.as_bytes()).expect("json body")]
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| read_json(data.as_bytes()).ok())
            .collect()
    };
    RawReply {
        status,
        session,
        content_type,
        retry_after,
        messages,
        text,
    }
}

/// Reads a JSON-RPC message as the proxy does: JSON a `Value` cannot hold whole (deep nesting,
/// `1e400`) still gives its envelope.
fn read_json(bytes: &[u8]) -> Result<Value, berth_proxy::wire::jsonrpc::ParseError> {
    berth_proxy::wire::jsonrpc::WireMessage::parse(bytes)
        .map(berth_proxy::wire::jsonrpc::WireMessage::into_view)
}

/// `initialize` + `notifications/initialized`; returns the session id.
///
/// # Panics
/// When the handshake fails.
pub async fn open_session(url: &str) -> String {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "berth-tests", "version": "0" },
        },
    });
    let reply = post_raw(url, None, &init.to_string()).await;
    assert_eq!(reply.status, 200, "initialize: {reply:?}");
    let session = reply.session.expect("session id");
    let inited = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let reply = post_raw(url, Some(&session), &inited.to_string()).await;
    assert_eq!(reply.status, 202);
    session
}

/// A `tools/call` message.
pub fn call(id: Value, tool: &str, arguments: Value) -> String {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments },
    })
    .to_string()
}

/// POSTs a raw body and returns the HTTP status and the JSON-RPC messages of the reply as they
/// arrive (one for JSON; each SSE event otherwise), so a test can answer server requests
/// mid-call.
///
/// # Panics
/// When the request cannot be sent.
pub async fn post_stream(
    url: &str,
    session: &str,
    body: &str,
) -> (u16, tokio::sync::mpsc::Receiver<Value>) {
    post_stream_with(url, &[("mcp-session-id", session)], body).await
}

/// As [`post_stream`], with `headers` instead of a session id (a modern request).
///
/// # Panics
/// When the request cannot be sent.
pub async fn post_stream_with(
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, tokio::sync::mpsc::Receiver<Value>) {
    use futures::StreamExt;
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("post");
    let status = response.status().as_u16();
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        if !is_sse {
            if let Ok(value) = response.json::<Value>().await {
                let _ = tx.send(value).await;
            }
            return;
        }
        let mut events = sse_stream::SseByteStream::new(response.bytes_stream());
        while let Some(Ok(event)) = events.next().await {
            let Some(data) = event.data else { continue };
            if let Ok(value) = serde_json::from_str(&data)
                && tx.send(value).await.is_err()
            {
                return;
            }
        }
    });
    (status, rx)
}

/// Opens the session's standalone GET stream; returns its messages as they arrive.
///
/// # Panics
/// When the request cannot be sent or is not answered with 200.
pub async fn open_get_stream(url: &str, session: &str) -> tokio::sync::mpsc::Receiver<Value> {
    use futures::StreamExt;
    let response = reqwest::Client::new()
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status().as_u16(), 200, "GET stream opens");
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut events = sse_stream::SseByteStream::new(response.bytes_stream());
        while let Some(Ok(event)) = events.next().await {
            let Some(data) = event.data else { continue };
            if let Ok(value) = serde_json::from_str(&data)
                && tx.send(value).await.is_err()
            {
                return;
            }
        }
    });
    rx
}

/// `initialize` with the given client capabilities + `notifications/initialized`; returns the
/// session id and the initialize result.
///
/// # Panics
/// When the handshake fails.
pub async fn open_session_with(url: &str, version: &str, capabilities: Value) -> (String, Value) {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": { "name": "berth-tests", "version": "0" },
        },
    });
    let reply = post_raw(url, None, &init.to_string()).await;
    assert_eq!(reply.status, 200, "initialize: {reply:?}");
    let session = reply.session.clone().expect("session id");
    let inited = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(
        post_raw(url, Some(&session), &inited.to_string())
            .await
            .status,
        202
    );
    (session, reply.last()["result"].clone())
}
