//! Real stdio MCP servers through the proxy (`upstream.command`, `PerClient`): the Python `mcp`
//! SDK server (`tests/peers/python/stdio_server.py`) and the Node reference server
//! `@modelcontextprotocol/server-everything` in `stdio` mode.

use std::time::Duration;

use berth_crds::SessionStrategy;
use berth_tests::proxy::{call, mcp_url, open_session, post_raw, wait_ready};
use berth_tests::repo_root;
use berth_tests::stdio::{config, start};
use serde_json::{Value, json};

fn python() -> String {
    std::env::var("BERTH_PYTHON").unwrap_or_else(|_| {
        let cache = std::env::var("BERTH_CACHE_DIR").unwrap_or_else(|_| {
            format!("{}/.cache/berth", std::env::var("HOME").unwrap_or_default())
        });
        std::fs::read_to_string(format!("{cache}/python-peer"))
            .expect("run tests/peers/python/install.sh (make test does)")
            .trim()
            .to_owned()
    })
}

async fn list_and_call(command: Vec<String>, tool: &str, arguments: Value) -> (Vec<String>, Value) {
    let proxy = start(&config(command, SessionStrategy::PerClient), &[]).await;
    wait_ready(&proxy, Duration::from_secs(30)).await;
    let url = mcp_url(&proxy);
    let (a, b) = tokio::join!(open_session(&url), open_session(&url));
    let list = post_raw(
        &url,
        Some(&a),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    let names = list.last()["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    // Both clients use id 1; each gets its own reply from its own child.
    let body = call(json!(2), tool, arguments);
    let (ra, rb) = tokio::join!(
        post_raw(&url, Some(&a), &body),
        post_raw(&url, Some(&b), &body)
    );
    assert_eq!(ra.last()["id"], json!(2));
    assert_eq!(rb.last()["id"], json!(2));
    assert_eq!(ra.last()["result"], rb.last()["result"]);
    let result = ra.last().clone();
    proxy.shutdown().await;
    (names, result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_python_sdk_server_lists_and_calls_through_the_proxy() {
    let script = repo_root().join("tests/peers/python/stdio_server.py");
    let command = vec![python(), script.to_string_lossy().into_owned()];
    let (names, result) = list_and_call(command, "echo", json!({"message": "hi"})).await;
    assert!(
        names.contains(&"echo".to_owned()) && names.contains(&"slow".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        result["result"]["content"][0]["text"],
        json!("Echo: hi"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_node_reference_server_lists_and_calls_through_the_proxy() {
    let entry = repo_root().join(
        "tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        entry.exists(),
        "{} missing: run npm ci in tests/peers/node (make test does)",
        entry.display()
    );
    let command = vec![
        "node".to_owned(),
        entry.to_string_lossy().into_owned(),
        "stdio".to_owned(),
    ];
    let (names, result) = list_and_call(command, "echo", json!({"message": "hi"})).await;
    assert!(names.contains(&"echo".to_owned()), "{names:?}");
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("hi"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_mcp_server_time_from_pypi_lists_and_calls_through_the_proxy() {
    let command = vec![python(), "-m".to_owned(), "mcp_server_time".to_owned()];
    let arguments =
        json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"});
    let (names, result) = list_and_call(command, "convert_time", arguments).await;
    assert!(
        names.contains(&"get_current_time".to_owned())
            && names.contains(&"convert_time".to_owned()),
        "{names:?}"
    );
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("21:00"), "{result}");
}
