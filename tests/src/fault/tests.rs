//! The fault upstream against raw Streamable HTTP requests.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::*;
use crate::proxy::{call, open_session, post_raw};

fn init(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

/// An SSE response read message by message.
struct Events {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl Events {
    async fn open(response: reqwest::Response) -> Self {
        Self {
            stream: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next `data:` message, within 5 s.
    async fn next(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(end) = self.buffer.find('\n') {
                    let line: String = self.buffer.drain(..=end).collect();
                    if let Some(data) = line.strip_prefix("data:") {
                        return serde_json::from_str(data.trim()).expect("event is JSON");
                    }
                    continue;
                }
                let chunk = self
                    .stream
                    .next()
                    .await
                    .expect("stream open")
                    .expect("chunk");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .expect("an event within 5 s")
    }
}

/// A fault upstream with `faults`, after installing the TLS provider reqwest needs.
async fn started(faults: Faults) -> FaultUpstream {
    berth_proxy::install_crypto_provider();
    FaultUpstream::builder().faults(faults).start().await
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post_streaming(url: &str, session: &str, body: String) -> reqwest::Response {
    client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .body(body)
        .send()
        .await
        .expect("post")
}

#[tokio::test]
async fn fault_initialize_then_echo_returns_message_as_json() {
    let up = started(Faults::default()).await;
    let session = open_session(&up.url).await;
    let reply = post_raw(
        &up.url,
        Some(&session),
        &call(json!(7), "echo", json!({"message": "hi"})),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.last()["id"], json!(7));
    assert_eq!(reply.last()["result"]["content"][0]["text"], json!("hi"));
    let bad = post_raw(&up.url, Some(&session), &call(json!(8), "bad", json!({}))).await;
    assert_eq!(bad.last()["result"]["isError"], json!(true));
    let missing = post_raw(
        &up.url,
        Some(&session),
        &call(json!(9), "missing", json!({})),
    )
    .await;
    assert_eq!(missing.last()["error"]["code"], json!(-32602));
    assert_eq!(up.initializes(), 1);
    assert_eq!(up.count("tools/call"), 3);
    assert_eq!(up.count("notifications/initialized"), 1);
    let calls: Vec<_> = up
        .received()
        .into_iter()
        .filter(|r| r.id == Some(json!(7)))
        .collect();
    assert_eq!(calls[0].session.as_deref(), Some(session.as_str()));
}

#[tokio::test]
async fn fault_expired_session_gets_404_with_empty_body() {
    let faults = Faults {
        expire_after_calls: Some(1),
        ..Faults::default()
    };
    let up = started(faults).await;
    let session = open_session(&up.url).await;
    let first = post_raw(
        &up.url,
        Some(&session),
        &call(json!(1), "echo", json!({"message": "a"})),
    )
    .await;
    assert_eq!(
        first.status, 200,
        "the call that spends the budget is answered"
    );
    let second = post_raw(
        &up.url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "b"})),
    )
    .await;
    assert_eq!(second.status, 404);
    assert!(second.messages.is_empty(), "{second:?}");
    // expire_all and the not-found window work the same way.
    up.update(|f| f.expire_after_calls = None);
    let other = open_session(&up.url).await;
    assert_eq!(up.expire_all(), 1);
    let reply = post_raw(&up.url, Some(&other), &call(json!(3), "echo", json!({}))).await;
    assert_eq!(reply.status, 404);
    up.not_found_for(Duration::from_secs(30));
    assert_eq!(post_raw(&up.url, None, &init(1)).await.status, 404);
}

#[tokio::test]
async fn fault_second_session_initialize_is_rejected_like_the_node_sdk() {
    let faults = Faults {
        second_session: SecondSession::RejectInitialize,
        ..Faults::default()
    };
    let up = started(faults).await;
    open_session(&up.url).await;
    let second = post_raw(&up.url, None, &init(1)).await;
    assert_eq!(second.status, 400);
    assert_eq!(
        second.last(),
        &serde_json::from_str::<Value>(ALREADY_INITIALIZED_BODY).expect("json")
    );
    assert_eq!(up.initializes(), 2);
    assert_eq!(up.sessions_issued(), 1);
    // The variant: the second session's notifications/initialized fails.
    up.update(|f| f.second_session = SecondSession::RejectInitialized);
    let reply = post_raw(&up.url, None, &init(2)).await;
    assert_eq!(reply.status, 200);
    let session = reply.session.expect("second session id");
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post_raw(&up.url, Some(&session), &inited).await.status, 400);
}

#[tokio::test]
async fn fault_handshake_faults_503_500_and_delay() {
    let up = started(Faults::default()).await;
    up.unavailable_initialize_for(Duration::from_secs(30));
    assert_eq!(post_raw(&up.url, None, &init(1)).await.status, 503);
    up.update(|f| {
        f.unavailable_initialize_until = None;
        f.handshake_delay = Duration::from_millis(300);
    });
    up.fail_initialized_once();
    let started = std::time::Instant::now();
    let reply = post_raw(&up.url, None, &init(2)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    let session = reply.session.expect("session id");
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post_raw(&up.url, Some(&session), &inited).await.status, 500);
    assert_eq!(post_raw(&up.url, Some(&session), &inited).await.status, 202);
}

#[tokio::test]
async fn fault_slow_with_progress_token_streams_three_progress_then_result() {
    let up = started(Faults::default()).await;
    let session = open_session(&up.url).await;
    let body = json!({"jsonrpc": "2.0", "id": "s1", "method": "tools/call", "params": {
        "name": "slow", "arguments": {"ms": 90}, "_meta": {"progressToken": "tok"}}});
    let reply = post_raw(&up.url, Some(&session), &body.to_string()).await;
    let progress: Vec<_> = reply.messages[..3]
        .iter()
        .map(|m| m["params"]["progress"].clone())
        .collect();
    assert_eq!(progress, vec![json!(1), json!(2), json!(3)]);
    assert_eq!(reply.messages[0]["params"]["progressToken"], json!("tok"));
    assert_eq!(reply.last()["id"], json!("s1"));
    // Cancelling a slow JSON call ends it early and is counted.
    let handle = up.handle();
    let url = up.url.clone();
    let session_for_call = session.clone();
    let slow = tokio::spawn(async move {
        post_raw(
            &url,
            Some(&session_for_call),
            &call(json!(5), "slow", json!({"ms": 20_000})),
        )
        .await
    });
    crate::wait_for("slow call in flight", Duration::from_secs(5), || {
        let handle = handle.clone();
        async move { (handle.count("tools/call") == 2).then_some(()) }
    })
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "test"}});
    assert_eq!(
        post_raw(&up.url, Some(&session), &cancel.to_string())
            .await
            .status,
        202
    );
    let reply = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("cancelled call ends")
        .expect("task");
    assert_eq!(reply.last()["error"]["code"], json!(-32800));
    assert_eq!(up.cancellations(), vec![json!(5)]);
}

