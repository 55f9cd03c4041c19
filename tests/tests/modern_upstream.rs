//! Issue 13: MCP 2026-07-28 upstreams behind the proxy. The proxy probes each upstream with
//! `server/discover` and speaks the era it finds: a modern upstream gets no handshake and no
//! session, and every request carries the revision and the client's hop in `_meta` plus the
//! mirrored headers; a legacy upstream still gets its `initialize`.
//!
//! Upstreams: the Python SDK server (mcp 2.3.0, dual-era) and the same server with
//! `MODERN_ONLY=1` (refuses `initialize` and every legacy request, as a server without the
//! legacy revisions does), over HTTP; the Python SDK stdio server; the Node reference server
//! (legacy only). Clients: rmcp (legacy) and the Python SDK in both eras
//! (`tests/peers/clients`), which answer elicitation.

use std::time::Duration;

use berth_crds::SessionStrategy;
use berth_tests::peers::{self, run_client};
use berth_tests::proxy::{config, mcp_url, sample, scrape, start_ready, wait_ready};
use berth_tests::{rmcp_client, stdio, tap};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

async fn upstream_state(proxy: &berth_proxy::RunningProxy) -> Value {
    reqwest::get(format!("http://{}/upstream", proxy.admin_addr))
        .await
        .expect("admin /upstream")
        .json()
        .await
        .expect("json")
}

