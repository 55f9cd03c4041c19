//! The session engine against the scriptable fault upstream: one upstream session that survives,
//! recovers atomically, holds every budget, and routes server messages to the right client.
//! Test names carry the field case (CASES.md) or the DESIGN.md failure they pin down.

use std::time::{Duration, Instant};

use berth_crds::{DurationString, ToolsProbePolicy};
use berth_tests::fault::{FaultUpstream, SecondSession};
use berth_tests::proxy::{
    call, config, mcp_url, open_get_stream, open_session, open_session_with, post_raw, post_stream,
    post_with, sample, scrape, start_ready,
};
use serde_json::{Value, json};

fn text(reply: &Value) -> Value {
    reply["result"]["content"][0]["text"].clone()
}

async fn next_within(
    rx: &mut tokio::sync::mpsc::Receiver<Value>,
    within: Duration,
) -> Option<Value> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

#[tokio::test]
async fn design_1_second_session_rejected_every_probe_reuses_the_one_session() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.second_session = SecondSession::RejectInitialized);
    let mut cfg = config(&upstream.url, "10s");
    cfg.tools_probe.policy = ToolsProbePolicy::PerCall;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    for n in 0..5 {
        let reply = post_raw(
            &url,
            Some(&session),
            &call(json!(n), "echo", json!({"message": n.to_string()})),
        )
        .await;
        assert_eq!(text(reply.last()), json!(n.to_string()), "{reply:?}");
    }
    assert_eq!(
        upstream.initializes(),
        1,
        "one upstream session for start-up, probes and calls"
    );
    assert!(
        upstream.count("tools/list") >= 6,
        "PerCall probed before each call"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_03_upstream_expiry_replays_once() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.expire_after_calls = Some(1));
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let first = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "n1"})),
    )
    .await;
    assert_eq!(text(first.last()), json!("n1"));
    upstream.update(|f| f.expire_after_calls = None);
    let second = post_raw(
        &url,
        Some(&session),
        &call(json!(3), "echo", json!({"message": "n2"})),
    )
    .await;
    assert_eq!(second.status, 200);
    assert_eq!(second.last()["id"], json!(3));
    assert_eq!(
        text(second.last()),
        json!("n2"),
        "replayed call answered: {second:?}"
    );
    assert_eq!(upstream.initializes(), 2, "exactly one re-initialization");
    let echo_calls = upstream
        .received()
        .iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .count();
    assert_eq!(echo_calls, 3, "n1, n2 refused with 404, n2 replayed once");
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_replays_total"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_upstream_session_losses_total{reason="not_found"}"#
        ),
        1.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_03_expiry_with_upstream_answering_404_to_all_gives_one_error_no_loop() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.timeouts.connect = DurationString::new("5s");
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let initializes_before = upstream.initializes();
    upstream.not_found_for(Duration::from_secs(30));
    let started = Instant::now();
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(3), "echo", json!({"message": "x"})),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(reply.messages.len(), 1, "exactly one answer: {reply:?}");
    assert_eq!(reply.last()["id"], json!(3));
    assert!(reply.last().get("error").is_some(), "{reply:?}");
    assert!(
        elapsed < Duration::from_secs(10),
        "answered within the request timeout: {elapsed:?}"
    );
    assert!(
        upstream.initializes() - initializes_before <= 2,
        "at most 2 upstream initializes per expiry while the caller waited"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_04_failed_recovery_ends_the_downstream_session_then_new_session_works() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.timeouts.connect = DurationString::new("2s");
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let ok = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "a"})),
    )
    .await;
    assert_eq!(text(ok.last()), json!("a"));
    upstream.unavailable_initialize_for(Duration::from_secs(4));
    upstream.expire_all();
    let failed = post_raw(
        &url,
        Some(&session),
        &call(json!(3), "echo", json!({"message": "b"})),
    )
    .await;
    assert_eq!(failed.last()["id"], json!(3));
    assert_eq!(
        failed.last()["error"]["data"]["retryable"],
        json!(true),
        "{failed:?}"
    );
    let after = post_raw(
        &url,
        Some(&session),
        &call(json!(4), "echo", json!({"message": "c"})),
    )
    .await;
    assert_eq!(
        after.status, 404,
        "the half-alive session is gone: {after:?}"
    );
    // Once the upstream recovers, a new session works.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
        let reply = post_raw(&url, None, &init.to_string()).await;
        if reply.status == 200 {
            let fresh = reply.session.expect("session");
            let call4 = post_raw(
                &url,
                Some(&fresh),
                &call(json!(4), "echo", json!({"message": "d"})),
            )
            .await;
            assert_eq!(text(call4.last()), json!("d"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upstream never recovered: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn design_3_failed_initialized_is_retried_and_never_half_published() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.fail_initialized_once();
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    assert_eq!(
        upstream.initializes(),
        2,
        "the interrupted handshake was redone"
    );
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(1), "echo", json!({"message": "ok"})),
    )
    .await;
    assert_eq!(text(reply.last()), json!("ok"));
    let live = upstream.live_sessions();
    let used: Vec<_> = upstream
        .received()
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .filter_map(|r| r.session)
        .collect();
    assert!(
        used.iter().all(|s| live.contains(s)),
        "calls use only the completed session"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_18_black_holed_upstream_fails_within_budget() {
    let silent = FaultUpstream::silent().await;
    let mut cfg = config(&format!("http://{}/mcp", silent.addr), "10s");
    cfg.timeouts.connect = DurationString::new("2s");
    berth_proxy::install_crypto_provider();
    let proxy = berth_proxy::start(&cfg).await.expect("proxy starts");
    let url = mcp_url(&proxy);
    for _ in 0..5 {
        let started = Instant::now();
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
        let reply = post_raw(&url, None, &init.to_string()).await;
        let elapsed = started.elapsed();
        assert_eq!(reply.status, 504, "connect budget ran out: {reply:?}");
        assert_eq!(reply.last()["id"], json!(1));
        assert!(
            elapsed < Duration::from_secs(3),
            "failed in budget: {elapsed:?}"
        );
    }
    let ready = reqwest::get(format!("http://{}/readyz", proxy.admin_addr))
        .await
        .expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    let metrics = scrape(&proxy).await;
    assert!(
        sample(
            &metrics,
            r#"berth_proxy_upstream_initializations_total{result="timeout"}"#
        ) >= 1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_14_slow_tool_times_out_cancels_upstream_and_session_survives() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "1s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let started = Instant::now();
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(3), "slow", json!({"ms": 5000})),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(reply.last()["id"], json!(3));
    assert_eq!(
        reply.last()["error"]["code"],
        json!(berth_proxy::wire::jsonrpc::REQUEST_TIMEOUT)
    );
    let upstream_id = upstream
        .received()
        .into_iter()
        .find(|r| r.method.as_deref() == Some("tools/call"))
        .and_then(|r| r.id)
        .expect("call reached upstream");
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.cancellations().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = upstream.cancellations();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(
        cancelled[0], upstream_id,
        "upstream-side id, not the client's"
    );
    assert_ne!(upstream_id, json!(3));
    let ping = post_raw(
        &url,
        Some(&session),
        &json!({"jsonrpc":"2.0","id":4,"method":"ping"}).to_string(),
    )
    .await;
    assert_eq!(ping.last()["id"], json!(4));
    assert!(
        ping.last().get("result").is_some(),
        "session survives: {ping:?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_14_long_call_within_budget_has_no_hidden_shorter_timeout() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "20s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "slow", json!({"ms": 6000})),
    )
    .await;
    assert_eq!(text(reply.last()), json!("slept 6000 ms"), "{reply:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_20_unknown_newer_version_is_negotiated_down_not_rejected() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    for requested in ["2025-11-25", "2099-01-01", "2024-11-05"] {
        let (_, result) = open_session_with(&url, requested, json!({})).await;
        let version = result["protocolVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            berth_proxy::transport::upstream::session::HANDSHAKE_VERSIONS
                .contains(&version.as_str()),
            "{requested} -> {version}"
        );
        assert_ne!(version, "2099-01-01");
    }
    proxy.shutdown().await;
}

/// `Shared`: a client that asks for an older revision the proxy serves is answered with that
/// revision, not the upstream session's (a client that speaks only 2025-06-18 gave up when told
/// 2025-11-25; issue 13), and its calls under that revision's `MCP-Protocol-Version` work while
/// the proxy's hop keeps the upstream session's own (a strict upstream refuses any other).
#[tokio::test]
async fn shared_client_gets_the_revision_it_asked_for_and_the_upstream_hop_keeps_its_own() {
    let upstream = FaultUpstream::builder()
        .faults(berth_tests::fault::Faults {
            strict_protocol_version: true,
            ..Default::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    for requested in ["2025-06-18", "2025-03-26"] {
        let (session, result) = open_session_with(&url, requested, json!({})).await;
        assert_eq!(result["protocolVersion"], json!(requested), "{result}");
        let echo = call(json!(5), "echo", json!({"message": requested}));
        let headers = [("mcp-protocol-version", requested)];
        let reply = post_with(&url, Some(&session), &headers, &echo).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(text(reply.last()), json!(requested), "{reply:?}");
    }
    let upstream_versions: std::collections::BTreeSet<_> = upstream
        .received()
        .iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(name, _)| name == "mcp-protocol-version")
                .map(|(_, value)| value.clone())
        })
        .collect();
    assert_eq!(
        upstream_versions.into_iter().collect::<Vec<_>>(),
        ["2025-11-25"],
        "the upstream hop keeps the upstream session's revision"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_26_list_changed_reaches_the_get_stream_and_refreshes_the_list() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let (session, result) = open_session_with(&url, "2025-06-18", json!({})).await;
    assert_eq!(result["capabilities"]["tools"]["listChanged"], json!(true));
    let mut stream = open_get_stream(&url, &session).await;
    let probes_before = upstream.count("tools/list");
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.open_streams() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        upstream.open_streams() >= 1,
        "proxy listens on the upstream stream"
    );
    upstream.add_tool(json!({"name": "b", "inputSchema": {"type": "object"}}));
    let note = next_within(&mut stream, Duration::from_secs(1))
        .await
        .expect("list_changed within 1 s");
    assert_eq!(note["method"], json!("notifications/tools/list_changed"));
    let list = post_raw(
        &url,
        Some(&session),
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}).to_string(),
    )
    .await;
    let names: Vec<_> = list.last()["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert!(names.contains(&"b".to_owned()), "{names:?}");
    assert!(
        upstream.count("tools/list") > probes_before + 1,
        "the proxy re-listed on list_changed"
    );
    let extra = next_within(&mut stream, Duration::from_millis(300)).await;
    assert!(extra.is_none(), "exactly one: {extra:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_27_server_requests_go_to_the_calling_client_and_answers_return() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "20s")).await;
    let url = mcp_url(&proxy);
    let capabilities = json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}});
    let (session, _) = open_session_with(&url, "2025-06-18", capabilities).await;
    let (_, mut replies) = post_stream(&url, &session, &call(json!(5), "ask", json!({}))).await;
    let mut seen_ids = Vec::new();
    let final_reply = loop {
        let message = next_within(&mut replies, Duration::from_secs(10))
            .await
            .expect("message");
        if message.get("method").is_none() {
            break message;
        }
        if message.get("id").is_none() {
            continue; // a notification on the call's stream
        }
        let id = message["id"].clone();
        seen_ids.push(id.clone());
        let answer = match message["method"].as_str() {
            Some("sampling/createMessage") => {
                json!({"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"})
            }
            Some("elicitation/create") => json!({"action":"accept","content":{"colour":"blue"}}),
            _ => json!({"roots":[{"uri":"file:///w","name":"w"}]}),
        };
        let reply = post_raw(
            &url,
            Some(&session),
            &json!({"jsonrpc":"2.0","id":id,"result":answer}).to_string(),
        )
        .await;
        assert_eq!(reply.status, 202, "{message} -> {reply:?}");
    };
    assert_eq!(seen_ids.len(), 3);
    assert!(
        seen_ids
            .iter()
            .all(|id| id.as_str().is_some_and(|s| s.starts_with("berth-s")))
    );
    assert_eq!(final_reply["id"], json!(5));
    let answers = &final_reply["result"]["structuredContent"];
    assert_eq!(
        answers["elicitation"]["result"]["content"]["colour"],
        json!("blue"),
        "{final_reply}"
    );
    let upstream_ids: Vec<_> = upstream
        .received()
        .into_iter()
        .filter(|r| r.method.is_none() && r.http_method == "POST")
        .filter_map(|r| r.id)
        .collect();
    for expected in ["up-1", "up-2", "up-3"] {
        assert!(upstream_ids.contains(&json!(expected)), "{upstream_ids:?}");
    }
    proxy.shutdown().await;
}

