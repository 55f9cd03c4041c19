//! Issue 39, item 4: one `subscriptions/listen` does not fan out without bound. A listen naming
//! more resource URIs than `limits.maxListenUris` is refused at once, naming the limit, with
//! nothing subscribed upstream; a listen within it subscribes upstream with at most
//! `limits.maxProxyRequestsInFlight` of the proxy's own requests in flight at once; a legacy
//! client's `resources/subscribe` past `limits.maxSubscriptionsPerSession` is refused.

use std::time::{Duration, Instant};

use berth_tests::fault::{Capabilities, FaultUpstream};
use berth_tests::proxy::{
    config, mcp_url, open_session, post_raw, post_stream_with, post_with, sample, scrape,
    start_ready,
};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

fn listen_body(id: &str, uris: &[String]) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "notifications": {"resourceSubscriptions": uris},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "berth-tests", "version": "0"},
        },
    }})
    .to_string()
}

const LISTEN_HEADERS: &[(&str, &str)] = &[
    ("mcp-protocol-version", MODERN),
    ("mcp-method", "subscriptions/listen"),
];

fn uris(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("file:///r/{n}")).collect()
}

async fn subscribing_upstream() -> FaultUpstream {
    FaultUpstream::builder()
        .capabilities(Capabilities {
            resources_subscribe: true,
            ..Capabilities::default()
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_of_20000_uris_is_refused_at_once_naming_the_limit_and_subscribes_nothing() {
    let upstream = subscribing_upstream().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let started = Instant::now();
    let reply = post_with(
        &mcp_url(&proxy),
        None,
        LISTEN_HEADERS,
        &listen_body("big", &uris(20_000)),
    )
    .await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    let error = &reply.last()["error"];
    assert_eq!(reply.last()["id"], json!("big"), "{reply:?}");
    assert_eq!(error["code"], json!(-32602), "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limits.maxListenUris") && message.contains("256"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(upstream.count("resources/subscribe"), 0);
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_subscriptions_refused_total{limit="max_listen_uris"}"#
        ),
        1.0
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_within_the_limit_subscribes_with_at_most_the_in_flight_cap_at_once() {
    let upstream = subscribing_upstream().await;
    upstream.update(|f| f.subscribe_delay = Duration::from_millis(20));
    let mut cfg = config(&upstream.url, "10s");
    cfg.limits.max_proxy_requests_in_flight = 4;
    let proxy = start_ready(&cfg).await;
    let (status, mut messages) = post_stream_with(
        &mcp_url(&proxy),
        LISTEN_HEADERS,
        &listen_body("ok", &uris(64)),
    )
    .await;
    assert_eq!(status, 200);
    let ack: Value = tokio::time::timeout(Duration::from_secs(5), messages.recv())
        .await
        .expect("acknowledged in time")
        .expect("stream open");
    assert_eq!(
        ack["method"],
        json!("notifications/subscriptions/acknowledged")
    );
    berth_tests::wait_for(
        "every upstream subscription",
        Duration::from_secs(20),
        || async { (upstream.count("resources/subscribe") == 64).then_some(()) },
    )
    .await;
    let most = upstream.most_subscribes_at_once();
    assert!(
        (1..=4).contains(&most),
        "{most} subscribes in flight at once"
    );
    drop(messages);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_past_the_session_limit_is_refused_naming_it() {
    let upstream = subscribing_upstream().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.limits.max_subscriptions_per_session = 2;
    cfg.limits.max_listen_uris = 2;
    let proxy = start_ready(&cfg).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let subscribe = |id: u64, uri: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe",
            "params": {"uri": uri}})
        .to_string()
    };
    for (id, uri) in [(2, "file:///a"), (3, "file:///b")] {
        let reply = post_raw(&url, Some(&session), &subscribe(id, uri)).await;
        assert!(reply.last()["result"].is_object(), "{reply:?}");
    }
    let reply = post_raw(&url, Some(&session), &subscribe(4, "file:///c")).await;
    assert_eq!(reply.last()["id"], json!(4));
    let error = &reply.last()["error"];
    assert_eq!(error["code"], json!(-32602), "{reply:?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("limits.maxSubscriptionsPerSession"),
        "{error}"
    );
    assert_eq!(upstream.count("resources/subscribe"), 2);
    proxy.shutdown().await;
}

/// Issue 39, item 4: the proxy keeps every URI its clients subscribe to, so their length is
/// bounded (`limits.maxUriBytes`): a 1 MiB URI is refused naming the field and never reaches
/// the upstream (1024 of them would have held 1 GiB for one session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_to_a_uri_over_max_uri_bytes_is_refused_naming_it() {
    let upstream = subscribing_upstream().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let long = format!("file:///{}", "u".repeat(1 << 20));
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/subscribe",
        "params": {"uri": long}})
    .to_string();
    let reply = post_raw(&url, Some(&session), &body).await;
    assert_eq!(reply.last()["id"], json!(5));
    let error = &reply.last()["error"];
    assert_eq!(error["code"], json!(-32602), "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("limits.maxUriBytes"),
        "{error}"
    );
    assert_eq!(upstream.count("resources/subscribe"), 0);
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(
            &metrics,
            r#"berth_proxy_subscriptions_refused_total{limit="max_uri_bytes"}"#
        ),
        1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}