/// A legacy client (rmcp) through a `Shared` proxy to an upstream that speaks only 2026-07-28:
/// the proxy finds the upstream modern, never sends it `initialize` or a session id, and the
/// client's list, call, tool error and ping all work; the metric counts the call.
#[tokio::test]
async fn legacy_client_uses_a_modern_only_upstream_over_the_proxy() {
    let server = peers::python_server_modern_only().await;
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let state = upstream_state(&proxy).await;
    assert_eq!(state["era"], json!("modern"), "{state}");
    assert_eq!(state["protocolVersion"], json!(MODERN), "{state}");
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    let info = client.peer_info().expect("initialize result");
    let server_name = info.server_info.as_ref().map(|s| s.name.as_str());
    assert_eq!(server_name, Some("berth-python-peer"), "{info:?}");
    assert!(
        !info.protocol_version.to_string().starts_with("2026"),
        "a legacy client is answered with a legacy revision: {info:?}"
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let echo = rmcp_client::call_tool(&client, "echo", json!({"message": "over modern"})).await;
    let content = serde_json::to_value(&echo.content).expect("content json");
    assert_eq!(content[0]["text"], json!("Echo: over modern"));
    let fail = rmcp_client::call_tool(&client, "fail", json!({"reason": "boom"})).await;
    assert_eq!(fail.is_error, Some(true), "{fail:?}");
    client
        .send_request(rmcp::model::ClientRequest::PingRequest(
            rmcp::model::PingRequest::default(),
        ))
        .await
        .expect("ping is answered for a modern upstream");
    let metrics = scrape(&proxy).await;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="echo"}"#;
    let tool_error = r#"berth_proxy_tool_calls_total{outcome="tool_error",tool="fail"}"#;
    assert_eq!(sample(&metrics, ok), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, tool_error), 1.0, "{metrics}");
    let entries = tap.record.entries();
    assert_eq!(tap.record.count("initialize"), 0, "{entries:?}");
    assert!(
        entries.iter().all(|(_, session)| session.is_none()),
        "no session id ever reaches a modern upstream: {entries:?}"
    );
    assert!(tap.record.count("server/discover") >= 1, "{entries:?}");
    assert_eq!(tap.record.count("ping"), 0, "{entries:?}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}

/// A dual-era upstream (the Python SDK's default) is taken as modern; the Node reference
/// server (legacy only) answers the probe with an error and still gets its `initialize` and
/// one upstream session, as before.
#[tokio::test]
async fn probe_finds_dual_era_upstreams_modern_and_legacy_ones_legacy() {
    let dual = peers::python_server().await;
    let proxy = start_ready(&config(&dual.url, "60s")).await;
    assert_eq!(upstream_state(&proxy).await["era"], json!("modern"));
    proxy.shutdown().await;

    let legacy = peers::everything().await;
    let tap = tap::start(&legacy.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let state = upstream_state(&proxy).await;
    assert_eq!(state["era"], json!("legacy"), "{state}");
    assert_eq!(
        tap.record.count("initialize"),
        1,
        "{:?}",
        tap.record.entries()
    );
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    let echo = rmcp_client::call_tool(&client, "echo", json!({"message": "legacy"})).await;
    assert_ne!(echo.is_error, Some(true), "{echo:?}");
    let sessions: std::collections::BTreeSet<_> = tap
        .record
        .entries()
        .into_iter()
        .filter(|(method, _)| method != "server/discover" && method != "initialize")
        .filter_map(|(_, session)| session)
        .collect();
    assert_eq!(sessions.len(), 1, "one upstream session: {sessions:?}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}

/// MRTR bridged for a legacy client: the modern-only upstream answers `greet` with an
/// `input_required` result (an elicitation); the proxy asks the legacy Python SDK client the
/// elicitation as a server request on its call's stream and retries with the answer, so the
/// legacy client gets "Hello, Ada!" as from a legacy server. A modern client through the same
/// proxy gets the upstream's `input_required` as is and retries itself.
#[tokio::test]
async fn input_required_of_a_modern_upstream_reaches_a_legacy_client_as_a_server_request() {
    let python = peers::python_interpreter();
    let server = peers::python_server_modern_only().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let legacy_args = [url.as_str(), "legacy", "Ada"];
    let modern_args = [url.as_str(), MODERN, "Grace"];
    let (legacy, modern) = tokio::join!(
        run_client(&python, "elicit_sdk.py", &legacy_args),
        run_client(&python, "elicit_sdk.py", &modern_args),
    );
    assert_eq!(legacy["text"], json!("Hello, Ada!"), "{legacy}");
    assert_ne!(legacy["protocol_version"], json!(MODERN), "{legacy}");
    assert_eq!(legacy["elicitations"], json!(["What is your name?"]));
    assert_eq!(modern["text"], json!("Hello, Grace!"), "{modern}");
    assert_eq!(modern["protocol_version"], json!(MODERN), "{modern}");
    let metrics = scrape(&proxy).await;
    let asked =
        r#"berth_proxy_bridged_server_requests_total{direction="to_legacy_client",result="asked"}"#;
    let answered = r#"berth_proxy_bridged_server_requests_total{direction="to_legacy_client",result="answered"}"#;
    assert_eq!(sample(&metrics, asked), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, answered), 1.0, "{metrics}");
    proxy.shutdown().await;
}

/// A legacy client that did not declare elicitation: the upstream is told so (the client's
/// capabilities travel in `_meta`) and answers -32021 itself, which reaches the client under its
/// id. A client that declared it but whose `Accept` names only JSON cannot be asked on a
/// stream: a clear JSON-RPC error under its id, counted as refused. Nothing hangs.
#[tokio::test]
async fn input_required_for_a_client_that_cannot_be_asked_is_a_clear_error() {
    let server = peers::python_server_modern_only().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let (session, _) = berth_tests::proxy::open_session_with(&url, "2025-11-25", json!({})).await;
    let call = berth_tests::proxy::call(json!(9), "greet", json!({}));
    let reply = tokio::time::timeout(
        Duration::from_secs(20),
        berth_tests::proxy::post_raw(&url, Some(&session), &call),
    )
    .await
    .expect("answered, not hung");
    let last = reply.last();
    assert_eq!(last["id"], json!(9), "{reply:?}");
    assert_eq!(last["error"]["code"], json!(-32021), "{reply:?}");
    assert!(
        last["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{reply:?}"
    );
    let (session, _) =
        berth_tests::proxy::open_session_with(&url, "2025-11-25", json!({"elicitation": {}})).await;
    let json_only = berth_tests::proxy::post_with(
        &url,
        Some(&session),
        &[("accept", "application/json")],
        &berth_tests::proxy::call(json!(10), "greet", json!({})),
    )
    .await;
    assert_eq!(json_only.last()["id"], json!(10), "{json_only:?}");
    assert!(
        json_only.last()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("only JSON")),
        "{json_only:?}"
    );
    assert_eq!(
        json_only.last()["error"]["data"]["outcome"],
        json!("rejected"),
        "{json_only:?}"
    );
    let metrics = scrape(&proxy).await;
    let refused = r#"berth_proxy_bridged_server_requests_total{direction="to_legacy_client",result="refused"}"#;
    assert_eq!(sample(&metrics, refused), 1.0, "{metrics}");
    proxy.shutdown().await;
}

/// The Python SDK stdio server, both strategies: the proxy's probe finds it modern and the
/// legacy client's calls go to it in the modern form (the SDK's stdio server holds to the era of
/// its first message, so a call that arrived in the legacy form would be refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_client_uses_a_modern_stdio_upstream_shared_and_per_client() {
    let python = peers::python_interpreter();
    let script = berth_tests::repo_root().join("tests/peers/python/stdio_server.py");
    for strategy in [SessionStrategy::Shared, SessionStrategy::PerClient] {
        let command = vec![python.display().to_string(), script.display().to_string()];
        let proxy = stdio::start(&stdio::config(command, strategy), &[]).await;
        wait_ready(&proxy, Duration::from_secs(30)).await;
        let state = upstream_state(&proxy).await;
        assert_eq!(state["era"], json!("modern"), "{strategy:?}: {state}");
        let client = rmcp_client::connect(&mcp_url(&proxy)).await;
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().any(|t| t.name == "echo"),
            "{strategy:?}: {tools:?}"
        );
        let echo = rmcp_client::call_tool(&client, "echo", json!({"message": "stdio"})).await;
        let content = serde_json::to_value(&echo.content).expect("content json");
        assert_eq!(content[0]["text"], json!("Echo: stdio"), "{strategy:?}");
        client.cancel().await.expect("client closes");
        proxy.shutdown().await;
    }
}

/// MRTR bridged for a modern client: the Node reference server (legacy only) asks for an
/// elicitation mid-call; the proxy parks the call and answers the modern Python SDK client with
/// an `input_required` result; the client's retry carries the answer, which goes upstream under
/// the upstream's request id, and the retry gets the tool's result. A legacy client through the
/// same proxy is asked the same elicitation as a server request, as before.
#[tokio::test]
async fn server_request_of_a_legacy_upstream_reaches_a_modern_client_as_input_required() {
    let python = peers::python_interpreter();
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let tool = "trigger-elicitation-request";
    let modern_args = [url.as_str(), MODERN, "Ada", tool];
    let legacy_args = [url.as_str(), "legacy", "Grace", tool];
    let (modern, legacy) = tokio::join!(
        run_client(&python, "elicit_sdk.py", &modern_args),
        run_client(&python, "elicit_sdk.py", &legacy_args),
    );
    assert_eq!(modern["protocol_version"], json!(MODERN), "{modern}");
    assert_eq!(modern["is_error"], json!(false), "{modern}");
    assert!(
        modern["text"]
            .as_str()
            .is_some_and(|t| t.contains("- Name: Ada")),
        "{modern}"
    );
    assert_eq!(modern["elicitations"].as_array().map(Vec::len), Some(1));
    assert!(
        legacy["text"]
            .as_str()
            .is_some_and(|t| t.contains("- Name: Grace")),
        "{legacy}"
    );
    let metrics = scrape(&proxy).await;
    let asked =
        r#"berth_proxy_bridged_server_requests_total{direction="to_modern_client",result="asked"}"#;
    let answered = r#"berth_proxy_bridged_server_requests_total{direction="to_modern_client",result="answered"}"#;
    assert_eq!(sample(&metrics, asked), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, answered), 1.0, "{metrics}");
    assert_eq!(proxy.engine.parked.len(), 0, "nothing left parked");
    proxy.shutdown().await;
}

