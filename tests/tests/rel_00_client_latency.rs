//! Issue 12, item 0: sequential calls from common clients never wait for a delayed ACK.
//!
//! With Nagle's algorithm on the proxy's accepted sockets, a response head and its first SSE
//! event, written separately, waited for the client's delayed ACK: about 40 ms per call from
//! Python `httpx` and the TypeScript SDK client, against 1–3 ms on loopback without it. Our own
//! Rust client sets `TCP_NODELAY` itself and never saw it, so this test drives the clients that
//! did (tests/peers/clients), each making sequential `tools/call`s on one session, through the
//! proxy in front of the Node reference server (Shared) and in front of a stdio server
//! (PerClient), and checks each median stays under 20 ms.
//!
//! One test function, so nothing else in this binary competes for the two cores meanwhile.

use berth_crds::SessionStrategy;
use berth_tests::peers::run_client;
use berth_tests::{peers, proxy, stdio};

/// Calls each client makes.
const CALLS: &str = "60";
/// The bound: the stall is about 40 ms, a call on loopback takes 1–3 ms.
const MEDIAN_BOUND_MS: f64 = 20.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rel_00_sequential_calls_from_httpx_and_the_typescript_sdk_have_a_median_under_20_ms() {
    let python = peers::python_interpreter();
    let node = std::path::PathBuf::from("node");
    let server = peers::everything().await;
    let shared = proxy::start_ready(&proxy::config(&server.url, "60s")).await;
    let shared_url = proxy::mcp_url(&shared);
    let command = vec![
        python.display().to_string(),
        "-m".to_owned(),
        "mcp_server_time".to_owned(),
    ];
    let per_client = stdio::start(&stdio::config(command, SessionStrategy::PerClient), &[]).await;
    let stdio_url = proxy::mcp_url(&per_client);

    let runs = [
        (
            "httpx, Shared over HTTP",
            run_client(&python, "sequential_httpx.py", &[&shared_url, CALLS]).await,
        ),
        (
            "TypeScript SDK, Shared over HTTP",
            run_client(&node, "sequential_sdk.mjs", &[&shared_url, CALLS]).await,
        ),
        (
            "httpx, PerClient over stdio",
            run_client(
                &python,
                "sequential_httpx.py",
                &[
                    &stdio_url,
                    CALLS,
                    "get_current_time",
                    r#"{"timezone":"UTC"}"#,
                ],
            )
            .await,
        ),
        (
            "httpx, direct to the Node server (reference)",
            run_client(&python, "sequential_httpx.py", &[&server.url, CALLS]).await,
        ),
    ];
    for (what, figures) in &runs {
        eprintln!("{what}: {figures}");
    }
    for (what, figures) in &runs[..3] {
        let median = figures["median_ms"].as_f64().expect("median_ms");
        assert!(
            median < MEDIAN_BOUND_MS,
            "{what}: median {median:.1} ms is not under {MEDIAN_BOUND_MS} ms: {figures}"
        );
    }
    shared.shutdown().await;
    per_client.shutdown().await;
}
