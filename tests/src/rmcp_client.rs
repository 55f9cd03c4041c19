//! The rmcp client (the Rust MCP SDK) as tests drive it: connect over Streamable HTTP, call a
//! tool with JSON arguments.

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::Value;

/// A connected rmcp client (handshake done).
pub type Client = RunningService<RoleClient, ()>;

/// Connects an rmcp client to the MCP endpoint `url` (runs `initialize`).
///
/// # Panics
/// When the handshake fails.
pub async fn connect(url: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    ().serve(transport)
        .await
        .unwrap_or_else(|err| panic!("rmcp client connects to {url}: {err}"))
}

/// Calls `tool` with `arguments` (a JSON object) and returns its result, `isError` or not.
///
/// # Panics
/// When `arguments` is not an object, or the call gets no result (a JSON-RPC error or a
/// transport failure).
pub async fn call_tool(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("tool arguments must be a JSON object: {arguments}");
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|err| panic!("tools/call {tool}: {err}"))
}
