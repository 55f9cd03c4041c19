//! Issue 39, item 2: every read has a deadline and every listener a cap, on the MCP port and
//! the admin port alike.
//!
//! Each test attacks the proxy (in-process, in front of the fault upstream) over raw loopback
//! `TcpStream`s, so it controls exactly what is sent and when, and sees a close as the
//! end-of-file or reset it is. Deadlines are 1 s (the slack on top of them is [`SLACK`]); every
//! wait has a deadline and every attack a fixed number of connections.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use berth_crds::{DurationString, ProxyConfig};
use berth_proxy::RunningProxy;
use berth_proxy::server::connections::ADMIN_MAX_CONNECTIONS_PER_SOURCE;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    call, config, mcp_url, open_get_stream, open_session, sample, start_ready,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a close may take beyond its deadline on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);
/// The deadlines of [`hostile_config`].
const DEADLINE: Duration = Duration::from_secs(1);
/// Lower bound of a close by a 1 s deadline (timer granularity).
const NOT_BEFORE: Duration = Duration::from_millis(900);

/// A proxy config with 1 s header, body and idle deadlines.
fn hostile_config(upstream: &str) -> ProxyConfig {
    let mut config = config(upstream, "30s");
    config.limits.header_read_timeout = DurationString::new("1s");
    config.limits.request_body_timeout = DurationString::new("1s");
    config.limits.idle_timeout = DurationString::new("1s");
    config
}