/// A client's answer the upstream does not take (here HTTP 500) is not lost behind a 202: the
/// client gets 502 with a JSON-RPC error under its answer's id, the server request stays
/// pending, and the same answer sent again completes the call.
#[tokio::test]
async fn br_27_an_answer_the_upstream_refuses_is_a_502_under_its_id_and_can_be_sent_again() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "20s")).await;
    let url = mcp_url(&proxy);
    let capabilities = json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}});
    let (session, _) = open_session_with(&url, "2025-06-18", capabilities).await;
    let (_, mut replies) = post_stream(&url, &session, &call(json!(6), "ask", json!({}))).await;
    let mut refused_once = false;
    let final_reply = loop {
        let message = next_within(&mut replies, Duration::from_secs(10))
            .await
            .expect("message");
        if message.get("method").is_none() {
            break message;
        }
        if message.get("id").is_none() {
            continue;
        }
        let answer = match message["method"].as_str() {
            Some("sampling/createMessage") => {
                json!({"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"})
            }
            Some("elicitation/create") => json!({"action":"accept","content":{"colour":"red"}}),
            _ => json!({"roots":[]}),
        };
        let body = json!({"jsonrpc":"2.0","id":message["id"],"result":answer}).to_string();
        if !refused_once {
            refused_once = true;
            upstream.update(|f| f.answer_status = Some(500));
            let reply = post_raw(&url, Some(&session), &body).await;
            assert_eq!(reply.status, 502, "{message} -> {reply:?}");
            assert_eq!(reply.last()["id"], message["id"], "{reply:?}");
            assert_eq!(reply.last()["error"]["code"], json!(-32010), "{reply:?}");
            upstream.update(|f| f.answer_status = None);
        }
        let reply = post_raw(&url, Some(&session), &body).await;
        assert_eq!(reply.status, 202, "{message} -> {reply:?}");
    };
    assert_eq!(final_reply["id"], json!(6), "{final_reply}");
    let answers = &final_reply["result"]["structuredContent"];
    assert_eq!(
        answers["elicitation"]["result"]["content"]["colour"],
        json!("red"),
        "{final_reply}"
    );
    proxy.shutdown().await;
}

