//! The `PerClient` strategy for HTTP upstreams against the fault upstream: one upstream session
//! per client session, opened with the client's own handshake, closed with it, capped.

use std::time::{Duration, Instant};

use berth_crds::{DurationString, SessionStrategy};
use berth_proxy::RunningProxy;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{call, config, mcp_url, open_session_with, post_raw, start_ready};
use serde_json::{Value, json};

async fn per_client_proxy(upstream: &FaultUpstream, max_sessions: u32, idle: &str) -> RunningProxy {
    let mut cfg = config(&upstream.url, "10s");
    cfg.session.strategy = SessionStrategy::PerClient;
    cfg.session.max_sessions = max_sessions;
    cfg.session.idle_timeout = DurationString::new(idle);
    start_ready(&cfg).await
}

fn initialize_params(upstream: &FaultUpstream) -> Vec<Value> {
    upstream
        .received()
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("initialize"))
        .map(|r| {
            assert!(r.session.is_none(), "initialize never carries a session id");
            r.message["params"].clone()
        })
        .collect()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn per_client_each_client_gets_its_own_upstream_session_and_handshake() {
    let upstream = FaultUpstream::start().await;
    let proxy = per_client_proxy(&upstream, 16, "30m").await;
    let url = mcp_url(&proxy);
    let probe_sessions = upstream.initializes();
    let (a, _) = open_session_with(&url, "2025-06-18", json!({"roots": {}})).await;
    let (b, result_b) = open_session_with(&url, "2025-03-26", json!({})).await;
    assert_eq!(upstream.initializes(), probe_sessions + 2);
    assert_eq!(
        result_b["protocolVersion"],
        json!("2025-03-26"),
        "the client's own negotiation"
    );
    let params = initialize_params(&upstream);
    assert_eq!(
        params[params.len() - 2]["capabilities"],
        json!({"roots": {}})
    );
    assert_eq!(
        params[params.len() - 1]["protocolVersion"],
        json!("2025-03-26")
    );
    post_raw(
        &url,
        Some(&a),
        &call(json!(1), "echo", json!({"message": "a"})),
    )
    .await;
    post_raw(
        &url,
        Some(&b),
        &call(json!(1), "echo", json!({"message": "b"})),
    )
    .await;
    let call_sessions: std::collections::HashSet<_> = upstream
        .received()
        .into_iter()
        .filter(|r| r.method.as_deref() == Some("tools/call"))
        .filter_map(|r| r.session)
        .collect();
    assert_eq!(call_sessions.len(), 2, "one upstream session per client");
    proxy.shutdown().await;
}

#[tokio::test]
async fn per_client_delete_and_idle_expiry_close_the_upstream_session() {
    let upstream = FaultUpstream::start().await;
    let proxy = per_client_proxy(&upstream, 16, "1s").await;
    let url = mcp_url(&proxy);
    let (a, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    let deleted = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &a)
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success());
    eventually("the upstream DELETE after the client's", || {
        upstream.deletes() == 1
    })
    .await;
    let (_b, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    eventually("the upstream DELETE after idle expiry", || {
        upstream.deletes() == 2
    })
    .await;
    proxy.shutdown().await;
}

/// At `session.maxSessions`, a new client ends the least recently active idle session (its
/// next request gets 404 and its upstream session is ended), counted; the suite's client, like
/// most, never sends DELETE, and from the 17th session on every `initialize` got 503 for the
/// whole idle timeout (issue 13). Only when every session is busy is a new one refused, with a
/// clear error under its id.
#[tokio::test]
async fn per_client_at_max_sessions_ends_the_least_recently_active_idle_session() {
    let upstream = FaultUpstream::start().await;
    let proxy = per_client_proxy(&upstream, 2, "30m").await;
    let url = mcp_url(&proxy);
    let (oldest, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    let (recent, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    let echo_a = call(json!(2), "echo", json!({"message": "a"}));
    assert_eq!(post_raw(&url, Some(&oldest), &echo_a).await.status, 200);
    // `oldest` was used last: `recent` is now the least recently active.
    let (newest, _) = open_session_with(&url, "2025-06-18", json!({})).await;
    let echo_b = call(json!(3), "echo", json!({"message": "b"}));
    let status = |reply: berth_tests::proxy::RawReply| reply.status;
    assert_eq!(
        status(post_raw(&url, Some(&recent), &echo_b).await),
        404,
        "the evicted session is gone"
    );
    assert_eq!(status(post_raw(&url, Some(&oldest), &echo_b).await), 200);
    assert_eq!(status(post_raw(&url, Some(&newest), &echo_b).await), 200);
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    assert_eq!(
        berth_tests::proxy::sample(&metrics, "berth_proxy_downstream_sessions_evicted_total"),
        1.0
    );
    eventually("the evicted session's upstream DELETE", || {
        upstream.deletes() == 1
    })
    .await;

    // Both sessions busy (a slow call in flight on each): a third client is refused.
    let slow = |session: String| {
        let url = url.clone();
        tokio::spawn(async move {
            post_raw(
                &url,
                Some(&session),
                &call(json!(9), "slow", json!({"ms": 1500})),
            )
            .await
        })
    };
    let calls = [slow(oldest), slow(newest)];
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let init = json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let reply = post_raw(&url, None, &init.to_string()).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.last()["id"], json!(7));
    assert_eq!(
        reply.last()["error"]["code"],
        json!(berth_proxy::wire::jsonrpc::SESSION_LIMIT)
    );
    for call in calls {
        assert_eq!(
            call.await.expect("slow call").status,
            200,
            "busy sessions kept"
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn br_03_per_client_expiry_replays_handshake_with_the_clients_own_params() {
    let upstream = FaultUpstream::start().await;
    let proxy = per_client_proxy(&upstream, 16, "30m").await;
    let url = mcp_url(&proxy);
    let capabilities = json!({"sampling": {}, "experimental": {"berth-test": {}}});
    let (session, _) = open_session_with(&url, "2025-03-26", capabilities.clone()).await;
    upstream.update(|f| f.expire_after_calls = Some(1));
    let first = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "n1"})),
    )
    .await;
    assert_eq!(first.last()["result"]["content"][0]["text"], json!("n1"));
    upstream.update(|f| f.expire_after_calls = None);
    let second = post_raw(
        &url,
        Some(&session),
        &call(json!(3), "echo", json!({"message": "n2"})),
    )
    .await;
    assert_eq!(second.last()["id"], json!(3));
    assert_eq!(
        second.last()["result"]["content"][0]["text"],
        json!("n2"),
        "{second:?}"
    );
    let params = initialize_params(&upstream);
    let replayed = params.last().expect("replayed initialize");
    assert_eq!(replayed["protocolVersion"], json!("2025-03-26"));
    assert_eq!(replayed["capabilities"], capabilities);
    assert_eq!(replayed["clientInfo"]["name"], json!("berth-tests"));
    proxy.shutdown().await;
}
