//! Issue 13 (found by the conformance suite's `server-sse-polling`): an upstream that closes a
//! call's SSE stream after a priming event and answers on the `GET` that resumes it with
//! `Last-Event-ID` (MCP 2025-11-25, "Resumability and Redelivery"). Through the proxy that call
//! failed with -32012 ("stream ended before the response") while the suite's check passed; the
//! proxy now resumes the upstream stream itself.

use berth_tests::fault::{FaultUpstream, Faults};
use berth_tests::proxy::{
    call, config, mcp_url, open_session, post_raw, sample, scrape, start_ready,
};
use serde_json::json;

/// The `Last-Event-ID` of every GET the upstream received, in order: the proxy's resumptions.
fn last_event_ids(upstream: &FaultUpstream) -> Vec<String> {
    upstream
        .received()
        .into_iter()
        .filter(|r| r.http_method == "GET")
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(name, _)| name == "last-event-id")
                .map(|(_, value)| value.clone())
        })
        .collect()
}

#[tokio::test]
async fn upstream_sse_polling_call_is_resumed_by_the_proxy_and_answered() {
    let upstream = FaultUpstream::builder()
        .faults(Faults {
            sse_polling: true,
            ..Faults::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    for n in 0..3 {
        let reply = post_raw(
            &url,
            Some(&session),
            &call(json!(n), "echo", json!({"message": format!("polled {n}")})),
        )
        .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.last()["id"], json!(n), "{reply:?}");
        assert_eq!(
            reply.last()["result"]["content"][0]["text"],
            json!(format!("polled {n}")),
            "{reply:?}"
        );
    }
    let resumed = last_event_ids(&upstream);
    assert_eq!(resumed.len(), 3, "one resumption per call: {resumed:?}");
    assert!(
        resumed.iter().all(|id| id.starts_with("prime-")),
        "{resumed:?}"
    );
    proxy.shutdown().await;
}

/// The SSE events of a 2025-11-25 session's POST, read one by one.
type Events = futures::stream::BoxStream<'static, sse_stream::Sse>;

/// POSTs `body` on `session` (negotiated at `version`) and returns its SSE events.
async fn post_events(url: &str, session: &str, version: &str, body: &str) -> Events {
    use futures::StreamExt;
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", version)
        .body(body.to_owned())
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 200);
    sse_stream::SseByteStream::new(response.bytes_stream())
        .filter_map(|event| async move { event.ok() })
        .boxed()
}

/// GETs with `Last-Event-ID` and returns the events of the resumed stream.
async fn resume(url: &str, session: &str, last_event_id: &str) -> Events {
    use futures::StreamExt;
    let response = reqwest::Client::new()
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", last_event_id)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status().as_u16(), 200);
    sse_stream::SseByteStream::new(response.bytes_stream())
        .filter_map(|event| async move { event.ok() })
        .boxed()
}

async fn next(events: &mut Events) -> sse_stream::Sse {
    use futures::StreamExt;
    tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream goes on")
}

fn data(event: &sse_stream::Sse) -> serde_json::Value {
    serde_json::from_str(event.data.as_deref().unwrap_or_default()).expect("JSON data")
}

/// Issue 13 (MCP 2025-11-25, "Resumability and Redelivery"): a client whose connection drops
/// mid-call resumes with `GET` and `Last-Event-ID` and gets the rest of the call on the stream
/// it lost: the progress it missed and the result under its own id. The disconnection does not
/// cancel the call (the spec: only `notifications/cancelled` does), so the upstream finishes it.
#[tokio::test]
async fn client_that_drops_mid_call_resumes_from_last_event_id_and_gets_its_result() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let (session, _) = berth_tests::proxy::open_session_with(&url, "2025-11-25", json!({})).await;
    let slow = json!({"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{
        "name":"slow","arguments":{"ms":600},"_meta":{"progressToken":"tok"}}});
    let mut events = post_events(&url, &session, "2025-11-25", &slow.to_string()).await;
    let priming = next(&mut events).await;
    assert_eq!(
        priming.data.as_deref(),
        Some(""),
        "priming event: {priming:?}"
    );
    let priming_id = priming.id.clone().expect("the priming event has an id");
    let first = next(&mut events).await;
    assert_eq!(
        data(&first)["method"],
        json!("notifications/progress"),
        "{first:?}"
    );
    let first_id = first.id.clone().expect("every message has an id");
    assert_ne!(first_id, priming_id);
    drop(events);

    let mut resumed = resume(&url, &session, &first_id).await;
    let mut rest = Vec::new();
    loop {
        let event = next(&mut resumed).await;
        assert!(
            event.id.is_some(),
            "replayed events keep their ids: {event:?}"
        );
        let message = data(&event);
        let done = message.get("id").is_some();
        rest.push(message);
        if done {
            break;
        }
    }
    let result = rest.last().expect("the final response");
    assert_eq!(result["id"], json!("r-1"), "{rest:?}");
    assert_eq!(
        result["result"]["content"][0]["text"],
        json!("slept 600 ms")
    );
    assert!(
        rest[..rest.len() - 1]
            .iter()
            .all(|m| m["method"] == json!("notifications/progress")
                && m["params"]["progressToken"] == json!("tok")),
        "only the call's own progress precedes its result: {rest:?}"
    );
    assert!(
        rest.iter().all(|m| m != &data(&first)),
        "nothing up to the Last-Event-ID is replayed: {rest:?}"
    );

    // The same id again replays the same events: a second drop is recoverable too.
    let mut again = resume(&url, &session, &priming_id).await;
    assert_eq!(data(&next(&mut again).await), data(&first));

    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_tool_calls_total{outcome="ok",tool="slow"}"#
        ),
        1.0,
        "the dropped connection did not cancel the call: {metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_stream_resumptions_total{result="replayed"}"#
        ),
        2.0,
        "{metrics}"
    );
    assert!(
        upstream
            .received()
            .iter()
            .all(|r| r.method.as_deref() != Some("notifications/cancelled")),
        "the upstream was not told to cancel"
    );
    proxy.shutdown().await;
}

