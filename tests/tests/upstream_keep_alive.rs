//! The proxy's pooled upstream connections and the upstream's keep-alive timeout.
//!
//! Node's HTTP server and uvicorn (the servers under the TypeScript and Python MCP SDKs) close
//! a keep-alive connection after 5 s idle. A client that keeps idle connections longer (hyper's
//! and reqwest's pools: 90 s) sometimes writes its next request on a connection the server is
//! closing, and that request is lost. The proxy lets an idle upstream connection go after 4 s,
//! before such a server closes it; the hop here loses the race every time it is run.

use std::time::Duration;

use berth_tests::fault::FaultUpstream;
use berth_tests::fault::keep_alive::{KeepAliveCloser, SERVER_KEEP_ALIVE};
use berth_tests::proxy::{call, config, mcp_url, open_session, post_raw, start_ready};
use serde_json::json;

#[tokio::test]
async fn a_call_after_the_upstreams_keep_alive_timeout_is_not_lost() {
    let upstream = FaultUpstream::start().await;
    let hop = KeepAliveCloser::start(upstream.addr, SERVER_KEEP_ALIVE).await;
    let proxy = start_ready(&config(&hop.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    for (id, wait) in [
        (2, Duration::ZERO),
        (3, SERVER_KEEP_ALIVE + Duration::from_millis(300)),
    ] {
        tokio::time::sleep(wait).await;
        let reply = post_raw(
            &url,
            Some(&session),
            &call(json!(id), "echo", json!({"message": "hi"})),
        )
        .await;
        assert_eq!(
            reply.last()["result"]["content"][0]["text"],
            json!("hi"),
            "call {id} after {wait:?} idle: {reply:?}"
        );
    }
    assert_eq!(
        hop.closed_idle(),
        0,
        "the proxy wrote on a connection idle past the upstream's keep-alive timeout"
    );
    proxy.shutdown().await;
}