/// Both ports of `running`, with their `port` label.
fn ports(running: &RunningProxy) -> [(&'static str, SocketAddr); 2] {
    [("mcp", running.mcp_addr), ("admin", running.admin_addr)]
}

/// One sample of the proxy's metrics, read without a connection to the admin port.
fn metric(running: &RunningProxy, series: &str) -> f64 {
    sample(&running.engine.metrics.render(), series)
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// Reads until the proxy closes the connection (end-of-file or reset) or `within` of `since`
/// passed; returns when, after `since`, it closed (`None`: still open) and what was read.
async fn read_until_closed(
    stream: &mut TcpStream,
    since: Instant,
    within: Duration,
) -> (Option<Duration>, Vec<u8>) {
    let deadline = tokio::time::Instant::from_std(since + within);
    let mut bytes = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => return (None, bytes),
            Ok(Ok(0) | Err(_)) => return (Some(since.elapsed()), bytes),
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status code of the response at the start of `bytes`.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.parse().ok()
}

/// Reads one response (its body by `Content-Length`) within `within`: status and body.
async fn read_response(stream: &mut TcpStream, within: Duration) -> (u16, Vec<u8>) {
    tokio::time::timeout(within, read_response_now(stream))
        .await
        .unwrap_or_else(|_| panic!("no response within {within:?}"))
}

async fn read_response_now(stream: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut bytes = Vec::new();
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("read a response head");
        assert!(n > 0, "connection closed before a response head");
        bytes.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("a response with Content-Length: {head}"));
    let mut body = bytes[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = stream.read(&mut chunk).await.expect("read a response body");
        assert!(n > 0, "connection closed inside a response body");
        body.extend_from_slice(&chunk[..n]);
    }
    let status = status_of(&bytes).expect("a status line");
    (status, body)
}

/// A keep-alive POST of `body` on `session`, asking for JSON.
fn post(session: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nMcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A keep-alive request each port answers at once (`/healthz` on the admin port, the 404 of
/// an unknown path on the MCP port).
fn cheap_request(port: &str) -> &'static [u8] {
    if port == "admin" {
        b"GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n"
    } else {
        b"GET /unknown HTTP/1.1\r\nHost: berth\r\n\r\n"
    }
}

/// `tools/call echo` on `stream`, a keep-alive connection; asserts the echo came back.
async fn call_echo(stream: &mut TcpStream, session: &str, id: u64) {
    let request = call(json!(id), "echo", json!({"message": "still served"}));
    stream
        .write_all(&post(session, &request))
        .await
        .expect("send the call");
    let (status, body) = read_response(stream, Duration::from_secs(10)).await;
    let reply: Value = serde_json::from_slice(&body).expect("a JSON reply");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "still served",
        "{reply}"
    );
}

/// Waits until `berth_proxy_open_connections{port}` is `count`.
async fn wait_open(running: &RunningProxy, port: &str, count: f64) {
    let series = format!("berth_proxy_open_connections{{port=\"{port}\"}}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(running, &series) != count {
        assert!(
            Instant::now() < deadline,
            "{series} is {} instead of {count}",
            metric(running, &series)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn slowloris_partial_headers_on_either_port_closed_after_header_timeout() {
    let upstream = FaultUpstream::start().await;
    let running = start_ready(&hostile_config(&upstream.url)).await;
    for (port, addr) in ports(&running) {
        let mut slow = Vec::new();
        for _ in 0..8 {
            let mut stream = connect(addr).await;
            let opened = Instant::now();
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: berth\r\nContent-Type: appl")
                .await
                .expect("send half a header block");
            slow.push((opened, stream));
        }
        for (opened, stream) in &mut slow {
            let (closed, _) = read_until_closed(stream, *opened, DEADLINE + SLACK).await;
            let closed = closed.unwrap_or_else(|| {
                panic!(
                    "{port}: half a header block still held after {:?}",
                    DEADLINE + SLACK
                )
            });
            assert!(
                closed >= NOT_BEFORE,
                "{port}: closed after {closed:?}, before the deadline"
            );
        }
        let series =
            format!("berth_proxy_connection_timeouts_total{{port=\"{port}\",stage=\"header\"}}");
        assert_eq!(metric(&running, &series), 8.0, "{series}");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn request_body_stalled_after_headers_gets_408_after_body_timeout() {
    let upstream = FaultUpstream::start().await;
    let running = start_ready(&hostile_config(&upstream.url)).await;
    let mut stream = connect(running.mcp_addr).await;
    let sent = Instant::now();
    stream
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\n\
              Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":",
        )
        .await
        .expect("send the headers and a tenth of the body");
    let (closed, bytes) = read_until_closed(&mut stream, sent, DEADLINE + SLACK).await;
    let closed =
        closed.unwrap_or_else(|| panic!("a stalled body still held after {:?}", DEADLINE + SLACK));
    assert!(
        closed >= NOT_BEFORE,
        "closed after {closed:?}, before the deadline"
    );
    assert_eq!(
        status_of(&bytes),
        Some(408),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let series = "berth_proxy_connection_timeouts_total{port=\"mcp\",stage=\"body\"}";
    assert_eq!(metric(&running, series), 1.0, "{series}");
    running.shutdown().await;
}

#[tokio::test]
async fn idle_keep_alive_connection_on_either_port_closed_after_idle_timeout() {
    let upstream = FaultUpstream::start().await;
    let mut config = hostile_config(&upstream.url);
    // Longer than the idle deadline, so only the idle deadline can close it.
    config.limits.header_read_timeout = DurationString::new("30s");
    let running = start_ready(&config).await;
    for (port, addr) in ports(&running) {
        let mut stream = connect(addr).await;
        stream.write_all(cheap_request(port)).await.expect("send");
        let (status, _) = read_response(&mut stream, Duration::from_secs(5)).await;
        assert!(status < 500, "{port}: answered {status}");
        let answered = Instant::now();
        let (closed, rest) = read_until_closed(&mut stream, answered, DEADLINE + SLACK).await;
        let closed = closed.unwrap_or_else(|| {
            panic!(
                "{port}: an idle connection still open after {:?}",
                DEADLINE + SLACK
            )
        });
        assert!(
            closed >= NOT_BEFORE,
            "{port}: closed after {closed:?}, before the deadline"
        );
        assert!(rest.is_empty(), "{port}: nothing more is said");
        let series =
            format!("berth_proxy_connection_timeouts_total{{port=\"{port}\",stage=\"idle\"}}");
        assert_eq!(metric(&running, &series), 1.0, "{series}");
    }
    running.shutdown().await;
}

/// Opens `held` connections beyond `calling` (a keep-alive connection that made a call), then
/// `extra` more, which must each be refused at once (503 or a bare close); `calling` still
/// calls afterwards. Returns nothing: the refusal counter is the caller's to check.
async fn refuse_past_the_cap(running: &RunningProxy, session: &str, held: usize, extra: usize) {
    let mut calling = connect(running.mcp_addr).await;
    call_echo(&mut calling, session, 1).await;
    let mut kept = Vec::new();
    for _ in 0..held {
        kept.push(connect(running.mcp_addr).await);
    }
    wait_open(running, "mcp", (held + 1) as f64).await;
    for n in 0..extra {
        let mut refused = connect(running.mcp_addr).await;
        let (closed, bytes) = read_until_closed(&mut refused, Instant::now(), SLACK).await;
        assert!(
            closed.is_some(),
            "connection {n} past the cap is still open"
        );
        assert!(
            bytes.is_empty() || status_of(&bytes) == Some(503),
            "refused with {}",
            String::from_utf8_lossy(&bytes)
        );
    }
    call_echo(&mut calling, session, 2).await;
}

#[tokio::test]
async fn connections_past_max_connections_refused_while_an_open_one_still_calls() {
    let upstream = FaultUpstream::start().await;
    let mut config = hostile_config(&upstream.url);
    config.limits.header_read_timeout = DurationString::new("30s");
    config.limits.idle_timeout = DurationString::new("30s");
    config.limits.max_connections = 4;
    config.limits.max_connections_per_source = 4;
    let running = start_ready(&config).await;
    let session = open_session(&mcp_url(&running)).await;
    wait_open(&running, "mcp", 0.0).await;
    refuse_past_the_cap(&running, &session, 3, 3).await;
    let series = "berth_proxy_connections_refused_total{port=\"mcp\",reason=\"max_connections\"}";
    assert_eq!(metric(&running, series), 3.0, "{series}");
    running.shutdown().await;
}

#[tokio::test]
async fn connections_past_max_connections_per_source_refused_while_an_open_one_still_calls() {
    let upstream = FaultUpstream::start().await;
    let mut config = hostile_config(&upstream.url);
    config.limits.header_read_timeout = DurationString::new("30s");
    config.limits.idle_timeout = DurationString::new("30s");
    config.limits.max_connections = 64;
    config.limits.max_connections_per_source = 3;
    let running = start_ready(&config).await;
    let session = open_session(&mcp_url(&running)).await;
    wait_open(&running, "mcp", 0.0).await;
    refuse_past_the_cap(&running, &session, 2, 3).await;
    let series =
        "berth_proxy_connections_refused_total{port=\"mcp\",reason=\"max_connections_per_source\"}";
    assert_eq!(metric(&running, series), 3.0, "{series}");
    running.shutdown().await;
}

#[tokio::test]
async fn admin_connections_past_its_cap_refused_while_an_open_one_still_answers() {
    let upstream = FaultUpstream::start().await;
    let mut config = hostile_config(&upstream.url);
    config.limits.header_read_timeout = DurationString::new("30s");
    config.limits.idle_timeout = DurationString::new("30s");
    let running = start_ready(&config).await;
    wait_open(&running, "admin", 0.0).await;
    let mut probing = connect(running.admin_addr).await;
    let health = cheap_request("admin");
    probing.write_all(health).await.expect("send");
    assert_eq!(read_response(&mut probing, SLACK).await.0, 200);
    let mut kept = Vec::new();
    for _ in 1..ADMIN_MAX_CONNECTIONS_PER_SOURCE {
        kept.push(connect(running.admin_addr).await);
    }
    wait_open(&running, "admin", ADMIN_MAX_CONNECTIONS_PER_SOURCE as f64).await;
    for n in 0..3 {
        let mut refused = connect(running.admin_addr).await;
        let (closed, bytes) = read_until_closed(&mut refused, Instant::now(), SLACK).await;
        assert!(
            closed.is_some(),
            "admin connection {n} past the cap is still open"
        );
        assert!(bytes.is_empty() || status_of(&bytes) == Some(503));
    }
    probing.write_all(health).await.expect("send");
    assert_eq!(read_response(&mut probing, SLACK).await.0, 200);
    let series = "berth_proxy_connections_refused_total{port=\"admin\",reason=\"max_connections_per_source\"}";
    assert_eq!(metric(&running, series), 3.0, "{series}");
    running.shutdown().await;
}

#[tokio::test]
async fn header_block_over_max_header_bytes_on_either_port_gets_431_or_a_close() {
    let upstream = FaultUpstream::start().await;
    let mut config = hostile_config(&upstream.url);
    config.limits.max_header_bytes = 8192;
    let running = start_ready(&config).await;
    for (port, addr) in ports(&running) {
        let mut stream = connect(addr).await;
        let path = if port == "admin" {
            "/healthz"
        } else {
            "/unknown"
        };
        let filler = "a".repeat(16 * 1024);
        let request = format!("GET {path} HTTP/1.1\r\nHost: berth\r\nX-Filler: {filler}\r\n\r\n");
        // The proxy may close before it has read it all.
        let _ = stream.write_all(request.as_bytes()).await;
        let (closed, bytes) = read_until_closed(&mut stream, Instant::now(), SLACK).await;
        assert!(
            closed.is_some(),
            "{port}: connection still open after an oversized header"
        );
        assert!(
            bytes.is_empty() || status_of(&bytes) == Some(431),
            "{port}: answered {}",
            String::from_utf8_lossy(&bytes)
        );
        let series = format!("berth_proxy_oversized_headers_total{{port=\"{port}\"}}");
        assert_eq!(metric(&running, &series), 1.0, "{series}");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn slow_tools_call_longer_than_idle_timeout_is_answered() {
    let upstream = FaultUpstream::start().await;
    let running = start_ready(&hostile_config(&upstream.url)).await;
    let session = open_session(&mcp_url(&running)).await;
    let mut stream = connect(running.mcp_addr).await;
    let request = call(
        json!(1),
        "slow",
        json!({"ms": 2500, "message": "slow answer"}),
    );
    stream
        .write_all(&post(&session, &request))
        .await
        .expect("send the call");
    let (status, body) = read_response(&mut stream, Duration::from_secs(10)).await;
    let reply: Value = serde_json::from_slice(&body).expect("a JSON reply");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "slow answer",
        "{reply}"
    );
    let idle = "berth_proxy_connection_timeouts_total{port=\"mcp\",stage=\"idle\"}";
    assert_eq!(metric(&running, idle), 0.0, "{idle}");
    running.shutdown().await;
}

#[tokio::test]
async fn get_stream_open_longer_than_idle_timeout_keeps_its_events() {
    let upstream = FaultUpstream::start().await;
    let running = start_ready(&hostile_config(&upstream.url)).await;
    let url = mcp_url(&running);
    let session = open_session(&url).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.open_streams() == 0 {
        assert!(
            Instant::now() < deadline,
            "the proxy opened its upstream GET stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut events = open_get_stream(&url, &session).await;
    // Events every half second for three idle deadlines, then silence longer than one.
    let gaps = [500, 500, 500, 500, 500, 500, 2500];
    for (n, gap) in gaps.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(gap)).await;
        upstream.notify_tools_changed();
        let event = tokio::time::timeout(SLACK, events.recv())
            .await
            .unwrap_or_else(|_| panic!("event {n} did not arrive within {SLACK:?}"))
            .unwrap_or_else(|| panic!("the GET stream ended before event {n}"));
        assert_eq!(
            event["method"], "notifications/tools/list_changed",
            "{event}"
        );
    }
    running.shutdown().await;
}
