//! Issue 39, item 5: the session table is bounded. Under `Shared`, a flood of `initialize`
//! without DELETE used to keep every session (20,000 kept 20,001); now the table stays at
//! `session.maxSharedSessions`, the least recently active idle session makes room, a busy one
//! (an open stream) is never ended for it, and when every session is busy the `initialize` is
//! refused with a JSON-RPC error naming the field.

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    config, mcp_url, open_get_stream, open_session, post_raw, sample, scrape, start_ready,
};
use serde_json::json;

const CAP: u32 = 8;

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 41, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "flood", "version": "0"}}})
    .to_string()
}

#[tokio::test]
async fn shared_sessions_initialize_flood_keeps_the_table_at_its_cap_and_ends_idle_ones_first() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "30s");
    cfg.session.max_shared_sessions = CAP;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);

    // One busy session: its standalone stream is open for the whole flood.
    let busy = open_session(&url).await;
    let _stream = open_get_stream(&url, &busy).await;
    let first_idle = open_session(&url).await;
    for _ in 0..200 {
        let reply = post_raw(&url, None, &initialize()).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_downstream_sessions"),
        f64::from(CAP),
        "the table stays at session.maxSharedSessions: {metrics}"
    );
    assert!(
        sample(&metrics, "berth_proxy_downstream_sessions_evicted_total") >= 194.0,
        "{metrics}"
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let gone = post_raw(&url, Some(&first_idle), &list).await;
    assert_eq!(
        gone.status, 404,
        "the oldest idle session made room: {gone:?}"
    );
    let kept = post_raw(&url, Some(&busy), &list).await;
    assert_eq!(
        kept.status, 200,
        "a session with an open stream is never ended: {kept:?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn shared_sessions_all_busy_at_the_cap_refuse_initialize_naming_the_field() {
    let upstream = FaultUpstream::builder().start().await;
    let mut cfg = config(&upstream.url, "30s");
    cfg.session.max_shared_sessions = 2;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let mut streams = Vec::new();
    for _ in 0..2 {
        let session = open_session(&url).await;
        streams.push(open_get_stream(&url, &session).await);
    }
    let refused = post_raw(&url, None, &initialize()).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    let body = refused.last();
    assert_eq!(body["id"], json!(41), "{body}");
    assert_eq!(
        body["error"]["data"]["limit"],
        json!("maxSharedSessions"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("session.maxSharedSessions")),
        "{body}"
    );
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_session_limit_refusals_total{limit="maxSharedSessions"}"#
        ),
        1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

/// Issue 39, item 5: room under the cap is reserved while a `PerClient` handshake is under
/// way. Before, 24 concurrent `initialize`s each passed the check before any session existed
/// (every upstream handshake takes 1.5 s here) and all 24 opened an upstream session under a
/// cap of 4; now 4 are opened and the rest are refused at once, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_concurrent_initialize_flood_opens_no_more_upstream_sessions_than_the_cap() {
    let upstream = FaultUpstream::builder()
        .faults(berth_tests::fault::Faults {
            handshake_delay: std::time::Duration::from_millis(1500),
            ..Default::default()
        })
        .start()
        .await;
    let mut cfg = config(&upstream.url, "30s");
    cfg.session.strategy = berth_crds::SessionStrategy::PerClient;
    cfg.session.max_sessions = 4;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let before = upstream.count("initialize");
    let flood: Vec<_> = (0..24)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { post_raw(&url, None, &initialize()).await })
        })
        .collect();
    let mut opened = 0;
    for reply in flood {
        let reply = reply.await.expect("the initialize task");
        match reply.status {
            200 => opened += 1,
            503 => assert_eq!(
                reply.last()["error"]["data"]["limit"],
                json!("maxSessions"),
                "{reply:?}"
            ),
            _ => panic!("{reply:?}"),
        }
    }
    assert_eq!(opened, 4, "as many sessions as the cap");
    assert_eq!(
        upstream.count("initialize") - before,
        4,
        "no upstream handshake past the cap"
    );
    proxy.shutdown().await;
}
