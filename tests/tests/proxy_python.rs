//! The proxy in front of a server written with the Python `mcp` SDK
//! (`tests/peers/python/server.py`), driven by the rmcp client.

use berth_tests::proxy::{config, mcp_url, sample, scrape, start_ready};
use berth_tests::{peers, rmcp_client};
use serde_json::json;

#[tokio::test]
async fn proxy_python_sdk_server_lists_tools_and_calls_echo() {
    let server = peers::python_server().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for expected in ["echo", "add", "fail", "slow"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} listed: {names:?}"
        );
    }
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    let read_only = echo.annotations.as_ref().and_then(|a| a.read_only_hint);
    assert_eq!(read_only, Some(true), "annotations pass through: {echo:?}");
    let result = rmcp_client::call_tool(&client, "echo", json!({"message": "hi"})).await;
    let content = serde_json::to_value(&result.content).expect("content json");
    assert_eq!(content[0]["text"], json!("Echo: hi"));
    assert_ne!(result.is_error, Some(true));
    let metrics = scrape(&proxy).await;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="echo"}"#;
    assert_eq!(sample(&metrics, ok), 1.0, "{metrics}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}

#[tokio::test]
async fn proxy_python_sdk_raised_tool_error_counts_as_tool_error() {
    let server = peers::python_server().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let client = rmcp_client::connect(&mcp_url(&proxy)).await;
    let result = rmcp_client::call_tool(&client, "fail", json!({"reason": "boom"})).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "the SDK reports a raised error"
    );
    let metrics = scrape(&proxy).await;
    let tool_error = r#"berth_proxy_tool_calls_total{outcome="tool_error",tool="fail"}"#;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="fail"}"#;
    assert_eq!(sample(&metrics, tool_error), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, ok), 0.0, "{metrics}");
    client.cancel().await.expect("client closes");
    proxy.shutdown().await;
}
