//! The proxy in front of the real Node reference server (`@modelcontextprotocol/server-everything`),
//! driven by a real MCP client (rmcp) and by raw Streamable HTTP where exact ids matter.

use std::time::Duration;

use berth_tests::proxy::{
    call, config, mcp_url, open_session, open_session_with, post_raw, sample, scrape, start_ready,
};
use berth_tests::{peers, rmcp_client, tap};
use serde_json::json;

#[tokio::test]
async fn proxy_rmcp_client_lists_tools_and_calls_echo() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|t| t.name == "echo"),
        "echo listed: {tools:?}"
    );
    let result = rmcp_client::call_tool(&client, "echo", json!({"message": "hi"})).await;
    let text = serde_json::to_value(&result.content).expect("content json");
    assert_eq!(text[0]["text"], json!("Echo: hi"));
    assert_ne!(result.is_error, Some(true));
    let metrics = scrape(&proxy).await;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="echo"}"#;
    assert_eq!(sample(&metrics, ok), 1.0, "{metrics}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}

#[tokio::test]
async fn proxy_is_error_result_counts_as_tool_error_not_ok() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    // The reference server answers invalid arguments with a result carrying isError: true.
    let result = rmcp_client::call_tool(&client, "echo", json!({})).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "reference server reports a tool error"
    );
    let metrics = scrape(&proxy).await;
    let tool_error = r#"berth_proxy_tool_calls_total{outcome="tool_error",tool="echo"}"#;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="echo"}"#;
    assert_eq!(sample(&metrics, tool_error), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, ok), 0.0, "{metrics}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}

#[tokio::test]
async fn proxy_two_clients_both_using_id_1_each_get_their_own_reply() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let a = open_session(&url).await;
    let b = open_session(&url).await;
    for round in 0..20 {
        let msg_a = format!("from-a-{round}");
        let msg_b = format!("from-b-{round}");
        let body_a = call(json!(1), "echo", json!({ "message": msg_a }));
        let body_b = call(json!(1), "echo", json!({ "message": msg_b }));
        let (reply_a, reply_b) = tokio::join!(
            post_raw(&url, Some(&a), &body_a),
            post_raw(&url, Some(&b), &body_b),
        );
        assert_eq!(reply_a.last()["id"], json!(1));
        assert_eq!(reply_b.last()["id"], json!(1));
        assert_eq!(
            reply_a.last()["result"]["content"][0]["text"],
            json!(format!("Echo: {msg_a}"))
        );
        assert_eq!(
            reply_b.last()["result"]["content"][0]["text"],
            json!(format!("Echo: {msg_b}"))
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn proxy_many_clients_and_calls_upstream_sees_exactly_one_initialize() {
    let server = peers::everything().await;
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let url = mcp_url(&proxy);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rmcp_client::connect(&url).await);
    }
    for (i, client) in clients.iter().enumerate() {
        client.list_all_tools().await.expect("tools/list");
        for n in 0..3 {
            let message = format!("c{i}-{n}");
            rmcp_client::call_tool(client, "echo", json!({ "message": message })).await;
        }
    }
    let record = tap.record;
    assert_eq!(record.count("initialize"), 1, "{:?}", record.entries());
    assert_eq!(record.count("notifications/initialized"), 1);
    assert_eq!(record.count("tools/call"), 12);
    assert!(record.count("tools/list") >= 5, "probe + one per client");
    let sessions: std::collections::HashSet<_> = record
        .entries()
        .into_iter()
        // The handshake and the era probe before it come without a session.
        .filter(|(m, _)| m != "initialize" && m != "server/discover")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(
        sessions.len(),
        1,
        "every request on one upstream session: {sessions:?}"
    );
    assert!(sessions.iter().all(Option::is_some));
    for client in clients {
        client.cancel().await.expect("client closes");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn proxy_call_past_budget_times_out_with_request_id() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "1s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let started = std::time::Instant::now();
    let body = call(
        json!("slow-1"),
        "trigger-long-running-operation",
        json!({"duration": 5, "steps": 5}),
    );
    let reply = post_raw(&url, Some(&session), &body).await;
    let elapsed = started.elapsed();
    assert_eq!(reply.last()["id"], json!("slow-1"));
    assert_eq!(
        reply.last()["error"]["code"],
        json!(berth_proxy::wire::jsonrpc::REQUEST_TIMEOUT)
    );
    assert!(
        elapsed < Duration::from_secs(4),
        "timed out in budget: {elapsed:?}"
    );
    let metrics = scrape(&proxy).await;
    let timeout =
        r#"berth_proxy_tool_calls_total{outcome="timeout",tool="trigger-long-running-operation"}"#;
    assert_eq!(sample(&metrics, timeout), 1.0, "{metrics}");
    // The session survives the timeout.
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "after"})),
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("Echo: after")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn design_5_dead_upstream_takes_the_proxy_out_of_readiness() {
    let server = peers::everything().await;
    let mut cfg = config(&server.url, "10s");
    cfg.timeouts.connect = berth_crds::DurationString::new("2s");
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    drop(server); // kills the Node process: connections are refused from now on
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(1), "echo", json!({"message": "x"})),
    )
    .await;
    assert!(reply.last().get("error").is_some(), "{reply:?}");
    let readyz = format!("http://{}/readyz", proxy.admin_addr);
    let started = std::time::Instant::now();
    loop {
        let status = reqwest::get(&readyz)
            .await
            .expect("readyz")
            .status()
            .as_u16();
        if status == 503 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still ready with a dead upstream"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_upstream_ready"),
        0.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_upstream_session_losses_total{reason="unreachable"}"#
        ),
        1.0,
        "{metrics}"
    );
    let healthz = format!("http://{}/healthz", proxy.admin_addr);
    assert_eq!(
        reqwest::get(&healthz)
            .await
            .expect("healthz")
            .status()
            .as_u16(),
        200
    );
    proxy.shutdown().await;
}