/// On the shared upstream session only the first subscriber's `resources/subscribe` goes
/// upstream. When the upstream refuses it, the proxy forgets that client's subscription, so the
/// next client's subscribe goes upstream too (and the upstream really subscribes) instead of
/// being answered `{}` locally for a subscription that does not exist.
#[tokio::test]
async fn subscriptions_a_refused_first_subscribe_is_forgotten_and_the_next_one_goes_upstream() {
    let upstream = FaultUpstream::builder()
        .capabilities(berth_tests::fault::Capabilities {
            resources_subscribe: true,
            ..Default::default()
        })
        .start()
        .await;
    upstream.update(|f| f.subscribe_error = true);
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let subscribe = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe",
            "params": {"uri": "fault://counter"}})
        .to_string()
    };
    let first = open_session(&url).await;
    let reply = post_raw(&url, Some(&first), &subscribe(2)).await;
    assert_eq!(reply.last()["id"], json!(2), "{reply:?}");
    assert!(reply.last().get("error").is_some(), "refused: {reply:?}");

    upstream.update(|f| f.subscribe_error = false);
    let second = open_session(&url).await;
    let reply = post_raw(&url, Some(&second), &subscribe(3)).await;
    assert_eq!(reply.last()["id"], json!(3), "{reply:?}");
    assert_eq!(reply.last()["result"], json!({}), "{reply:?}");
    let subscribes = upstream
        .received()
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("resources/subscribe"))
        .count();
    assert_eq!(subscribes, 2, "the second subscribe went upstream");
    proxy.shutdown().await;
}

