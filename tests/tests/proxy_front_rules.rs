//! Streamable HTTP front rules, against the real Node reference server: session ids, missing
//! and unknown sessions, re-initialization, malformed bodies and batches.

use berth_tests::peers;
use berth_tests::proxy::{call, config, mcp_url, open_session, post_raw, post_with, start_ready};
use serde_json::json;

#[tokio::test]
async fn front_missing_session_on_non_initialize_is_400_with_id() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let reply = post_raw(
        &mcp_url(&proxy),
        None,
        &call(json!(3), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["id"], json!(3));
    assert_eq!(reply.last()["error"]["code"], json!(-32600));
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_02_unknown_or_deleted_session_is_404_on_post_get_delete() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let reply = post_raw(
        &url,
        Some("never-issued"),
        &call(json!(4), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.last()["id"], json!(4));
    let client = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let status = client
            .request(method.clone(), &url)
            .header("mcp-session-id", "never-issued")
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("request")
            .status();
        assert_eq!(status.as_u16(), 404, "{method}");
    }
    let session = open_session(&url).await;
    let deleted = client
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success());
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(5), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404, "deleted session is gone");
    assert_eq!(
        post_raw(&url, None, &init(9)).await.status,
        200,
        "a fresh initialize works"
    );
    proxy.shutdown().await;
}

fn init(id: i64) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}})
    .to_string()
}

#[tokio::test]
async fn br_01_reinitialize_on_live_session_is_400_with_id_and_session_survives() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(&url, Some(&session), &init(3)).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["id"], json!(3));
    assert_eq!(reply.last()["error"]["code"], json!(-32600));
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(4), "echo", json!({"message": "still"})),
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("Echo: still")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn front_malformed_json_is_parse_error_and_batch_is_invalid_request() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(&url, Some(&session), "{not json").await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["error"]["code"], json!(-32700));
    let ping = |id: i64| json!({"jsonrpc":"2.0","id":id,"method":"ping"});
    for body in [json!([ping(1), ping(2)]), json!([])] {
        let reply = post_raw(&url, Some(&session), &body.to_string()).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.last()["error"]["code"], json!(-32600));
    }
    let reply = post_raw(
        &url,
        Some(&session),
        &json!({"jsonrpc":"2.0","id":7,"method":5}).to_string(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["id"], json!(7), "invalid request keeps its id");
    let reply = post_raw(&url, Some(&session), &ping(8).to_string()).await;
    assert_eq!(
        reply.last()["id"],
        json!(8),
        "session still usable after bad input"
    );
    assert!(reply.last().get("result").is_some());
    proxy.shutdown().await;
}

#[tokio::test]
async fn front_non_object_params_are_invalid_params_and_never_reach_upstream() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let body = json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":["echo"]});
    let reply = post_raw(&url, Some(&session), &body.to_string()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["id"], json!(11));
    assert_eq!(reply.last()["error"]["code"], json!(-32602));
    let init =
        json!({"jsonrpc":"2.0","id":12,"method":"initialize","params":{"protocolVersion":5}});
    let reply = post_raw(&url, None, &init.to_string()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.last()["id"], json!(12));
    assert!(
        reply.session.is_none(),
        "no session for a malformed initialize"
    );
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    assert!(
        !metrics.contains("outcome=\"upstream_unavailable\""),
        "{metrics}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn front_oversized_body_and_wrong_media_types_get_json_rpc_errors() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let client = reqwest::Client::new();
    let send = |content_type: &'static str, accept: &'static str, body: Vec<u8>| {
        client
            .post(&url)
            .header("content-type", content_type)
            .header("accept", accept)
            .header("mcp-session-id", &session)
            .body(body)
            .send()
    };
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"})
        .to_string()
        .into_bytes();
    let limit = berth_crds::proxy_config::limits::LimitsSpec::default().max_request_bytes;
    let huge = vec![b' '; usize::try_from(limit).expect("fits") + 1];
    for (content_type, accept, body, status) in [
        (
            "application/json",
            "application/json, text/event-stream",
            huge,
            413,
        ),
        (
            "text/plain",
            "application/json, text/event-stream",
            ping.clone(),
            415,
        ),
        ("application/json", "text/html", ping.clone(), 406),
    ] {
        let response = send(content_type, accept, body).await.expect("post");
        assert_eq!(response.status().as_u16(), status);
        let error: serde_json::Value = response.json().await.expect("a JSON-RPC error body");
        assert_eq!(error["error"]["code"], json!(-32600), "{error}");
    }
    let ok = send(
        "application/json",
        "application/json, text/event-stream",
        ping,
    )
    .await
    .expect("post");
    assert_eq!(ok.status().as_u16(), 200, "the session still works");
    proxy.shutdown().await;
}