/// A retry whose `requestState` the proxy does not hold (made up, or used already) is refused
/// with -32602 under its id, and nothing reaches the upstream for it.
#[tokio::test]
async fn retry_with_an_unknown_request_state_is_refused() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"message": "x"},
        "requestState": "berth-mrtr:00000000000000000000000000000000",
        "inputResponses": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }});
    let reply = berth_tests::proxy::post_with(
        &mcp_url(&proxy),
        None,
        &[
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ],
        &body.to_string(),
    )
    .await;
    let last = reply.last();
    assert_eq!(last["id"], json!(5), "{reply:?}");
    assert_eq!(last["error"]["code"], json!(-32602), "{reply:?}");
    assert_eq!(
        last["error"]["data"]["outcome"],
        json!("rejected"),
        "{reply:?}"
    );
    proxy.shutdown().await;
}

/// A legacy client's `resources/subscribe` over a modern upstream (which has none): the proxy
/// holds a `subscriptions/listen` stream on the upstream with the subscribed URIs, and the
/// upstream's `notifications/resources/updated` reaches the subscribed client's GET stream,
/// and only that client's.
#[tokio::test]
async fn legacy_resource_subscription_rides_the_proxys_listen_stream_on_a_modern_upstream() {
    let server = peers::python_server_modern_only().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let subscriber = berth_tests::proxy::open_session(&url).await;
    let bystander = berth_tests::proxy::open_session(&url).await;
    let mut subscriber_stream = berth_tests::proxy::open_get_stream(&url, &subscriber).await;
    let mut bystander_stream = berth_tests::proxy::open_get_stream(&url, &bystander).await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
        "params": {"uri": "berth://note"}});
    let reply = berth_tests::proxy::post_raw(&url, Some(&subscriber), &subscribe.to_string()).await;
    assert_eq!(reply.last()["result"], json!({}), "{reply:?}");
    // The listen stream is re-opened with the URI; touch until the update arrives.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let update = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no resource update reached the subscriber"
        );
        let call = berth_tests::proxy::call(json!(3), "touch", json!({"uri": "berth://note"}));
        let touched = berth_tests::proxy::post_raw(&url, Some(&subscriber), &call).await;
        assert!(touched.last()["result"].is_object(), "{touched:?}");
        let next = tokio::time::timeout(Duration::from_millis(500), subscriber_stream.recv()).await;
        if let Ok(Some(message)) = next
            && message["method"] == json!("notifications/resources/updated")
        {
            break message;
        }
    };
    assert_eq!(update["params"]["uri"], json!("berth://note"));
    let leaked = tokio::time::timeout(Duration::from_millis(500), async {
        while let Some(message) = bystander_stream.recv().await {
            if message["method"] == json!("notifications/resources/updated") {
                return Some(message);
            }
        }
        None
    })
    .await;
    assert!(
        !matches!(leaked, Ok(Some(_))),
        "an unsubscribed client got the update: {leaked:?}"
    );
    proxy.shutdown().await;
}