/// The upstream's `notifications/cancelled` of a server request it sent reaches the client
/// under the id the client knows that request by (never the upstream's), and the request is
/// no longer pending: a late answer is refused and never reaches the upstream.
#[tokio::test]
async fn br_27_upstream_cancel_of_its_server_request_reaches_the_client_under_its_id() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "20s")).await;
    let url = mcp_url(&proxy);
    let (session, _) = open_session_with(&url, "2025-06-18", json!({"sampling": {}})).await;
    let ask = call(json!(7), "ask", json!({"cancel": true}));
    let (_, mut replies) = post_stream(&url, &session, &ask).await;
    let mut messages = Vec::new();
    while let Some(message) = next_within(&mut replies, Duration::from_secs(10)).await {
        messages.push(message);
    }
    let request = messages
        .iter()
        .find(|m| m["method"] == "sampling/createMessage")
        .expect("the server request");
    let client_id = request["id"].clone();
    assert!(
        client_id
            .as_str()
            .is_some_and(|id| id.starts_with("berth-s")),
        "{request}"
    );
    let cancelled = messages
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("the cancellation reached the client: {messages:?}"));
    assert_eq!(cancelled["params"]["requestId"], client_id, "{cancelled}");
    assert_eq!(cancelled["params"]["reason"], json!("no longer needed"));
    let last = messages.last().expect("the call's response");
    assert_eq!(last["id"], json!(7), "{last}");
    let late = json!({"jsonrpc": "2.0", "id": client_id, "result":
        {"role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m"}});
    let reply = post_raw(&url, Some(&session), &late.to_string()).await;
    assert_eq!(reply.status, 400, "no longer pending: {reply:?}");
    let answered_upstream = upstream
        .received()
        .into_iter()
        .any(|r| r.method.is_none() && r.http_method == "POST");
    assert!(!answered_upstream, "a late answer reached the upstream");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_27_client_without_sampling_gets_upstream_refused_at_once() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "20s")).await;
    let url = mcp_url(&proxy);
    let (session, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    let started = Instant::now();
    let reply = post_raw(&url, Some(&session), &call(json!(5), "ask", json!({}))).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "no wait for the tool timeout"
    );
    assert_eq!(reply.last()["id"], json!(5));
    let answers = &reply.last()["result"]["structuredContent"];
    assert_eq!(
        answers["sampling"]["error"]["code"],
        json!(-32601),
        "{reply:?}"
    );
    assert!(
        reply.messages.iter().all(|m| m.get("method").is_none()),
        "no server request leaked"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_29_progress_token_mapped_and_never_invented() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let body = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{
        "name":"slow","arguments":{"ms":300},"_meta":{"progressToken":"tok-9"}}});
    let reply = post_raw(&url, Some(&session), &body.to_string()).await;
    let progress: Vec<_> = reply
        .messages
        .iter()
        .filter(|m| m["method"] == json!("notifications/progress"))
        .collect();
    assert_eq!(progress.len(), 3, "{reply:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == json!("tok-9"))
    );
    let steps: Vec<_> = progress
        .iter()
        .map(|p| p["params"]["progress"].as_f64())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "increasing progress");
    assert_eq!(reply.last()["id"], json!(9));
    let sent_token = upstream
        .received()
        .into_iter()
        .find(|r| r.method.as_deref() == Some("tools/call"))
        .map(|r| r.message["params"]["_meta"]["progressToken"].clone());
    assert_ne!(
        sent_token,
        Some(json!("tok-9")),
        "the upstream sees a proxy-mapped token"
    );
    let plain = post_raw(
        &url,
        Some(&session),
        &call(json!(10), "slow", json!({"ms": 100})),
    )
    .await;
    assert_eq!(plain.messages.len(), 1, "no progress invented: {plain:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_30_each_call_counted_once_with_its_outcome() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    for (id, tool) in [(1, "bad"), (2, "missing"), (3, "echo")] {
        post_raw(
            &url,
            Some(&session),
            &call(json!(id), tool, json!({"message": "m"})),
        )
        .await;
    }
    post_raw(
        &url,
        Some(&session),
        &json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}).to_string(),
    )
    .await;
    let metrics = scrape(&proxy).await;
    for (tool, outcome) in [
        ("bad", "tool_error"),
        ("missing", "rpc_error"),
        ("echo", "ok"),
    ] {
        let series =
            format!(r#"berth_proxy_tool_calls_total{{outcome="{outcome}",tool="{tool}"}}"#);
        assert_eq!(sample(&metrics, &series), 1.0, "{series}\n{metrics}");
    }
    let total: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("berth_proxy_tool_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, 3.0, "tools/list is not a tool call");
    assert!(!metrics.contains(&session), "no session id in any label");
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_02_idle_session_expires_to_404_and_is_counted() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.idle_timeout = DurationString::new("1s");
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.last()["id"], json!(2));
    let metrics = scrape(&proxy).await;
    assert!(
        sample(&metrics, "berth_proxy_downstream_sessions_expired_total") >= 1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_15_reopened_get_replaces_the_stale_stream() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let mut first = open_get_stream(&url, &session).await;
    let mut second = open_get_stream(&url, &session).await;
    assert!(
        next_within(&mut first, Duration::from_secs(2))
            .await
            .is_none(),
        "stale stream closed"
    );
    upstream.log("info", json!("hello"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        got = next_within(&mut second, Duration::from_millis(200)).await;
        if got.is_none() {
            upstream.log("info", json!("hello"));
        }
    }
    assert_eq!(
        got.expect("message on the new stream")["method"],
        json!("notifications/message")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn tools_drift_fail_closed_blocks_the_changed_tool_only() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.tools_probe.policy = ToolsProbePolicy::OnListChanged;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.open_streams() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(upstream.set_input_schema(
        "echo",
        json!({"type": "object", "properties": {"other": {"type": "number"}}})
    ));
    upstream.notify_tools_changed();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = scrape(&proxy).await;
        if sample(&metrics, "berth_proxy_tools_drifted") >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "drift detected: {metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let blocked = post_raw(
        &url,
        Some(&session),
        &call(json!(1), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(
        blocked.last()["error"]["code"],
        json!(berth_proxy::wire::jsonrpc::DRIFT_BLOCKED)
    );
    let other = post_raw(&url, Some(&session), &call(json!(2), "bad", json!({}))).await;
    assert!(
        other.last().get("result").is_some(),
        "unchanged tools still work"
    );
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_tool_calls_total{outcome="drift_blocked",tool="echo"}"#
        ),
        1.0
    );
    let summary: Value = reqwest::get(format!("http://{}/tools", proxy.admin_addr))
        .await
        .expect("tools")
        .json()
        .await
        .expect("json");
    assert_eq!(summary["drifted"], json!(["echo"]));
    proxy.shutdown().await;
}

/// Calls the fault upstream's `slow` tool (3 progress notifications 500 ms apart, then the
/// result) at `url` and returns the response headers and when each SSE event arrived.
async fn progress_arrivals(
    url: &str,
    session: &str,
) -> (reqwest::header::HeaderMap, Vec<Duration>) {
    use futures::StreamExt;
    let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "name":"slow","arguments":{"ms":1500},"_meta":{"progressToken":"p"}}});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    let headers = response.headers().clone();
    let started = Instant::now();
    let mut arrivals = Vec::new();
    let mut events = sse_stream::SseByteStream::new(response.bytes_stream());
    while let Some(Ok(event)) = events.next().await {
        if event.data.is_some() {
            arrivals.push(started.elapsed());
        }
    }
    assert_eq!(arrivals.len(), 4, "3 progress + result: {arrivals:?}");
    (headers, arrivals)
}