/// MCP tasks (2025-11-25) belong to the requestor, but over the shared upstream session every
/// client is the same requestor: forwarded, client B could list, read and cancel client A's
/// tasks. The Node reference server offers tasks; through a `Shared` proxy the capability is
/// hidden, `tasks/*` gets -32601, a task-augmented call gets -32602 (outcome `rejected`), and
/// none of them reaches the upstream.
#[tokio::test]
async fn shared_session_hides_tasks_and_never_forwards_task_requests() {
    let server = peers::everything().await;
    let (_, direct) = open_session_with(&server.url, "2025-11-25", json!({})).await;
    assert!(
        direct["capabilities"].get("tasks").is_some(),
        "the upstream offers tasks, so the test means something: {direct}"
    );
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let url = mcp_url(&proxy);
    let (a, result) = open_session_with(&url, "2025-11-25", json!({})).await;
    assert!(
        result["capabilities"].get("tasks").is_none(),
        "tasks hidden from clients of the shared session: {result}"
    );
    assert!(result["capabilities"].get("tools").is_some(), "{result}");
    let (b, _) = open_session_with(&url, "2025-11-25", json!({})).await;
    let before = tap.record.entries().len();

    let augmented = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"message": "a"}, "task": {"ttl": 60000}}});
    let reply = post_raw(&url, Some(&a), &augmented.to_string()).await;
    assert_eq!(reply.last()["id"], json!(1), "{reply:?}");
    assert_eq!(reply.last()["error"]["code"], json!(-32602), "{reply:?}");
    assert_eq!(reply.last()["error"]["data"]["outcome"], json!("rejected"));
    for (n, method) in ["tasks/list", "tasks/get", "tasks/result", "tasks/cancel"]
        .into_iter()
        .enumerate()
    {
        let body = json!({"jsonrpc": "2.0", "id": 10 + n, "method": method,
            "params": {"taskId": "any"}});
        let reply = post_raw(&url, Some(&b), &body.to_string()).await;
        assert_eq!(reply.last()["id"], json!(10 + n), "{method}: {reply:?}");
        assert_eq!(
            reply.last()["error"]["code"],
            json!(-32601),
            "{method}: {reply:?}"
        );
    }
    assert_eq!(
        client_messages_since(&tap, before),
        [],
        "no task request reached the upstream"
    );
    // A plain call still works.
    let plain = call(json!(2), "echo", json!({"message": "a"}));
    let reply = post_raw(&url, Some(&a), &plain).await;
    assert!(reply.last().get("result").is_some(), "{reply:?}");
    proxy.shutdown().await;
}

