//! Issue 13 (found by the conformance suite's `server-sse-polling`): an upstream that closes a
//! call's SSE stream after a priming event and answers on the `GET` that resumes it with
//! `Last-Event-ID` (MCP 2025-11-25, "Resumability and Redelivery"). Through the proxy that call
//! failed with -32012 ("stream ended before the response") while the suite's check passed; the
//! proxy now resumes the upstream stream itself.

use berth_tests::fault::{FaultUpstream, Faults};
use berth_tests::proxy::{call, config, mcp_url, open_session, post_raw, start_ready};
use serde_json::json;

#[tokio::test]
async fn upstream_sse_polling_call_is_resumed_by_the_proxy_and_answered() {
    let upstream = FaultUpstream::builder()
        .faults(Faults {
            sse_polling: true,
            ..Faults::default()
        })
        .start()
        .await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    for n in 0..3 {
        let reply = post_raw(
            &url,
            Some(&session),
            &call(json!(n), "echo", json!({"message": format!("polled {n}")})),
        )
        .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.last()["id"], json!(n), "{reply:?}");
        assert_eq!(
            reply.last()["result"]["content"][0]["text"],
            json!(format!("polled {n}")),
            "{reply:?}"
        );
    }
    let resumed: Vec<_> = upstream
        .received()
        .into_iter()
        .filter(|r| r.http_method == "GET")
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(name, _)| name == "last-event-id")
                .map(|(_, value)| value.clone())
        })
        .collect();
    assert_eq!(resumed.len(), 3, "one resumption per call: {resumed:?}");
    assert!(
        resumed.iter().all(|id| id.starts_with("prime-")),
        "{resumed:?}"
    );
    proxy.shutdown().await;
}