#[tokio::test]
async fn fault_ask_sends_three_requests_and_returns_the_answers() {
    let up = started(Faults::default()).await;
    let session = open_session(&up.url).await;
    let response = post_streaming(&up.url, &session, call(json!(5), "ask", json!({}))).await;
    assert_eq!(response.status(), 200);
    let mut events = Events::open(response).await;
    for (expected_id, method) in [
        ("up-1", "sampling/createMessage"),
        ("up-2", "elicitation/create"),
        ("up-3", "roots/list"),
    ] {
        let request = events.next().await;
        assert_eq!(request["id"], json!(expected_id));
        assert_eq!(request["method"], json!(method));
        let answer = json!({"jsonrpc": "2.0", "id": expected_id, "result": {"from": method}});
        let reply = post_raw(&up.url, Some(&session), &answer.to_string()).await;
        assert_eq!(reply.status, 202);
    }
    let result = events.next().await;
    assert_eq!(result["id"], json!(5));
    let answers = &result["result"]["structuredContent"];
    assert_eq!(answers["roots"]["result"]["from"], json!("roots/list"));
    assert_eq!(answers["sampling"]["id"], json!("up-1"));
}

#[tokio::test]
async fn fault_tool_change_reaches_standalone_stream_and_tools_list() {
    let up = started(Faults::default()).await;
    let session = open_session(&up.url).await;
    let stream = client()
        .get(&up.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("get");
    assert_eq!(stream.status(), 200);
    let mut events = Events::open(stream).await;
    crate::wait_for("stream registered", Duration::from_secs(5), || async {
        (up.open_streams() == 1).then_some(())
    })
    .await;
    up.add_tool(json!({"name": "b", "inputSchema": {"type": "object"}}));
    let changed = events.next().await;
    assert_eq!(changed["method"], json!("notifications/tools/list_changed"));
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let reply = post_raw(&up.url, Some(&session), &list).await;
    let names: Vec<_> = reply.last()["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert!(names.contains(&json!("b")), "{names:?}");
    assert!(up.set_input_schema("echo", json!({"type": "object", "properties": {}})));
    assert_eq!(
        events.next().await["method"],
        json!("notifications/tools/list_changed")
    );
    up.log("info", json!("hello"));
    assert_eq!(
        events.next().await["method"],
        json!("notifications/message")
    );
    let subscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
        "params": {"uri": "fault://counter"}});
    post_raw(&up.url, Some(&session), &subscribe.to_string()).await;
    assert_eq!(up.notify_resource_updated("fault://counter"), 1);
    assert_eq!(up.notify_resource_updated("fault://other"), 0);
    assert_eq!(
        events.next().await["params"]["uri"],
        json!("fault://counter")
    );
}

