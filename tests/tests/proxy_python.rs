//! The proxy in front of a server written with the Python `mcp` SDK
//! (`tests/peers/python/server.py`), driven by the rmcp client.

use berth_tests::peers;
use berth_tests::proxy::{config, mcp_url, sample, scrape, start_ready};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

fn args(value: Value) -> rmcp::model::JsonObject {
    value.as_object().cloned().expect("object arguments")
}

#[tokio::test]
async fn proxy_python_sdk_server_lists_tools_and_calls_echo() {
    let server = peers::python_server().await;
    let proxy = start_ready(&config(&server.url, "60s")).await;
    let transport = StreamableHttpClientTransport::from_uri(mcp_url(&proxy));
    let client = ().serve(transport).await.expect("rmcp client connects through the proxy");
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
    let result = client
        .call_tool(
            CallToolRequestParams::new("echo").with_arguments(args(json!({"message": "hi"}))),
        )
        .await
        .expect("tools/call");
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
    let transport = StreamableHttpClientTransport::from_uri(mcp_url(&proxy));
    let client = ().serve(transport).await.expect("rmcp client connects");
    let result = client
        .call_tool(
            CallToolRequestParams::new("fail").with_arguments(args(json!({"reason": "boom"}))),
        )
        .await
        .expect("tools/call returns a result");
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