#[tokio::test]
async fn br_17_sse_replies_are_unbuffered_and_flushed_per_event() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let (headers, arrivals) = progress_arrivals(&url, &session).await;
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-accel-buffering"], "no");
    assert!(headers.get("content-length").is_none());
    assert!(headers.get("content-encoding").is_none());
    // The fault upstream sleeps 500 ms per step: events arrive spread out, not in one batch.
    assert!(
        arrivals[0] < Duration::from_millis(900),
        "first progress flushed at once: {arrivals:?}"
    );
    assert!(
        arrivals[2] - arrivals[0] >= Duration::from_millis(700),
        "{arrivals:?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_17_sse_through_nginx_with_default_buffering_arrives_per_event() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let backend = [proxy.mcp_addr.to_string()];
    // nginx's defaults: proxy_buffering on, HTTP/1.0 to the backend.
    let nginx = berth_tests::nginx::Nginx::start(&backend, "").await;
    let session = open_session(&nginx.mcp_url()).await;
    let (_, arrivals) = progress_arrivals(&nginx.mcp_url(), &session).await;
    assert!(
        arrivals[0] < Duration::from_millis(900)
            && arrivals[2] - arrivals[0] >= Duration::from_millis(700),
        "each event flushed through nginx on its own: {arrivals:?}"
    );
    // Control: the same nginx told to ignore X-Accel-Buffering holds the events back, so the
    // header (not luck) is what keeps the stream live.
    let ignoring =
        berth_tests::nginx::Nginx::start(&backend, "proxy_ignore_headers X-Accel-Buffering;").await;
    let session = open_session(&ignoring.mcp_url()).await;
    let (_, held) = progress_arrivals(&ignoring.mcp_url(), &session).await;
    assert!(
        held[2] - held[0] < Duration::from_millis(300),
        "without the header nginx batches the events: {held:?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_15_idle_get_stream_gets_keepalive_within_15s() {
    use futures::StreamExt;
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let response = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("get");
    let mut bytes = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(17), bytes.next())
        .await
        .expect("a keep-alive within 15 s")
        .expect("stream open")
        .expect("bytes");
    assert!(first.starts_with(b":"), "an SSE comment: {first:?}");
    let call5 = post_raw(
        &url,
        Some(&session),
        &call(json!(5), "echo", json!({"message": "late"})),
    )
    .await;
    assert_eq!(text(call5.last()), json!("late"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_13_upstream_that_never_completes_initialize_hits_the_connect_budget() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.handshake_delay = Duration::from_secs(30));
    let mut cfg = config(&upstream.url, "10s");
    cfg.timeouts.connect = DurationString::new("1s");
    berth_proxy::install_crypto_provider();
    let proxy = berth_proxy::start(&cfg).await.expect("proxy starts");
    let readyz = format!("http://{}/readyz", proxy.admin_addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = scrape(&proxy).await;
        if sample(
            &metrics,
            r#"berth_proxy_upstream_initializations_total{result="timeout"}"#,
        ) >= 2.0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "handshake timeouts counted: {metrics}"
        );
        let status = reqwest::get(&readyz)
            .await
            .expect("readyz")
            .status()
            .as_u16();
        assert_eq!(
            status, 503,
            "never ready while the handshake cannot complete"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let reply = post_raw(&mcp_url(&proxy), None, &init.to_string()).await;
    assert!(matches!(reply.status, 502 | 504), "{reply:?}");
    assert_eq!(reply.last()["id"], json!(1));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by the connect budget"
    );
    upstream.update(|f| f.handshake_delay = Duration::ZERO);
    berth_tests::proxy::wait_ready(&proxy, Duration::from_secs(15)).await;
    proxy.shutdown().await;
}

/// `slow` with a progress token over `url`: `(final message, seconds taken)`.
async fn slow_with_progress(
    url: &str,
    session: &str,
    id: u64,
    ms: u64,
    steps: u64,
) -> (Value, f64) {
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name":"slow","arguments":{"ms":ms,"steps":steps},"_meta":{"progressToken":format!("p{id}")}}});
    let started = Instant::now();
    let reply = post_raw(url, Some(session), &body.to_string()).await;
    (reply.last().clone(), started.elapsed().as_secs_f64())
}

#[tokio::test]
async fn progress_restarts_the_call_budget_only_with_max_call_and_never_past_it() {
    let upstream = FaultUpstream::builder().start().await;
    // Without maxCall: progress every 400 ms does not extend a 1 s budget.
    let plain = start_ready(&config(&upstream.url, "1s")).await;
    let url = mcp_url(&plain);
    let session = open_session(&url).await;
    let (reply, took) = slow_with_progress(&url, &session, 2, 2400, 6).await;
    assert_eq!(
        reply["error"]["data"]["outcome"],
        json!("timeout"),
        "{reply}"
    );
    assert!(took < 1.8, "timed out at the 1 s budget: {took}");
    plain.shutdown().await;

    // With maxCall 3s: the same call completes, each progress restarting the 1 s budget...
    let mut cfg = config(&upstream.url, "1s");
    cfg.timeouts.max_call = Some(DurationString::new("3s"));
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let (reply, _) = slow_with_progress(&url, &session, 3, 2400, 6).await;
    assert_eq!(text(&reply), json!("slept 2400 ms"), "{reply}");
    // ...but a call that keeps reporting progress still ends at the 3 s cap, and is cancelled
    // upstream.
    let (reply, took) = slow_with_progress(&url, &session, 4, 8000, 20).await;
    assert_eq!(reply["id"], json!(4));
    assert_eq!(
        reply["error"]["data"]["outcome"],
        json!("timeout"),
        "{reply}"
    );
    assert!((2.8..4.0).contains(&took), "ended at the hard cap: {took}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.cancellations().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        upstream.cancellations().len(),
        2,
        "both timeouts cancelled upstream"
    );
    proxy.shutdown().await;
}

#[test]
fn max_call_below_call_is_a_config_error_naming_the_field() {
    let mut cfg = config("http://127.0.0.1:1/mcp", "10s");
    cfg.timeouts.max_call = Some(DurationString::new("5s"));
    let error = cfg.check().expect_err("maxCall < call");
    assert!(
        format!("{error:?}").contains("timeouts.maxCall"),
        "{error:?}"
    );
}

/// A 200 with one JSON body, not an SSE stream.
fn assert_json_only(reply: &berth_tests::proxy::RawReply) {
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("application/json")),
        "{reply:?}"
    );
    assert_eq!(reply.messages.len(), 1, "one JSON response: {reply:?}");
}

