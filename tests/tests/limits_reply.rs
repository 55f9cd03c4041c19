//! Issue 39, item 3: an upstream reply has a size limit (`limits.maxReplyBytes`). A reply over
//! it is not relayed: the caller gets a JSON-RPC error under its own id naming the limit, the
//! refusal is counted, and the proxy reads no more of the reply than the limit, so its memory
//! does not grow with the reply.
//!
//! The proxy runs as its own process (its resident memory is its own, not the test's) in front
//! of the in-process fault upstream, which makes its replies as it sends them.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::{Duration, Instant};

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{call, config, open_session, post_raw, sample};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;
/// The reply limit the proxy runs with.
const LIMIT: u32 = 1024 * 1024;
/// How long a refused reply may take to be answered: the proxy stops reading at the limit.
const ANSWER_DEADLINE: Duration = Duration::from_secs(20);

/// The proxy process in front of `upstream`, with `limits.maxReplyBytes` at [`LIMIT`]; the
/// temporary directory holds its config.
async fn start(upstream: &FaultUpstream) -> (ProxyProcess, tempfile::TempDir) {
    berth_proxy::install_crypto_provider();
    let mut cfg = config(&upstream.url, "60s");
    cfg.limits.max_reply_bytes = LIMIT;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.yaml");
    std::fs::write(&path, cfg.to_yaml().expect("yaml")).expect("write config");
    let args: Vec<OsString> = vec!["--config".into(), path.into()];
    let bin = proxy_bin(None, true).expect("berth-proxy binary");
    let client = reqwest::Client::new();
    let proxy = ProxyProcess::start(&bin, &args, &[], Stdio::inherit(), &client)
        .await
        .expect("proxy starts");
    (proxy, dir)
}

/// Calls `raw` and checks that the answer is the refusal of a reply over the limit, under the
/// call's id, within [`ANSWER_DEADLINE`].
async fn assert_refused(proxy: &ProxyProcess, session: &str, id: i64) {
    let started = Instant::now();
    let reply = tokio::time::timeout(
        ANSWER_DEADLINE,
        post_raw(
            &proxy.mcp_url,
            Some(session),
            &call(json!(id), "raw", json!({})),
        ),
    )
    .await
    .expect("the proxy answers without reading the whole reply");
    let elapsed = started.elapsed();
    let last = reply.last();
    assert_eq!(last["id"], json!(id), "under the call's id");
    let error = &last["error"];
    assert_eq!(error["code"], json!(-32012), "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limits.maxReplyBytes") && message.contains(&LIMIT.to_string()),
        "names the limit: {message}"
    );
    assert_eq!(error["data"]["outcome"], json!("upstream_unavailable"));
    assert!(
        last.get("result").is_none_or(Value::is_null),
        "nothing of the reply"
    );
    eprintln!("refused in {elapsed:?}");
}

/// The proxy's peak resident memory, in bytes.
fn peak(proxy: &ProxyProcess) -> u64 {
    proxy.status_kib("VmHWM").expect("VmHWM") * 1024
}

async fn refused_count(proxy: &ProxyProcess) -> f64 {
    let metrics = proxy
        .metrics(&reqwest::Client::new())
        .await
        .expect("metrics");
    sample(
        &metrics,
        r#"berth_proxy_upstream_replies_refused_total{reason="too_large"}"#,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_limit_json_and_sse_replies_of_200_mib_are_refused_with_memory_held_near_the_limit() {
    let upstream = FaultUpstream::start().await;
    let (proxy, _dir) = start(&upstream).await;
    let session = open_session(&proxy.mcp_url).await;
    // A reply under the limit, each way, first: what any call costs is not counted below.
    upstream.update(|f| f.streamed_result_bytes = Some(512 * 1024));
    for (id, sse) in [(2, false), (3, true)] {
        upstream.update(|f| f.sse_replies = sse);
        let reply = post_raw(
            &proxy.mcp_url,
            Some(&session),
            &call(json!(id), "raw", json!({})),
        )
        .await;
        assert!(
            reply.last()["result"].is_object(),
            "under the limit: relayed"
        );
    }
    let before = peak(&proxy);

    upstream.update(|f| {
        f.streamed_result_bytes = Some(200 * MIB);
        f.sse_replies = false;
    });
    assert_refused(&proxy, &session, 4).await;
    upstream.update(|f| f.sse_replies = true);
    assert_refused(&proxy, &session, 5).await;

    let grown = peak(&proxy).saturating_sub(before);
    eprintln!("peak RSS rose by {} KiB", grown / 1024);
    assert!(
        grown < 24 * MIB,
        "two 200 MiB replies against a 1 MiB limit raised the proxy's peak RSS by {grown} bytes"
    );
    assert_eq!(refused_count(&proxy).await, 2.0);

    // The session goes on.
    upstream.update(|f| f.streamed_result_bytes = Some(1024));
    let reply = post_raw(
        &proxy.mcp_url,
        Some(&session),
        &call(json!(6), "raw", json!({})),
    )
    .await;
    assert_eq!(reply.last()["id"], json!(6));
    assert!(reply.last()["result"].is_object(), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_limit_endless_sse_event_is_refused_quickly() {
    let upstream = FaultUpstream::start().await;
    upstream.update(|f| {
        f.streamed_result_bytes = Some(u64::MAX);
        f.sse_replies = true;
    });
    let (proxy, _dir) = start(&upstream).await;
    let session = open_session(&proxy.mcp_url).await;
    assert_refused(&proxy, &session, 2).await;
    assert_eq!(refused_count(&proxy).await, 1.0);
}

/// Issue 39, item 3: a non-2xx reply's body is read only as far as the proxy keeps of it (512
/// bytes, for the error it reports). An upstream answering a call with HTTP 500 and an endless
/// body used to be read to the end: the call waited for its budget while the proxy's memory
/// grew with the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_reply_with_an_endless_body_is_answered_at_once_with_memory_held() {
    let upstream = FaultUpstream::start().await;
    let (proxy, _dir) = start(&upstream).await;
    let session = open_session(&proxy.mcp_url).await;
    let before = peak(&proxy);
    upstream.update(|f| {
        f.streamed_result_bytes = Some(u64::MAX);
        f.streamed_status = Some(500);
    });
    let started = Instant::now();
    let reply = tokio::time::timeout(
        ANSWER_DEADLINE,
        post_raw(
            &proxy.mcp_url,
            Some(&session),
            &call(json!(7), "raw", json!({})),
        ),
    )
    .await
    .expect("answered without reading the endless body");
    assert_eq!(reply.last()["id"], json!(7), "{reply:?}");
    assert!(reply.last()["error"].is_object(), "{reply:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "at once, not at the 60 s call budget: {:?}",
        started.elapsed()
    );
    let grown = peak(&proxy).saturating_sub(before);
    assert!(grown < 24 * MIB, "peak RSS rose by {grown} bytes");
}