/// An id the session's log did not mint (another replica's, or made up) is not replayed: the
/// client gets the standalone stream, which carries server messages, counted `unknown`. A
/// 2025-06-18 session gets event ids but no priming event (its clients may not parse an event
/// without data).
#[tokio::test]
async fn unknown_last_event_id_gets_the_standalone_stream_and_older_sessions_no_priming() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let slow = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "name":"slow","arguments":{"ms":100},"_meta":{"progressToken":"p"}}});
    let mut events = post_events(&url, &session, "2025-06-18", &slow.to_string()).await;
    let first = next(&mut events).await;
    assert_eq!(
        data(&first)["method"],
        json!("notifications/progress"),
        "no priming event first: {first:?}"
    );
    assert!(first.id.is_some(), "{first:?}");

    let _standalone = resume(&url, &session, "0badc0de.1.1").await;
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_stream_resumptions_total{result="unknown"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_standalone_streams_total{result="opened"}"#
        ),
        1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

/// Issue 14: each session's replay log has its own bounds (4 MiB), but those add up with the
/// sessions: 64 sessions relaying 64 KiB results kept 231 MiB. All sessions together now keep
/// at most `session.replayBufferMiB` once their streams have finished, the stream that finished
/// first (in any session) forgotten first; the newest stream still resumes.
#[tokio::test]
async fn replay_kept_by_all_sessions_stays_within_the_budget() {
    const BUDGET: usize = 1 << 20;
    let upstream = FaultUpstream::builder()
        .faults(Faults {
            sse_replies: true,
            ..Faults::default()
        })
        .start()
        .await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.replay_buffer_mib = 1;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let text = "x".repeat(64 * 1024);
    let mut streams = Vec::new();
    for _ in 0..8 {
        let (session, _) =
            berth_tests::proxy::open_session_with(&url, "2025-11-25", json!({})).await;
        for n in 0..3 {
            let body = call(json!(n), "echo", json!({ "message": text }));
            let mut events = post_events(&url, &session, "2025-11-25", &body).await;
            let priming = next(&mut events).await.id.expect("a priming id");
            let result = data(&next(&mut events).await);
            assert_eq!(result["result"]["content"][0]["text"], json!(text));
            streams.push((session.clone(), priming));
        }
    }
    // 24 finished streams of more than 64 KiB each: over 1.5 MiB without the budget, 1 MiB.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let metrics = scrape(&proxy).await;
    let kept = sample(&metrics, "berth_proxy_replay_bytes");
    assert!(
        kept > 0.0 && kept <= BUDGET as f64,
        "kept {kept} bytes, budget {BUDGET}"
    );

    let (oldest_session, oldest) = &streams[0];
    let _standalone = resume(&url, oldest_session, oldest).await;
    let (newest_session, newest) = streams.last().expect("streams");
    let mut replayed = resume(&url, newest_session, newest).await;
    assert_eq!(
        data(&next(&mut replayed).await)["result"]["content"][0]["text"],
        json!(text),
        "the newest finished stream is kept"
    );
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_stream_resumptions_total{result="unknown"}"#
        ),
        1.0,
        "the oldest stream, of another session, was forgotten: {metrics}"
    );
    proxy.shutdown().await;
}

/// Issue 39, item 11: a resumed stream that closes again without an event is resumed again
/// (with the same `Last-Event-ID`), within the call's budget, and the call gets its answer.
#[tokio::test]
async fn upstream_stream_resumed_that_closes_without_an_event_is_resumed_again() {
    let upstream = FaultUpstream::builder()
        .faults(Faults {
            sse_polling: true,
            empty_resumptions: 2,
            ..Faults::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(
            json!(7),
            "echo",
            json!({"message": "after two empty polls"}),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.last()["id"], json!(7), "{reply:?}");
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("after two empty polls"),
        "{reply:?}"
    );
    let resumed = last_event_ids(&upstream);
    // Two empty resumptions, then the one that answers, all after the same priming event.
    assert_eq!(resumed.len(), 3, "{resumed:?}");
    assert!(
        resumed
            .iter()
            .all(|id| id.starts_with("prime-") && *id == resumed[0]),
        "{resumed:?}"
    );
    proxy.shutdown().await;
}