/// A client whose `Accept` names only JSON gets one JSON response even when the upstream
/// streams its reply: progress notifications are counted as undeliverable, and server-to-client
/// requests are refused upstream at once (-32601) instead of waiting for a client that has no
/// stream to receive them on.
#[tokio::test]
async fn front_json_only_client_gets_the_final_response_as_json_when_the_upstream_streams() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let (session, _) = open_session_with(
        &url,
        "2025-06-18",
        json!({"sampling": {}, "elicitation": {}, "roots": {}}),
    )
    .await;

    let slow = json!({"jsonrpc":"2.0","id":"p-1","method":"tools/call","params":{
        "name":"slow","arguments":{"ms":300},"_meta":{"progressToken":"tok"}}});
    let json_only = [("accept", "application/json")];
    let reply = post_with(&url, Some(&session), &json_only, &slow.to_string()).await;
    assert_json_only(&reply);
    let reply = reply.last();
    assert_eq!(reply["id"], json!("p-1"));
    assert_eq!(reply["result"]["content"][0]["text"], json!("slept 300 ms"));
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_server_messages_dropped_total"),
        3.0,
        "the three progress notifications were counted: {metrics}"
    );

    let started = Instant::now();
    let reply = post_with(
        &url,
        Some(&session),
        &json_only,
        &call(json!(9), "ask", json!({})),
    )
    .await;
    assert_json_only(&reply);
    let reply = reply.last();
    let answers = &reply["result"]["structuredContent"];
    for key in ["sampling", "elicitation", "roots"] {
        assert_eq!(
            answers[key]["error"]["code"],
            json!(-32601),
            "{key}: {reply}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once, not left to the upstream's answer deadline"
    );
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_server_requests_total{result="refused"}"#
        ),
        3.0
    );
    proxy.shutdown().await;
}
