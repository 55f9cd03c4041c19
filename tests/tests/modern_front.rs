//! Issue 13: MCP 2026-07-28 clients (no session, the revision in every request's `_meta`)
//! through the proxy to legacy upstreams, beside legacy clients on the same endpoint.
//!
//! The clients are the Python SDK's (mcp 2.x, `tests/peers/clients/modern_sdk.py`) in its
//! modern-only and auto modes, and rmcp's in its `server/discover` lifecycle; the upstreams are the Node reference server over HTTP, the
//! fault fixture (to see what reached the upstream byte for byte) and the Node reference server over stdio.

use berth_crds::SessionStrategy;
use berth_tests::fault::{Capabilities, FaultUpstream};
use berth_tests::peers::{self, run_client};
use berth_tests::proxy::{config, mcp_url, post_stream_with, post_with, start_ready};
use berth_tests::{rmcp_client, stdio, tap};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

/// A modern request's headers for `method` (and `name`: the tool, prompt or resource URI).
fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    if let Some(name) = name {
        headers.push(("mcp-name", name));
    }
    headers
}

/// A modern `tools/call` of `echo`'s headers.
const ECHO_CALL: &[(&str, &str)] = &[
    ("mcp-protocol-version", MODERN),
    ("mcp-method", "tools/call"),
    ("mcp-name", "echo"),
];

/// A modern request body: `params` with the required per-request `_meta` fields added.
fn modern_body(id: impl Into<Value>, method: &str, mut params: Value) -> String {
    let id = id.into();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "berth-tests", "version": "0"},
        "progressToken": "keep-me",
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A request the proxy must refuse: what it lacks, its headers, its body, the JSON-RPC code.
type Refused<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, i64);

/// The Python SDK's modern-only client and its auto mode (which probes `server/discover`)
/// both use the Node reference server (legacy only) through a `Shared` proxy, at the same
/// time as a legacy client of the same SDK; every request of theirs goes over the one upstream
/// session, and the upstream never sees the modern client's hop fields.
#[tokio::test]
async fn modern_python_sdk_clients_use_a_legacy_upstream_beside_a_legacy_client() {
    let python = peers::python_interpreter();
    let server = peers::everything().await;
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let url = mcp_url(&proxy);
    let before = tap.record.entries().len();
    let (modern_args, auto_args, legacy_args) = (
        [url.as_str(), MODERN],
        [url.as_str(), "auto"],
        [url.as_str(), "legacy"],
    );
    let (modern, auto, legacy) = tokio::join!(
        run_client(&python, "modern_sdk.py", &modern_args),
        run_client(&python, "modern_sdk.py", &auto_args),
        run_client(&python, "modern_sdk.py", &legacy_args),
    );
    for (mode, report) in [("modern", &modern), ("auto", &auto)] {
        assert_eq!(
            report["protocol_version"],
            json!(MODERN),
            "{mode}: {report}"
        );
        assert_eq!(
            report["echo"],
            json!(["Echo: modern 0", "Echo: modern 1"]),
            "{mode}: {report}"
        );
        assert!(
            report["tools"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("echo"))),
            "{mode}: {report}"
        );
    }
    assert_eq!(
        auto["server_name"], legacy["server_name"],
        "discover names the upstream as its handshake does"
    );
    assert_ne!(legacy["protocol_version"], json!(MODERN), "{legacy}");
    assert_eq!(legacy["echo"], modern["echo"]);
    let upstream_sessions: std::collections::BTreeSet<_> = tap.record.entries()[before..]
        .iter()
        .filter_map(|(_, session)| session.clone())
        .collect();
    assert_eq!(
        upstream_sessions.len(),
        1,
        "every request went over the one upstream session: {upstream_sessions:?}"
    );
    assert_eq!(
        tap.record.count("initialize"),
        1,
        "only the proxy's own handshake"
    );
    proxy.shutdown().await;
}

