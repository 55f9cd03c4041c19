//! Field case BR-35: replicas > 1 without sticky routing. Each replica keeps its own upstream
//! session to the real Node reference server; downstream session ids are signed with a key the
//! replicas share (`sessionKeyEnv`), so any replica serves a session another issued. The
//! "ingress" is a real nginx balancing round-robin with no affinity.

use std::collections::HashMap;
use std::time::Duration;

use berth_proxy::RunningProxy;
use berth_tests::nginx::Nginx;
use berth_tests::proxy::{
    call, config, mcp_url, open_session, post_raw, sample, scrape, wait_ready,
};
use berth_tests::{peers, rmcp_client};
use serde_json::json;

const KEY_VAR: &str = "BERTH_SESSION_KEY";

async fn replica(upstream_url: &str, key: Option<&str>) -> RunningProxy {
    let mut cfg = config(upstream_url, "60s");
    cfg.session_key_env = key.map(|_| KEY_VAR.to_owned());
    let env: HashMap<String, String> = key
        .map(|k| HashMap::from([(KEY_VAR.to_owned(), k.to_owned())]))
        .unwrap_or_default();
    berth_proxy::install_crypto_provider();
    let running = berth_proxy::start_with_env(&cfg, &|var| env.get(var).cloned())
        .await
        .expect("replica starts");
    wait_ready(&running, Duration::from_secs(30)).await;
    running
}

fn ok_calls(metrics: &str) -> f64 {
    sample(
        metrics,
        r#"berth_proxy_tool_calls_total{outcome="ok",tool="echo"}"#,
    )
}

#[tokio::test]
async fn br_35_session_issued_by_one_replica_is_served_by_another_sharing_the_key() {
    let server = peers::everything().await;
    let key = "9c1e0b7d4a2f-replica-shared-key";
    let a = replica(&server.url, Some(key)).await;
    let b = replica(&server.url, Some(key)).await;
    let session = open_session(&mcp_url(&a)).await;
    for n in 0..20 {
        let target = if n % 2 == 0 { &b } else { &a };
        let reply = post_raw(
            &mcp_url(target),
            Some(&session),
            &call(json!(n + 2), "echo", json!({"message": format!("m{n}")})),
        )
        .await;
        assert_eq!(reply.status, 200, "call {n}: {reply:?}");
        assert_eq!(reply.last()["id"], json!(n + 2));
        assert_eq!(
            reply.last()["result"]["content"][0]["text"],
            json!(format!("Echo: m{n}"))
        );
    }
    let (ma, mb) = (scrape(&a).await, scrape(&b).await);
    assert_eq!((ok_calls(&ma), ok_calls(&mb)), (10.0, 10.0));
    assert_eq!(
        sample(&mb, "berth_proxy_downstream_sessions_adopted_total"),
        1.0,
        "adopted once, then held: {mb}"
    );
    // An id altered by one character verifies nowhere: 404, so the client re-initializes.
    let mut forged = session.clone();
    let last = forged.pop().expect("non-empty id");
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let reply = post_raw(
        &mcp_url(&b),
        Some(&forged),
        &call(json!(99), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    // Ended on b: b does not adopt it back.
    let deleted = reqwest::Client::new()
        .delete(mcp_url(&b))
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 204);
    let reply = post_raw(
        &mcp_url(&b),
        Some(&session),
        &call(json!(100), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn br_35_without_a_shared_key_a_foreign_session_is_404_never_400() {
    let server = peers::everything().await;
    let a = replica(&server.url, None).await;
    let b = replica(&server.url, None).await;
    let session = open_session(&mcp_url(&a)).await;
    let reply = post_raw(
        &mcp_url(&b),
        Some(&session),
        &call(json!(2), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(
        reply.last()["id"],
        json!(2),
        "the error names the request id"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn br_35_rmcp_client_through_round_robin_ingress_makes_20_calls() {
    let server = peers::everything().await;
    let key = "5d8a61f0e2b4-replica-shared-key";
    let a = replica(&server.url, Some(key)).await;
    let b = replica(&server.url, Some(key)).await;
    let ingress = Nginx::start(&[a.mcp_addr.to_string(), b.mcp_addr.to_string()], "").await;
    let client = rmcp_client::connect(&ingress.mcp_url()).await;
    for n in 0..20 {
        let arguments = json!({"message": format!("r{n}")});
        let result = rmcp_client::call_tool(&client, "echo", arguments).await;
        let content = serde_json::to_value(&result.content).expect("content");
        assert_eq!(content[0]["text"], json!(format!("Echo: r{n}")));
    }
    client.cancel().await.expect("client closes");
    let (ca, cb) = (ok_calls(&scrape(&a).await), ok_calls(&scrape(&b).await));
    assert_eq!(ca + cb, 20.0);
    assert!(
        ca >= 5.0 && cb >= 5.0,
        "round-robin reached both: {ca} / {cb}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn br_35_stateless_variant_100_fresh_sessions_spread_over_both_replicas() {
    let server = peers::everything().await;
    let key = "0f4c2a9e7b13-replica-shared-key";
    let a = replica(&server.url, Some(key)).await;
    let b = replica(&server.url, Some(key)).await;
    let ingress = Nginx::start(&[a.mcp_addr.to_string(), b.mcp_addr.to_string()], "").await;
    let url = ingress.mcp_url();
    for n in 0..100 {
        let session = open_session(&url).await;
        let reply = post_raw(
            &url,
            Some(&session),
            &call(json!(2), "echo", json!({"message": n.to_string()})),
        )
        .await;
        assert_eq!(reply.status, 200, "session {n}: {reply:?}");
        assert_eq!(
            reply.last()["result"]["content"][0]["text"],
            json!(format!("Echo: {n}"))
        );
    }
    let (ca, cb) = (ok_calls(&scrape(&a).await), ok_calls(&scrape(&b).await));
    assert_eq!(ca + cb, 100.0);
    assert!(
        ca >= 20.0 && cb >= 20.0,
        "each replica serves at least 20 %: {ca} / {cb}"
    );
    a.shutdown().await;
    b.shutdown().await;
}