/// When the upstream dies under a streamed call, the call fails at once and readiness drops
/// at once too (the supervisor pings the upstream right after the broken reply, instead of at
/// the next 10 s liveness ping); a client notification that cannot be forwarded then gets 502
/// with a JSON-RPC error and is counted, never a 202 for a message that went nowhere.
#[tokio::test]
async fn upstream_death_mid_call_drops_readiness_at_once_and_notifications_get_502() {
    let server = peers::everything().await;
    let mut cfg = config(&server.url, "60s");
    // A notification waits at most this long for an upstream session.
    cfg.timeouts.connect = berth_crds::DurationString::new("1s");
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let long = call(
        json!(1),
        "trigger-long-running-operation",
        json!({"duration": 5, "steps": 5}),
    );
    let (status, mut replies) = berth_tests::proxy::post_stream(&url, &session, &long).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(server);
    let died = std::time::Instant::now();
    let last = loop {
        let Some(message) = tokio::time::timeout(Duration::from_secs(5), replies.recv())
            .await
            .expect("the call ends at once")
        else {
            panic!("the stream ended without a final response");
        };
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(
        last["error"]["data"]["outcome"],
        json!("upstream_unavailable"),
        "{last}"
    );
    let readyz = format!("http://{}/readyz", proxy.admin_addr);
    berth_tests::wait_for("readiness to drop", Duration::from_secs(4), || {
        let readyz = readyz.clone();
        async move {
            let status = reqwest::get(&readyz).await.ok()?.status();
            (!status.is_success()).then_some(())
        }
    })
    .await;
    eprintln!(
        "readiness dropped {:?} after the upstream died",
        died.elapsed()
    );
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
    let reply = post_raw(&url, Some(&session), &note.to_string()).await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert_eq!(
        reply.last()["error"]["data"]["outcome"],
        json!("upstream_unavailable")
    );
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_client_notifications_failed_total"),
        1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

/// What the upstream was sent after the first `before` entries, leaving out responses: the
/// proxy answers requests the server sends on its own (the Node server asks for roots), and
/// those answers may pass at any time.
fn client_messages_since(tap: &tap::Running, before: usize) -> Vec<tap::Entry> {
    tap.record.entries()[before..]
        .iter()
        .filter(|(method, _)| method != "<response>")
        .cloned()
        .collect()
}

/// A rolling update loses no call (issue 11): on SIGTERM the proxy reports not ready at once,
/// keeps serving new clients for `timeouts.drain`, then stops accepting, and a call in flight
/// across all of it still gets its result (the upstream session outlives the listeners).
#[tokio::test]
async fn proxy_drain_reports_not_ready_keeps_serving_then_finishes_in_flight_calls() {
    let server = peers::everything().await;
    let mut settings = config(&server.url, "60s");
    settings.timeouts.drain = berth_crds::DurationString::new("1s");
    let proxy = start_ready(&settings).await;
    let (url, admin) = (mcp_url(&proxy), proxy.admin_addr);
    let client = rmcp_client::connect(&url).await;
    let slow = tokio::spawn(async move {
        let args = json!({ "duration": 3, "steps": 3 });
        let result = rmcp_client::call_tool(&client, "trigger-long-running-operation", args).await;
        (client, result)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let drain = tokio::spawn(proxy.drain());

    let readyz = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .expect("readyz");
    assert_eq!(
        readyz.status(),
        503,
        "not ready as soon as the drain begins"
    );
    assert_eq!(readyz.text().await.expect("body"), "draining");
    let late = rmcp_client::connect(&url).await;
    let echoed =
        rmcp_client::call_tool(&late, "echo", json!({ "message": "during the drain" })).await;
    assert_ne!(
        echoed.is_error,
        Some(true),
        "served during the drain: {echoed:?}"
    );
    drop(late);

    let refused = berth_tests::wait_for("the listener to close", Duration::from_secs(5), || {
        let url = url.clone();
        async move {
            let reply = reqwest::Client::new().post(&url).body("{}").send().await;
            reply.err().filter(reqwest::Error::is_connect).map(|_| ())
        }
    });
    refused.await;
    let (client, result) = slow.await.expect("the in-flight call's task");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = serde_json::to_value(&result.content)
        .expect("content json")
        .to_string();
    assert!(
        text.contains("completed"),
        "the in-flight call got its result: {text}"
    );
    drop(client);
    tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("shutdown ends once the call finished")
        .expect("drain task");
}
