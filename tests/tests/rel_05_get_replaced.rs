//! Issue 12, item 5: a client's second standalone GET stream replaces its first, and it shows.
//!
//! The new stream wins and the old one ends (field case BR-15); each GET stream the proxy opens
//! is counted in `berth_proxy_standalone_streams_total{result}`, `replaced` when it closed a
//! stream the session still had open, so a client that reconnects in a loop is visible.

use std::time::Duration;

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    config, mcp_url, open_get_stream, open_session, sample, scrape, start_ready,
};
use serde_json::{Value, json};

const OPENED: &str = r#"berth_proxy_standalone_streams_total{result="opened"}"#;
const REPLACED: &str = r#"berth_proxy_standalone_streams_total{result="replaced"}"#;

/// The stream ended (the proxy closed it) within 5 s, after any messages already queued.
async fn ends(stream: &mut tokio::sync::mpsc::Receiver<Value>) -> bool {
    tokio::time::timeout(Duration::from_secs(5), async {
        while stream.recv().await.is_some() {}
    })
    .await
    .is_ok()
}

/// A log message from the upstream reaches `stream` (sent again until it does, for 5 s).
async fn receives_a_log(upstream: &FaultUpstream, stream: &mut tokio::sync::mpsc::Receiver<Value>) {
    let received = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            upstream.log("info", json!("hello"));
            if let Ok(Some(message)) =
                tokio::time::timeout(Duration::from_millis(200), stream.recv()).await
            {
                return message;
            }
        }
    })
    .await
    .expect("a message on the current stream");
    assert_eq!(
        received["method"],
        json!("notifications/message"),
        "{received}"
    );
}

#[tokio::test]
async fn rel_05_second_get_stream_replaces_the_first_and_is_counted() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let metrics = scrape(&proxy).await;
    assert!(metrics.contains(&format!("{OPENED} 0")), "{metrics}");
    assert!(metrics.contains(&format!("{REPLACED} 0")), "{metrics}");
    let (a, b) = (open_session(&url).await, open_session(&url).await);
    let mut first = open_get_stream(&url, &a).await;
    let _other = open_get_stream(&url, &b).await;
    let metrics = scrape(&proxy).await;
    assert_eq!(sample(&metrics, OPENED), 2.0, "one per session: {metrics}");
    assert_eq!(sample(&metrics, REPLACED), 0.0, "{metrics}");
    let mut second = open_get_stream(&url, &a).await;
    assert!(ends(&mut first).await, "the replaced stream ends");
    receives_a_log(&upstream, &mut second).await;
    let metrics = scrape(&proxy).await;
    assert_eq!(sample(&metrics, OPENED), 2.0, "{metrics}");
    assert_eq!(sample(&metrics, REPLACED), 1.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_05_get_streams_reopened_in_a_loop_count_every_replacement() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let mut current = open_get_stream(&url, &session).await;
    for _ in 0..5 {
        let next = open_get_stream(&url, &session).await;
        assert!(ends(&mut current).await, "each replaced stream ends");
        current = next;
    }
    receives_a_log(&upstream, &mut current).await;
    let metrics = scrape(&proxy).await;
    assert_eq!(sample(&metrics, OPENED), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, REPLACED), 5.0, "{metrics}");
    proxy.shutdown().await;
}