/// rmcp's modern client (2026-07-28 `server/discover` lifecycle, no session) uses the Node
/// reference server, which speaks only the legacy revisions, through a `Shared` proxy: it is
/// told 2026-07-28 and the upstream's name, lists and calls tools over the proxy's one upstream
/// session, and the proxy counts its requests as `era="modern"`.
#[tokio::test]
async fn modern_rmcp_client_uses_the_node_reference_server_through_the_proxy() {
    let server = peers::everything().await;
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let client = rmcp_client::connect_modern(&mcp_url(&proxy)).await;
    let info = client.peer_info().expect("discover result kept");
    assert_eq!(info.protocol_version.as_str(), MODERN, "{info:?}");
    let name = info.server_info.as_ref().map(|i| i.name.clone());
    assert!(
        name.as_deref().is_some_and(|n| n.contains("everything")),
        "the upstream's own name: {info:?}"
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let result = rmcp_client::call_tool(&client, "echo", json!({"message": "rmcp modern"})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = serde_json::to_value(&result.content).expect("content serializes");
    assert_eq!(text[0]["text"], json!("Echo: rmcp modern"), "{result:?}");
    let _ = client.cancel().await;
    let sessions: std::collections::BTreeSet<_> = tap
        .record
        .entries()
        .iter()
        .filter_map(|(_, session)| session.clone())
        .collect();
    assert_eq!(sessions.len(), 1, "one upstream session: {sessions:?}");
    assert_eq!(tap.record.count("initialize"), 1, "the proxy's own only");
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    for method in ["server/discover", "tools/list", "tools/call"] {
        let series =
            format!(r#"berth_proxy_requests_total{{era="modern",method="{method}",outcome="ok"}}"#);
        assert!(
            berth_tests::proxy::sample(&metrics, &series) >= 1.0,
            "{series} in:\n{metrics}"
        );
    }
    proxy.shutdown().await;
}

/// What the upstream receives for a modern request: the client's hop fields removed from
/// `_meta`, everything else (progress token, arguments) as sent; what the client receives: a
/// result with `resultType`, its id, and the upstream's `serverInfo`.
#[tokio::test]
async fn modern_request_reaches_a_legacy_upstream_without_its_hop_fields_and_returns_shaped() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let from = upstream.received_count();
    let body = modern_body(
        7,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "big 12345678901234567890"}}),
    );
    let reply = post_with(&mcp_url(&proxy), None, ECHO_CALL, &body).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let result = &reply.last()["result"];
    assert_eq!(reply.last()["id"], json!(7));
    assert_eq!(result["resultType"], json!("complete"), "{result}");
    assert!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"].is_object(),
        "{result}"
    );
    let forwarded: Vec<_> = upstream
        .received_since(from)
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .collect();
    assert_eq!(forwarded.len(), 1, "{forwarded:?}");
    let sent = &forwarded[0];
    assert_eq!(
        sent.message["params"]["_meta"],
        json!({"progressToken": sent.message["params"]["_meta"]["progressToken"]}),
        "only the (rewritten) progress token is left: {}",
        sent.raw
    );
    assert!(
        sent.raw
            .contains(r#""arguments":{"message":"big 12345678901234567890"}"#),
        "{}",
        sent.raw
    );
    assert!(sent.session.is_some(), "on the proxy's upstream session");
    proxy.shutdown().await;
}

/// Found by a new user: a modern client's vendor `_meta` members reached a legacy upstream
/// changed, because the proxy re-serialized `_meta` from its parsed view when it removed the hop
/// fields: `1.50` as `1.5`, `"\u00e9"` as `"é"`, a lone surrogate as `null`, deep nesting cut
/// to `[null]`. Now only the hop fields are removed and the progress token rewritten.
#[tokio::test]
async fn modern_request_meta_reaches_a_legacy_upstream_as_the_client_wrote_it() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let from = upstream.received_count();
    let vendor = format!(
        r#""com.x/v" : 1.50,"com.x/e":"\u00e9","com.x/s":"\ud800","\udc00":1,"com.x/d":{}1{}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"m"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}},{vendor},"progressToken":"p8"}}}}}}"#
    );
    let reply = post_with(&mcp_url(&proxy), None, ECHO_CALL, &body).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.last()["id"], json!(8));
    let sent = upstream
        .received_since(from)
        .into_iter()
        .find(|r| r.method.as_deref() == Some("tools/call"))
        .expect("the call reached the upstream");
    let token = sent.message["params"]["_meta"]["progressToken"]
        .as_str()
        .expect("a rewritten token")
        .to_owned();
    assert!(
        sent.raw.contains(&format!(
            r#""_meta":{{{vendor},"progressToken":"{token}"}}"#
        )),
        "{}",
        sent.raw
    );
    proxy.shutdown().await;
}

