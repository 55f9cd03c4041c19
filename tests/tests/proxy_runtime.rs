//! The proxy binary's runtime (issue 14): `--worker-threads` / `BERTH_PROXY_WORKER_THREADS`
//! chooses how many threads run it, 1 being everything on one thread, and calls stay correct
//! either way: concurrent calls on one session each get their own answer. The binary runs with
//! the environment its image sets (images/proxy.Dockerfile), allocator settings included.

use std::ffi::OsString;
use std::process::Stdio;

use berth_tests::bench::systems::image_env;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use serde_json::{Value, json};

/// Concurrent calls per check: more than the threads of any runtime tried here.
const CALLS: usize = 32;

async fn post(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> (Option<String>, Value) {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    let response = request.send().await.expect("the proxy answers");
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().expect("ASCII").to_owned());
    let status = response.status();
    let text = response.text().await.expect("a body");
    if text.is_empty() {
        assert!(status.is_success(), "{status} with no body");
        return (session, Value::Null);
    }
    (session, serde_json::from_str(&text).expect("a JSON body"))
}

/// Starts the binary in front of a fault upstream with `extra` flags and `env`, opens a
/// session, sends [`CALLS`] calls at once, and checks each answer is its own. Returns the
/// proxy's thread count while it serves, less its one audit writer thread.
async fn serve_concurrent_calls(extra: &[&str], env: &[(&str, &str)]) -> u64 {
    berth_proxy::install_crypto_provider();
    let upstream = FaultUpstream::start().await;
    let client = reqwest::Client::new();
    let bin = proxy_bin(None, false).expect("the proxy binary");
    let mut args: Vec<OsString> = vec!["--upstream-url".into(), upstream.url.clone().into()];
    args.extend(extra.iter().map(OsString::from));
    let image = image_env().expect("the image's environment");
    let mut all: Vec<(&str, &str)> = image
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    all.extend_from_slice(env);
    let proxy = ProxyProcess::start(&bin, &args, &all, Stdio::inherit(), &client)
        .await
        .expect("the proxy starts and is ready");
    let url = proxy.mcp_url.clone();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "proxy_runtime", "version": "0"}}});
    let (session, answer) = post(&client, &url, None, &init).await;
    assert!(answer["result"]["protocolVersion"].is_string(), "{answer}");
    let session = session.expect("a session id");
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(&client, &url, Some(&session), &inited).await;
    let calls = (0..CALLS).map(|n| {
        let (client, url, session) = (&client, &url, &session);
        async move {
            let call = json!({"jsonrpc": "2.0", "id": format!("call-{n}"), "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": format!("message {n}")}}});
            (n, post(client, url, Some(session), &call).await.1)
        }
    });
    for (n, answer) in futures::future::join_all(calls).await {
        assert_eq!(answer["id"], json!(format!("call-{n}")), "{answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"],
            json!(format!("message {n}")),
            "call {n} got {answer}"
        );
    }
    // The audit writer (one thread, `berth-audit`; audit events are on by default) is not a
    // worker: it only writes lines to stdout.
    let names = proxy.thread_names().expect("the thread names");
    let writers = names.iter().filter(|name| *name == "berth-audit").count();
    assert_eq!(writers, 1, "one audit writer thread: {names:?}");
    let threads = proxy.threads().expect("the thread count");
    assert_eq!(threads as usize, names.len(), "{names:?}");
    threads - 1
}

#[tokio::test]
async fn one_worker_thread_serves_concurrent_calls_on_a_single_thread() {
    let threads = serve_concurrent_calls(&["--worker-threads", "1"], &[]).await;
    assert_eq!(
        threads, 1,
        "one worker thread: the proxy runs on its main thread"
    );
}

#[tokio::test]
async fn worker_threads_come_from_the_environment_too() {
    let one = serve_concurrent_calls(&[], &[("BERTH_PROXY_WORKER_THREADS", "1")]).await;
    let three = serve_concurrent_calls(&[], &[("BERTH_PROXY_WORKER_THREADS", "3")]).await;
    assert_eq!(one, 1);
    assert!(
        three > 3,
        "three workers and the main thread, got {three} threads"
    );
}

#[tokio::test]
async fn zero_worker_threads_is_refused_at_start() {
    let bin = proxy_bin(None, false).expect("the proxy binary");
    let output = tokio::process::Command::new(bin)
        .args([
            "--upstream-url",
            "http://127.0.0.1:9/mcp",
            "--worker-threads",
            "0",
        ])
        .output()
        .await
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--worker-threads"), "{stderr}");
}
