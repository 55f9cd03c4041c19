//! Issue 12, item 7: an oversized body is refused from its `Content-Length`, before it is read,
//! and the connection then closes cleanly, so the client reads the 413 instead of a reset.
//!
//! Each test speaks HTTP/1.1 over a raw `TcpStream`, so it controls exactly how much of the
//! body is sent and when, and sees a reset as the `ECONNRESET` it is. The proxy runs in-process
//! in front of the fault upstream, which records what reached it.

use std::time::Duration;

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, start_ready};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the proxy gets to answer: far more than a refusal from the headers takes, far less
/// than the test's patience for a proxy that waits for a body that never comes.
const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// The body limit the tests run with: the default `limits.maxRequestBytes` (4 MiB).
fn max_body_bytes() -> usize {
    usize::try_from(berth_crds::proxy_config::limits::LimitsSpec::default().max_request_bytes)
        .expect("fits")
}

/// A response read off the wire.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

/// Reads one response head, and its body by `Content-Length`, within [`ANSWER_DEADLINE`].
async fn read_response(stream: &mut TcpStream) -> RawResponse {
    tokio::time::timeout(ANSWER_DEADLINE, read_response_now(stream))
        .await
        .unwrap_or_else(|_| {
            panic!("no response within {ANSWER_DEADLINE:?}: the proxy waits for the body")
        })
}

async fn read_response_now(stream: &mut TcpStream) -> RawResponse {
    let mut bytes = Vec::new();
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream
            .read(&mut chunk)
            .await
            .expect("read the response head");
        assert!(n > 0, "connection closed before a response head");
        bytes.extend_from_slice(&chunk[..n]);
    };
    let mut response = parse_head(&bytes[..head_end]);
    let length: usize = response
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    response.body = bytes[head_end..].to_vec();
    while response.body.len() < length {
        let mut chunk = vec![0u8; length - response.body.len()];
        let n = stream
            .read(&mut chunk)
            .await
            .expect("read the response body");
        assert!(n > 0, "connection closed inside the response body");
        response.body.extend_from_slice(&chunk[..n]);
    }
    response
}

/// A whole exchange read to its end: the response head, and everything after it as the body.
fn parse_response(bytes: &[u8]) -> RawResponse {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
        .unwrap_or_else(|| panic!("no response head in {} bytes", bytes.len()));
    let mut response = parse_head(&bytes[..head_end]);
    response.body = bytes[head_end..].to_vec();
    response
}

/// The status and headers of a response head; the body is left empty.
fn parse_head(head: &[u8]) -> RawResponse {
    let head = String::from_utf8_lossy(head);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("malformed status line {status_line:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: Vec::new(),
    }
}

/// A POST head for `/mcp` with `extra` header lines (each ending in CRLF).
fn post_head(host: &str, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\n{extra}\r\n"
    )
}

/// The start of a `tools/call` whose arguments go on and on.
fn body_start() -> Vec<u8> {
    let mut body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":""#.to_vec();
    body.resize(1024, b'x');
    body
}

/// The 413 every refusal of an oversized body is: a JSON-RPC error with id null, and
/// `Connection: close`.
fn assert_refused_as_too_large(response: &RawResponse) {
    assert_refused_over(response, max_body_bytes());
}

/// As [`assert_refused_as_too_large`], for a body limit of `limit` bytes.
fn assert_refused_over(response: &RawResponse, limit: usize) {
    assert_eq!(response.status, 413, "{response:?}");
    assert_eq!(response.header("connection"), Some("close"), "{response:?}");
    let body = response.json();
    assert_eq!(body["jsonrpc"], json!("2.0"));
    assert_eq!(body["id"], Value::Null);
    assert_eq!(body["error"]["code"], json!(-32600));
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&limit.to_string()) && message.contains("limits.maxRequestBytes"),
        "names the limit: {message}"
    );
}

/// After the 413 the client may still be sending: it finishes, half-closes, and reads the end of
/// the stream. A clean close is end-of-file here; a server that closed with the client's bytes
/// unread would have reset the connection (`ECONNRESET` on the write or the read).
async fn finish_and_expect_clean_close(stream: &mut TcpStream, more: usize) {
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    while sent < more {
        stream
            .write_all(&chunk)
            .await
            .unwrap_or_else(|e| panic!("writing the rest of the body after {sent} bytes: {e}"));
        sent += chunk.len();
    }
    stream.shutdown().await.expect("half-close");
    let mut rest = Vec::new();
    tokio::time::timeout(ANSWER_DEADLINE, stream.read_to_end(&mut rest))
        .await
        .expect("the proxy closes the connection")
        .expect("a clean close (FIN), not a reset");
    assert!(rest.is_empty(), "nothing after the 413: {rest:?}");
}

/// POSTs the proxy's own handshake traffic excluded: what the fault upstream got from clients.
fn client_posts(up: &FaultUpstream) -> usize {
    up.received()
        .iter()
        .filter(|r| r.http_method == "POST" && r.method.as_deref() == Some("tools/call"))
        .count()
}