/// SEP-2243 custom headers in front of a legacy upstream (which would never look at them):
/// the proxy learned from the tool listing that `route`'s `region` argument is mirrored in
/// `Mcp-Param-Region`, so a call whose header is missing, undecodable or different is refused
/// with 400 / -32020 under its id and reaches nothing, and a call that mirrors it (plainly or
/// base64-encoded) is forwarded.
#[tokio::test]
async fn modern_call_whose_param_header_differs_from_its_argument_is_refused_before_the_upstream() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.add_tool(json!({"name": "route", "inputSchema": {"type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}}));
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let from = upstream.received_count();
    let body = |id: i64| {
        modern_body(
            id,
            "tools/call",
            json!({"name": "route", "arguments": {"region": "Hello"}}),
        )
    };
    let header = |value| {
        let mut headers = modern_headers("tools/call", Some("route"));
        headers.push(("mcp-param-region", value));
        headers
    };
    let without = modern_headers("tools/call", Some("route"));
    for (id, headers) in [
        (1, without),
        (2, header("Goodbye")),
        (3, header("=?base64?SGVsbG8?=")),
    ] {
        let reply = post_with(&url, None, &headers, &body(id)).await;
        assert_eq!(reply.status, 400, "{id}: {reply:?}");
        assert_eq!(reply.last()["id"], json!(id), "{reply:?}");
        assert_eq!(reply.last()["error"]["code"], json!(-32020), "{reply:?}");
    }
    assert_eq!(
        upstream
            .received_since(from)
            .iter()
            .filter(|r| r.method.as_deref() == Some("tools/call"))
            .count(),
        0,
        "no refused call reached the upstream"
    );
    for (id, value) in [(4, "Hello"), (5, "=?base64?SGVsbG8=?=")] {
        let reply = post_with(&url, None, &header(value), &body(id)).await;
        assert_eq!(reply.status, 200, "{id}: {reply:?}");
        assert!(reply.last()["result"].is_object(), "{reply:?}");
    }
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    assert_eq!(
        berth_tests::proxy::sample(
            &metrics,
            r#"berth_proxy_invalid_messages_total{reason="header_mismatch"}"#
        ),
        3.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

/// BR-22: a session-less request never reaches a stateful upstream without a handshake. Now
/// that the proxy serves the revision, a complete one is answered over the proxy's own
/// upstream session; an incomplete one gets 400 with the code the revision names (-32602 for a
/// missing `_meta` version, -32020 for a missing or differing header, -32022 with `supported`
/// and `requested` for a revision it does not serve), under its request id, and reaches
/// nothing.
#[tokio::test]
async fn br_22_session_less_client_is_served_over_the_proxys_own_session_or_refused_clearly() {
    let server = peers::everything().await;
    let tap = tap::start(&server.url).await;
    let proxy = start_ready(&config(&tap.url, "60s")).await;
    let url = mcp_url(&proxy);
    let before = tap.record.entries().len();
    let list = modern_body(1, "tools/list", json!({}));
    let served = post_with(&url, None, &modern_headers("tools/list", None), &list).await;
    assert_eq!(served.status, 200, "{served:?}");
    assert!(served.last()["result"]["tools"].is_array(), "{served:?}");
    assert_eq!(served.last()["result"]["resultType"], json!("complete"));
    assert_eq!(served.last()["result"]["ttlMs"], json!(0));
    let entries = tap.record.entries()[before..].to_vec();
    assert!(
        entries
            .iter()
            .any(|(method, session)| method == "tools/list" && session.is_some()),
        "forwarded with the proxy's Mcp-Session-Id: {entries:?}"
    );
    let before = tap.record.entries().len();
    let bare = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}).to_string();
    let future = list.replace(MODERN, "2099-01-01");
    let cases: [Refused; 4] = [
        (
            "header, no _meta",
            modern_headers("tools/list", None),
            &bare,
            -32602,
        ),
        (
            "_meta, no header",
            vec![("mcp-method", "tools/list")],
            &list,
            -32020,
        ),
        (
            "other method header",
            modern_headers("tools/call", None),
            &list,
            -32020,
        ),
        (
            "unserved revision",
            vec![
                ("mcp-protocol-version", "2099-01-01"),
                ("mcp-method", "tools/list"),
            ],
            &future,
            -32022,
        ),
    ];
    for (case, headers, body, code) in cases {
        let reply = post_with(&url, None, &headers, body).await;
        assert_eq!(reply.status, 400, "{case}: {reply:?}");
        let error = &reply.last()["error"];
        assert_eq!(error["code"], json!(code), "{case}: {reply:?}");
        assert_eq!(
            reply.last()["id"],
            serde_json::from_str::<Value>(body).expect("body")["id"]
        );
        if code == -32022 {
            assert_eq!(error["data"]["requested"], json!("2099-01-01"), "{case}");
            assert!(
                error["data"]["supported"]
                    .as_array()
                    .is_some_and(|v| v.contains(&json!(MODERN)) && v.contains(&json!("2025-06-18"))),
                "{case}: {error}"
            );
        }
    }
    let reached: Vec<_> = tap.record.entries()[before..]
        .iter()
        .filter(|(method, _)| method != "<response>")
        .cloned()
        .collect();
    assert_eq!(reached, vec![], "no refused request reached the upstream");
    proxy.shutdown().await;
}

/// Methods 2026-07-28 removed get 404 / -32601 and are never forwarded; `server/discover` is
/// answered from the upstream's handshake; a modern GET or DELETE gets 405; an `Mcp-Name` that
/// differs from the tool in the body (a header a gateway might route or authorize on) is
/// refused before anything runs.
#[tokio::test]
async fn modern_removed_methods_discover_get_and_a_lying_mcp_name() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let from = upstream.received_count();
    for (n, method) in [
        "ping",
        "logging/setLevel",
        "initialize",
        "resources/subscribe",
    ]
    .into_iter()
    .enumerate()
    {
        let body = modern_body(n as u64, method, json!({"level": "debug", "uri": "x:/y"}));
        let reply = post_with(&url, None, &modern_headers(method, None), &body).await;
        assert_eq!(reply.status, 404, "{method}: {reply:?}");
        assert_eq!(reply.last()["error"]["code"], json!(-32601), "{method}");
    }
    let discover = modern_body(9, "server/discover", json!({}));
    let reply = post_with(
        &url,
        None,
        &modern_headers("server/discover", None),
        &discover,
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let result = &reply.last()["result"];
    assert_eq!(result["supportedVersions"][0], json!(MODERN), "{result}");
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    let lying = modern_body(
        10,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    );
    let reply = post_with(
        &url,
        None,
        &modern_headers("tools/call", Some("read_only_tool")),
        &lying,
    )
    .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.last()["error"]["code"], json!(-32020));
    let reached: Vec<_> = upstream
        .received_since(from)
        .into_iter()
        .filter_map(|r| r.method)
        .filter(|m| !m.starts_with("tools/list") && m != "notifications/initialized")
        .collect();
    assert_eq!(
        reached,
        Vec::<String>::new(),
        "none of them reached the upstream"
    );
    let client = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let status = client
            .request(method.clone(), &url)
            .header("mcp-protocol-version", MODERN)
            .send()
            .await
            .expect("request")
            .status();
        assert_eq!(status.as_u16(), 405, "{method}");
    }
    let metrics = reqwest::get(format!("http://{}/metrics", proxy.admin_addr))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(
            r#"berth_proxy_requests_total{era="modern",method="server/discover",outcome="ok"} 1"#
        ),
        "{metrics}"
    );
    proxy.shutdown().await;
}