#[tokio::test]
async fn front_request_method_without_id_is_refused_and_never_reaches_upstream() {
    use berth_tests::fault::FaultUpstream;
    let upstream = FaultUpstream::builder().record(true).start().await;
    let mut cfg = config(&upstream.url, "60s");
    // `slow` is hidden: an id-less call must not be a way around the tool policy.
    cfg.tools.allow = Some(vec!["echo".to_owned()]);
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let before = upstream.received().len();
    for body in [
        json!({"jsonrpc":"2.0","method":"tools/call","params":{"name":"slow","arguments":{"ms":1}}}),
        json!({"jsonrpc":"2.0","method":"tools/list"}),
        json!({"jsonrpc":"2.0","method":"ping"}),
    ] {
        let reply = post_raw(&url, Some(&session), &body.to_string()).await;
        assert_eq!(reply.status, 400, "{body}: {reply:?}");
        assert_eq!(reply.last()["error"]["code"], json!(-32600));
        assert_eq!(reply.last()["id"], json!(null));
    }
    // A real notification still goes through.
    let progress = json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"});
    assert_eq!(
        post_raw(&url, Some(&session), &progress.to_string())
            .await
            .status,
        202
    );
    let forwarded: Vec<_> = upstream.received()[before..]
        .iter()
        .filter_map(|r| r.method.clone())
        .collect();
    assert_eq!(
        forwarded,
        ["notifications/roots/list_changed"],
        "nothing else reached the upstream"
    );
    assert_eq!(invalid_messages(&proxy, "request_without_id").await, 3.0);
    proxy.shutdown().await;
}

/// MCP 2025-06-18, "Protocol Version Header": a request on a live session whose
/// `MCP-Protocol-Version` names a revision the proxy does not serve is answered 400 (-32022,
/// the request id, the supported revisions) and never forwarded; a supported revision and an
/// absent header still work.
#[tokio::test]
async fn front_unsupported_protocol_version_header_on_a_live_session_is_400_and_never_forwarded() {
    use berth_tests::fault::FaultUpstream;
    let upstream = FaultUpstream::builder().record(true).start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let before = upstream.received().len();
    let echo = |id: u64| call(json!(id), "echo", json!({"message": "v"}));
    let header = |version| [("mcp-protocol-version", version)];
    let reply = post_with(&url, Some(&session), &header("1999-01-01"), &echo(41)).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    let reply = reply.last();
    assert_eq!(reply["id"], json!(41));
    assert_eq!(reply["error"]["code"], json!(-32022));
    assert_eq!(reply["error"]["data"]["requested"], json!("1999-01-01"));
    assert!(
        reply["error"]["data"]["supported"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2025-06-18")))
    );
    assert!(
        upstream.received()[before..]
            .iter()
            .all(|r| r.method.as_deref() != Some("tools/call")),
        "the refused call never reached the upstream"
    );
    let supported = post_with(&url, Some(&session), &header("2025-06-18"), &echo(42)).await;
    let absent = post_raw(&url, Some(&session), &echo(43)).await;
    for reply in [supported, absent] {
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(reply.last().get("result").is_some(), "{reply:?}");
    }
    assert_eq!(invalid_messages(&proxy, "protocol_version").await, 1.0);
    proxy.shutdown().await;
}

/// `berth_proxy_invalid_messages_total{reason}` of `proxy`.
async fn invalid_messages(proxy: &berth_proxy::RunningProxy, reason: &str) -> f64 {
    let metrics = berth_tests::proxy::scrape(proxy).await;
    let series = format!("berth_proxy_invalid_messages_total{{reason=\"{reason}\"}}");
    berth_tests::proxy::sample(&metrics, &series)
}

/// A message that is both request and response (`method` with `result`/`error`), or a
/// `notifications/*` method carrying an id, is refused with 400/-32600 under its id and never
/// forwarded: a forwarded `notifications/cancelled` with an id would carry a raw upstream
/// request id, possibly another client's.
#[tokio::test]
async fn front_request_response_hybrids_and_notifications_with_ids_are_refused_never_forwarded() {
    use berth_tests::fault::FaultUpstream;
    let upstream = FaultUpstream::builder().record(true).start().await;
    let proxy = start_ready(&config(&upstream.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let before = upstream.received().len();
    for body in [
        json!({"jsonrpc":"2.0","id":5,"method":"ping","result":{}}),
        json!({"jsonrpc":"2.0","id":5,"method":"ping","error":{"code":1,"message":"x"}}),
        json!({"jsonrpc":"2.0","id":5,"method":"notifications/cancelled","params":{"requestId":1}}),
    ] {
        let reply = post_raw(&url, Some(&session), &body.to_string()).await;
        assert_eq!(reply.status, 400, "{body}: {reply:?}");
        assert_eq!(reply.last()["id"], json!(5), "{body}: {reply:?}");
        assert_eq!(reply.last()["error"]["code"], json!(-32600), "{body}");
    }
    assert_eq!(
        upstream.received().len(),
        before,
        "nothing reached the upstream"
    );
    assert_eq!(invalid_messages(&proxy, "shape").await, 3.0);
    proxy.shutdown().await;
}

/// `HEAD /mcp` gets 405 and leaves the session's open standalone GET stream in place: a HEAD
/// probe used to be served as a GET and replace that stream, so later notifications were lost.
#[tokio::test]
async fn front_head_is_405_and_does_not_replace_the_standalone_stream() {
    let server = peers::everything().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let mut stream = berth_tests::proxy::open_get_stream(&url, &session).await;
    let head = reqwest::Client::new()
        .head(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("head");
    assert_eq!(head.status().as_u16(), 405);
    // The original stream is still open: it does not end (server notifications may arrive).
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(700);
    while let Ok(next) = tokio::time::timeout_at(until, stream.recv()).await {
        assert!(next.is_some(), "the standalone stream was ended");
    }
    proxy.shutdown().await;
}