#[tokio::test]
async fn rel_07_oversized_content_length_is_refused_before_the_body_is_sent() {
    let up = FaultUpstream::start().await;
    let proxy = start_ready(&config(&up.url, "10s")).await;
    let host = proxy.mcp_addr.to_string();
    let mut stream = TcpStream::connect(proxy.mcp_addr).await.expect("connect");
    let declared = 4 * max_body_bytes();
    let head = post_head(&host, &format!("content-length: {declared}\r\n"));
    stream.write_all(head.as_bytes()).await.expect("send head");
    stream.write_all(&body_start()).await.expect("send 1 KiB");

    // 1 KiB of 16 MiB sent; the answer comes now.
    let response = read_response(&mut stream).await;
    assert_refused_as_too_large(&response);
    // A client that does not watch for early answers sends another MiB first.
    finish_and_expect_clean_close(&mut stream, 1024 * 1024).await;
    assert_eq!(client_posts(&up), 0, "nothing reached the upstream");
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_07_expect_continue_with_oversized_length_gets_413_instead_of_100_continue() {
    let up = FaultUpstream::start().await;
    let proxy = start_ready(&config(&up.url, "10s")).await;
    let host = proxy.mcp_addr.to_string();
    let mut stream = TcpStream::connect(proxy.mcp_addr).await.expect("connect");
    let length = max_body_bytes() + 1;
    let head = post_head(
        &host,
        &format!("content-length: {length}\r\nexpect: 100-continue\r\n"),
    );
    stream.write_all(head.as_bytes()).await.expect("send head");

    // The client waits for `100 Continue` before sending anything: it must get the 413 instead.
    let response = read_response(&mut stream).await;
    assert_refused_as_too_large(&response);
    finish_and_expect_clean_close(&mut stream, 0).await;
    assert_eq!(client_posts(&up), 0, "nothing reached the upstream");
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_07_chunked_body_over_the_limit_gets_413_and_a_clean_close() {
    let up = FaultUpstream::start().await;
    let proxy = start_ready(&config(&up.url, "10s")).await;
    let host = proxy.mcp_addr.to_string();
    let stream = TcpStream::connect(proxy.mcp_addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let head = post_head(&host, "transfer-encoding: chunked\r\n");
    // No length to refuse from: the limit is found by reading. The client streams twice the
    // limit (more than the socket buffers on both ends hold), then ends the body.
    let sender = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
        chunk.extend(std::iter::repeat_n(b'x', 64 * 1024));
        chunk.extend_from_slice(b"\r\n");
        for _ in 0..(2 * max_body_bytes()) / (64 * 1024) {
            write.write_all(&chunk).await?;
        }
        write.write_all(b"0\r\n\r\n").await?;
        write.shutdown().await
    });
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), read.read_to_end(&mut bytes))
        .await
        .expect("the proxy answers and closes")
        .expect("a clean close (FIN), not a reset");
    sender
        .await
        .expect("sender task")
        .expect("the whole body was accepted onto the wire, no reset");
    let response = parse_response(&bytes);
    assert_refused_as_too_large(&response);
    assert_eq!(client_posts(&up), 0, "nothing reached the upstream");
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_07_body_limit_from_config_refuses_over_it_and_admits_under_it() {
    let up = FaultUpstream::start().await;
    let mut config = config(&up.url, "10s");
    config.limits.max_request_bytes = 64 * 1024;
    let proxy = start_ready(&config).await;
    let host = proxy.mcp_addr.to_string();

    // 96 KiB declared against a 64 KiB limit: refused from the header.
    let mut stream = TcpStream::connect(proxy.mcp_addr).await.expect("connect");
    let head = post_head(&host, &format!("content-length: {}\r\n", 96 * 1024));
    stream.write_all(head.as_bytes()).await.expect("send head");
    let response = read_response(&mut stream).await;
    assert_refused_over(&response, 64 * 1024);
    finish_and_expect_clean_close(&mut stream, 96 * 1024).await;

    // 48 KiB, a whole request under the limit: it reaches the upstream (no session: a 400,
    // not a 413).
    let mut body = body_start();
    body.resize(48 * 1024, b'x');
    body.extend_from_slice(br#""}}}"#);
    let mut stream = TcpStream::connect(proxy.mcp_addr).await.expect("connect");
    let head = post_head(&host, &format!("content-length: {}\r\n", body.len()));
    stream.write_all(head.as_bytes()).await.expect("send head");
    stream.write_all(&body).await.expect("send body");
    let response = read_response(&mut stream).await;
    assert_eq!(response.status, 400, "{response:?}");
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    assert_eq!(
        berth_tests::proxy::sample(
            &metrics,
            r#"berth_proxy_invalid_messages_total{reason="body"}"#
        ),
        1.0,
        "only the refusal over the limit is counted"
    );
    proxy.shutdown().await;
}