/// `PerClient`: a modern request has no session to hold an upstream session, so each gets one
/// of its own (opened with its client's capabilities and `clientInfo`) that is ended when its
/// answer is done: no client shares upstream state with another, and none is left open.
#[tokio::test]
async fn modern_per_client_request_gets_its_own_upstream_session_ended_after_it() {
    let python = peers::python_interpreter();
    let upstream = FaultUpstream::builder().start().await;
    let mut settings = config(&upstream.url, "10s");
    settings.session.strategy = SessionStrategy::PerClient;
    let proxy = start_ready(&settings).await;
    let issued = upstream.sessions_issued();
    let baseline = upstream.live_sessions().len();
    let report = run_client(&python, "modern_sdk.py", &[&mcp_url(&proxy), MODERN]).await;
    assert_eq!(report["echo"], json!(["modern 0", "modern 1"]), "{report}");
    assert_eq!(
        upstream.sessions_issued() - issued,
        3,
        "tools/list and two calls, one upstream session each"
    );
    let open = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while upstream.live_sessions().len() > baseline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    assert!(
        open.await.is_ok(),
        "every request's upstream session was ended: {:?}",
        upstream.live_sessions()
    );
    proxy.shutdown().await;
}

/// A legacy-only stdio upstream (the Node reference server in stdio mode) behind modern
/// clients, `Shared` and `PerClient`.
#[tokio::test]
async fn modern_client_uses_a_legacy_stdio_upstream_shared_and_per_client() {
    let python = peers::python_interpreter();
    let server = berth_tests::repo_root().join(
        "tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    for strategy in [SessionStrategy::Shared, SessionStrategy::PerClient] {
        let command = vec![
            "node".to_owned(),
            server.display().to_string(),
            "stdio".to_owned(),
        ];
        let proxy = stdio::start(&stdio::config(command, strategy), &[]).await;
        let report = run_client(&python, "modern_sdk.py", &[&mcp_url(&proxy), MODERN]).await;
        assert_eq!(
            report["protocol_version"],
            json!(MODERN),
            "{strategy:?}: {report}"
        );
        assert_eq!(
            report["echo"].as_array().map(Vec::len),
            Some(2),
            "{strategy:?}: {report}"
        );
        proxy.shutdown().await;
    }
}