#[tokio::test]
async fn fault_silent_accepts_and_never_answers() {
    berth_proxy::install_crypto_provider();
    let silent = FaultUpstream::silent().await;
    let request = client().post(&silent.url).body(init(1)).send();
    let outcome = tokio::time::timeout(Duration::from_millis(500), request).await;
    assert!(outcome.is_err(), "no answer within 500 ms");
    assert_eq!(silent.accepted(), 1);
    let refused = client().post(FaultUpstream::closed_port_url()).send().await;
    assert!(refused.is_err_and(|e| e.is_connect()));
}

#[tokio::test]
async fn fault_strict_refuses_requests_after_initialize_without_the_negotiated_version() {
    let up = started(Faults {
        strict_protocol_version: true,
        ..Faults::default()
    })
    .await;
    let reply = post_raw(&up.url, None, &init(1)).await;
    assert_eq!(reply.status, 200, "initialize needs no version header");
    let session = reply.session.expect("session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let missing = post_raw(&up.url, Some(&session), &initialized).await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.last(),
        &serde_json::from_str::<Value>(PROTOCOL_VERSION_REQUIRED_BODY).expect("body")
    );
    let negotiated = [("mcp-protocol-version", "2025-06-18")];
    let other = [("mcp-protocol-version", "2025-03-26")];
    let accepted = crate::proxy::post_with(&up.url, Some(&session), &negotiated, &initialized);
    assert_eq!(accepted.await.status, 202);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let wrong = crate::proxy::post_with(&up.url, Some(&session), &other, &ping);
    assert_eq!(wrong.await.status, 400, "not the negotiated revision");
    let delete = |version: Option<&'static str>| {
        let mut request = client().delete(&up.url).header("mcp-session-id", &session);
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        request.send()
    };
    assert_eq!(delete(None).await.expect("delete").status().as_u16(), 400);
    assert_eq!(
        up.live_sessions(),
        vec![session.clone()],
        "a refused DELETE keeps the session"
    );
    let ended = delete(Some("2025-06-18")).await.expect("delete");
    assert_eq!(ended.status().as_u16(), 200);
    assert!(up.live_sessions().is_empty());
    let deletes: Vec<_> = up
        .delete_requests()
        .into_iter()
        .map(|d| (d.protocol_version, d.status))
        .collect();
    assert_eq!(
        deletes,
        vec![(None, 400), (Some("2025-06-18".to_owned()), 200)]
    );
}

#[tokio::test]
async fn fault_restartable_kill_closes_connections_and_restart_forgets_sessions() {
    berth_proxy::install_crypto_provider();
    let mut up = RestartableUpstream::start(FaultUpstream::builder()).await;
    let first = open_session(&up.url).await;
    assert!(
        first.starts_with(&format!("fault-{}-i0-", up.addr.port())),
        "{first}"
    );
    // A standalone stream held open on a kept-alive connection ends when the upstream dies.
    let get = client()
        .get(&up.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &first)
        .send()
        .await
        .expect("get");
    assert_eq!(get.status(), 200);
    up.kill();
    let body = tokio::time::timeout(Duration::from_secs(5), get.bytes()).await;
    assert!(body.is_ok(), "the stream ends when the upstream is killed");
    let refused = client().post(&up.url).body(init(1)).send().await;
    assert!(refused.is_err_and(|e| e.is_connect()), "down: refused");

    up.silence().await;
    assert!(up.handle().is_none());
    let request = client().post(&up.url).body(init(2)).send();
    let outcome = tokio::time::timeout(Duration::from_millis(500), request).await;
    assert!(outcome.is_err(), "silent: accepted, never answered");

    up.restart().await;
    let stale = post_raw(&up.url, Some(&first), &call(json!(3), "echo", json!({}))).await;
    assert_eq!(stale.status, 404, "a restarted upstream has no sessions");
    let second = open_session(&up.url).await;
    assert_ne!(second, first);
    let reply = post_raw(
        &up.url,
        Some(&second),
        &call(json!(4), "echo", json!({"message": "back"})),
    )
    .await;
    assert_eq!(reply.last()["result"]["content"][0]["text"], json!("back"));
    assert_eq!(up.handle().expect("serving").sessions_issued(), 1);
    assert_eq!(up.incarnations(), 3);
}
