//! The rmcp client (the Rust MCP SDK) as tests drive it: connect over Streamable HTTP (a
//! legacy `initialize` handshake, or the 2026-07-28 `server/discover` lifecycle), call a tool
//! with JSON arguments.

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

/// Connects an rmcp client to `url` as a 2026-07-28 client: `server/discover` first, no
/// session, the revision and the client's own fields in every request's `_meta`
/// (`ClientLifecycleMode::Discover`, MCP 2026-07-28 "Lifecycle").
///
/// # Panics
/// When discovery fails or the server offers no 2026-07-28.
pub async fn connect_modern(url: &str) -> Client {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    ().serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap_or_else(|err| panic!("modern rmcp client discovers {url}: {err}"))
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
