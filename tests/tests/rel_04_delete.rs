//! Issue 12, item 4: the proxy ends its upstream sessions, also on a strict upstream.
//!
//! Every request after the handshake carries the negotiated `MCP-Protocol-Version` (MCP
//! 2025-06-18, "Transports: Streamable HTTP / Protocol Version Header"), the closing `DELETE`
//! included; a strict upstream answers 400 to one without it and keeps the session. A `DELETE`
//! the upstream refuses is logged with its status. Its own test binary, because it installs a
//! global tracing subscriber that captures the proxy's log lines.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use berth_crds::SessionStrategy;
use berth_tests::fault::{Delete, FaultUpstream, Faults};
use berth_tests::proxy::{call, config, mcp_url, open_session_with, post_raw, start_ready};
use berth_tests::wait_for;
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

fn capture_logs() -> Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    })
    .clone()
}

async fn strict_upstream(sessionless: bool) -> FaultUpstream {
    FaultUpstream::builder()
        .faults(Faults {
            strict_protocol_version: true,
            sessionless,
            ..Faults::default()
        })
        .start()
        .await
}

fn header<'a>(request: &'a berth_tests::fault::Received, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Every request the upstream received after a handshake (all but the `initialize` POSTs)
/// carried `MCP-Protocol-Version: version`; returns how many there were.
fn assert_every_request_after_the_handshake_carries(
    upstream: &FaultUpstream,
    version: &str,
) -> usize {
    let after: Vec<_> = upstream
        .received()
        .into_iter()
        // The era probe (`server/discover`, in the modern form) comes before the handshake.
        .filter(|r| !matches!(r.method.as_deref(), Some("initialize" | "server/discover")))
        .collect();
    for request in &after {
        assert_eq!(
            header(request, "mcp-protocol-version"),
            Some(version),
            "{} {:?} {:?}",
            request.http_method,
            request.method,
            request.headers
        );
    }
    after.len()
}

async fn echo(url: &str, session: &str) {
    let reply = post_raw(
        url,
        Some(session),
        &call(json!(2), "echo", json!({"message": "hi"})),
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("hi"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn rel_04_shutdown_deletes_the_upstream_session_of_a_strict_upstream() {
    let upstream = strict_upstream(false).await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let (session, result) = open_session_with(&url, "2025-11-25", json!({})).await;
    let version = result["protocolVersion"]
        .as_str()
        .expect("a version")
        .to_owned();
    echo(&url, &session).await;
    wait_for(
        "the standalone GET upstream",
        Duration::from_secs(5),
        || async { (upstream.open_streams() > 0).then_some(()) },
    )
    .await;
    let upstream_session = upstream
        .live_sessions()
        .pop()
        .expect("one upstream session");
    proxy.shutdown().await;
    assert_eq!(
        upstream.delete_requests(),
        vec![Delete {
            session: Some(upstream_session),
            protocol_version: Some(version.clone()),
            status: 200,
        }]
    );
    assert_eq!(
        upstream.live_sessions(),
        Vec::<String>::new(),
        "the session ended"
    );
    let methods: Vec<_> = upstream
        .received()
        .iter()
        .map(|r| r.http_method.clone())
        .collect();
    for method in ["POST", "GET", "DELETE"] {
        assert!(methods.iter().any(|m| m == method), "{methods:?}");
    }
    assert_every_request_after_the_handshake_carries(&upstream, &version);
}

#[tokio::test]
async fn rel_04_per_client_session_end_deletes_its_upstream_session_on_a_strict_upstream() {
    let upstream = strict_upstream(false).await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.strategy = SessionStrategy::PerClient;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let before = upstream.live_sessions();
    // An older revision than the proxy's own: the client's upstream session speaks this one.
    let (session, result) = open_session_with(&url, "2025-06-18", json!({})).await;
    assert_eq!(result["protocolVersion"], json!("2025-06-18"));
    echo(&url, &session).await;
    let own: Vec<String> = upstream
        .live_sessions()
        .into_iter()
        .filter(|s| !before.contains(s))
        .collect();
    assert_eq!(own.len(), 1, "the client's own upstream session");
    let deleted = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status().as_u16(), 204);
    let deletes = wait_for("the upstream DELETE", Duration::from_secs(5), || async {
        let deletes = upstream.delete_requests();
        (!deletes.is_empty()).then_some(deletes)
    })
    .await;
    assert_eq!(
        deletes,
        vec![Delete {
            session: Some(own[0].clone()),
            protocol_version: Some("2025-06-18".into()),
            status: 200,
        }]
    );
    assert!(
        !upstream.live_sessions().contains(&own[0]),
        "the session ended"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_04_shutdown_deletes_every_per_client_upstream_session_of_a_strict_upstream() {
    let upstream = strict_upstream(false).await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.strategy = SessionStrategy::PerClient;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    for version in ["2025-06-18", "2025-03-26"] {
        let (session, _) = open_session_with(&url, version, json!({})).await;
        echo(&url, &session).await;
    }
    let live = upstream.live_sessions();
    assert_eq!(
        live.len(),
        3,
        "the supervisor's and one per client: {live:?}"
    );
    proxy.shutdown().await;
    let mut deleted: Vec<_> = upstream
        .delete_requests()
        .into_iter()
        .map(|d| {
            assert_eq!(d.status, 200, "{d:?}");
            d.session.expect("a session id")
        })
        .collect();
    deleted.sort();
    let mut live = live;
    live.sort();
    assert_eq!(
        deleted, live,
        "every upstream session ended by the time shutdown returned"
    );
    assert_eq!(upstream.live_sessions(), Vec::<String>::new());
}

#[tokio::test]
async fn rel_04_sessionless_strict_upstream_gets_the_version_on_every_request_after_initialize() {
    let upstream = strict_upstream(true).await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let (session, result) = open_session_with(&url, "2025-11-25", json!({})).await;
    echo(&url, &session).await;
    proxy.shutdown().await;
    let version = result["protocolVersion"].as_str().expect("a version");
    let after = assert_every_request_after_the_handshake_carries(&upstream, version);
    assert!(after >= 3, "initialized, tools/list and the call: {after}");
    assert!(
        upstream.received().iter().all(|r| r.session.is_none()),
        "no session id anywhere"
    );
    assert_eq!(
        upstream.delete_requests(),
        Vec::<Delete>::new(),
        "no session to end"
    );
}

#[tokio::test]
async fn rel_04_refused_delete_is_logged_with_its_status() {
    let logs = capture_logs();
    let upstream = FaultUpstream::builder()
        .faults(Faults {
            delete_status: Some(503),
            ..Faults::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    proxy.shutdown().await;
    let deletes = upstream.delete_requests();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].status, 503);
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("failed to delete upstream session"))
        .unwrap_or_else(|| panic!("no log line for the refused DELETE:\n{text}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("status=503"), "{line}");
}
