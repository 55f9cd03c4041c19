//! Downstream `initialize`: answered by the proxy from the upstream's cached handshake, never
//! by a new upstream session (DESIGN.md failure 1).

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::answer::Answer;
use crate::jsonrpc;
use crate::server::Proxy;

/// Handles `initialize` with the request's `Mcp-Session-Id` header, if any.
///
/// A header naming a live session is a re-initialization: refused with 400 and -32600 carrying
/// the request id, leaving the session intact (field case BR-01). A header naming an unknown
/// session gets 404. Otherwise a new downstream session is created and announced in
/// `Mcp-Session-Id`.
pub async fn handle(
    proxy: &Proxy,
    header: Option<&str>,
    id: &Value,
    body: &Map<String, Value>,
) -> Answer {
    if let Some(header) = header {
        if proxy.sessions.get(header).is_some() {
            proxy
                .metrics
                .invalid_messages
                .with_label_values(&["reinitialize"])
                .inc();
            return Answer::error(
                StatusCode::BAD_REQUEST,
                id,
                jsonrpc::INVALID_REQUEST,
                "session is already initialized; send initialize without Mcp-Session-Id to start a new session",
            );
        }
        return super::unknown_session(proxy, id);
    }
    let Some(upstream) = proxy.upstream.session(proxy.connect_budget).await else {
        return Answer::error_with_data(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            jsonrpc::UPSTREAM_UNAVAILABLE,
            "upstream MCP server is unavailable",
            json!({ "outcome": "upstream_unavailable", "retryable": true }),
        );
    };
    let mut result = upstream.initialize_result().clone();
    result["protocolVersion"] = json!(upstream.protocol_version());
    let client_capabilities = body
        .get("params")
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let session = proxy
        .sessions
        .create(upstream.protocol_version(), client_capabilities);
    proxy
        .metrics
        .downstream_sessions
        .set(proxy.sessions.len() as i64);
    tracing::info!(
        mcp.session_id = session.id(),
        protocol_version = upstream.protocol_version(),
        "downstream session initialized"
    );
    Answer::Json {
        status: StatusCode::OK,
        body: json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        session: Some(session.id().to_owned()),
    }
}
