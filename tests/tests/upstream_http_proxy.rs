//! The environment's HTTP proxy settings decide where upstream requests go, whichever client
//! carries them (issue 14: a plain `http://` upstream is driven with hyper directly unless a
//! proxy applies; `https://` and proxied upstreams go through reqwest). A real nginx stands in as
//! the forward proxy: it accepts absolute-form requests and passes them to the upstream, adding
//! a header the upstream records, so each test sees which way every request went.

use std::ffi::OsString;
use std::process::Stdio;

use berth_tests::fault::{FaultUpstream, Received};
use berth_tests::nginx::Nginx;
use berth_tests::proxy::{call, open_session, post_raw};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use serde_json::json;

/// The header the forward proxy adds to every request it passes on.
const VIA: &str = "x-berth-test-forward-proxy";

/// A forward proxy (nginx) passing every request to `upstream`, marking it with [`VIA`].
async fn forward_proxy(upstream: &FaultUpstream) -> Nginx {
    Nginx::start(
        &[upstream.addr.to_string()],
        &format!(
            "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; \
             proxy_set_header {VIA} yes;"
        ),
    )
    .await
}

/// Starts the proxy binary in front of `upstream_url` with exactly these proxy settings (the
/// lower-case forms too, so nothing from the test's own environment leaks in), opens a session
/// and makes one `tools/call`; returns whether the call was answered with a result.
async fn call_through(upstream_url: &str, http_proxy: &str, no_proxy: &str) -> bool {
    berth_proxy::install_crypto_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let bin = proxy_bin(None, false).expect("the proxy binary");
    let args: Vec<OsString> = vec!["--upstream-url".into(), upstream_url.into()];
    let env = [
        ("HTTP_PROXY", http_proxy),
        ("http_proxy", http_proxy),
        ("HTTPS_PROXY", ""),
        ("https_proxy", ""),
        ("ALL_PROXY", ""),
        ("all_proxy", ""),
        ("NO_PROXY", no_proxy),
        ("no_proxy", no_proxy),
    ];
    let proxy = ProxyProcess::start(&bin, &args, &env, Stdio::null(), &client).await;
    let Ok(proxy) = proxy else {
        return false;
    };
    let session = open_session(&proxy.mcp_url).await;
    let reply = post_raw(
        &proxy.mcp_url,
        Some(&session),
        &call(json!(7), "echo", json!({"message": "via"})),
    )
    .await;
    reply.last().get("result").is_some()
}

/// Every request `upstream` received, having checked a `tools/call` is among them.
fn calls_received(upstream: &FaultUpstream) -> Vec<Received> {
    let received = upstream.received();
    assert!(
        received
            .iter()
            .any(|r| r.method.as_deref() == Some("tools/call")),
        "{received:?}"
    );
    received
}

fn via_proxy(request: &Received) -> bool {
    request.headers.iter().any(|(name, _)| name == VIA)
}

#[tokio::test]
async fn http_proxy_from_the_environment_carries_every_upstream_request() {
    let upstream = FaultUpstream::start().await;
    let nginx = forward_proxy(&upstream).await;
    // A host name that resolves nowhere: the call can only succeed through the proxy.
    let unresolvable = format!("http://berth-upstream.invalid:{}/mcp", upstream.addr.port());
    let answered = call_through(
        &unresolvable,
        &format!("http://127.0.0.1:{}", nginx.port),
        "",
    )
    .await;
    assert!(answered, "the call through the forward proxy got no result");
    let received = calls_received(&upstream);
    assert!(
        received.iter().all(via_proxy),
        "a request bypassed the proxy: {received:?}"
    );
}

#[tokio::test]
async fn no_proxy_sends_a_listed_upstream_directly() {
    let upstream = FaultUpstream::start().await;
    let nginx = forward_proxy(&upstream).await;
    let answered = call_through(
        &upstream.url,
        &format!("http://127.0.0.1:{}", nginx.port),
        "127.0.0.1",
    )
    .await;
    assert!(answered, "the direct call got no result");
    let received = calls_received(&upstream);
    assert!(
        !received.iter().any(via_proxy),
        "a request went through the proxy though NO_PROXY lists the upstream: {received:?}"
    );
}