/// `subscriptions/listen` over a legacy upstream: acknowledged first with the subset the
/// upstream supports, then only the notification types asked for, each tagged with the
/// subscription id; the listed resource is subscribed upstream and unsubscribed when the client
/// closes the stream.
#[tokio::test]
async fn modern_subscriptions_listen_carries_only_what_was_asked_tagged_with_its_id() {
    let upstream = FaultUpstream::builder()
        .capabilities(Capabilities {
            resources_subscribe: true,
            ..Capabilities::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let body = modern_body(
        "sub-1",
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["file:///watched"]}}),
    );
    let headers = modern_headers("subscriptions/listen", None);
    let (status, mut messages) = post_stream_with(&url, &headers, &body).await;
    assert_eq!(status, 200);
    let next = async |messages: &mut tokio::sync::mpsc::Receiver<Value>| {
        tokio::time::timeout(std::time::Duration::from_secs(5), messages.recv())
            .await
            .expect("a message in time")
            .expect("stream open")
    };
    let ack = next(&mut messages).await;
    assert_eq!(
        ack["method"],
        json!("notifications/subscriptions/acknowledged"),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!("sub-1")
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///watched"]}),
        "prompts are not offered by the upstream"
    );
    berth_tests::wait_for(
        "the upstream subscription",
        std::time::Duration::from_secs(5),
        || async { (upstream.count("resources/subscribe") == 1).then_some(()) },
    )
    .await;
    upstream.notify_resource_updated("file:///other");
    upstream.notify_resource_updated("file:///watched");
    let updated = next(&mut messages).await;
    assert_eq!(
        updated["method"],
        json!("notifications/resources/updated"),
        "{updated}"
    );
    assert_eq!(
        updated["params"]["uri"],
        json!("file:///watched"),
        "{updated}"
    );
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!("sub-1")
    );
    upstream.add_tool(json!({"name": "fresh", "inputSchema": {"type": "object"}}));
    let changed = next(&mut messages).await;
    assert_eq!(
        changed["method"],
        json!("notifications/tools/list_changed"),
        "{changed}"
    );
    // The client goes away; the proxy sees it when it next writes to the stream (a
    // notification, or its keep-alive comment every 15 s), so the upstream keeps sending.
    drop(messages);
    berth_tests::wait_for(
        "the upstream unsubscription",
        std::time::Duration::from_secs(10),
        || async {
            upstream.notify_tools_changed();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            (upstream.count("resources/unsubscribe") == 1).then_some(())
        },
    )
    .await;
    proxy.shutdown().await;
}
