//! The MCP HTTP headers the proxy reads and writes, on both sides (MCP 2025-06-18 "Streamable
//! HTTP"; MCP 2026-07-28, SEP-2243).
//!
//! Each name is a [`HeaderName`] built at compile time: a name given as `&str` is copied into a
//! new allocation on every insert (issue 14).

use http::HeaderName;

/// Header carrying the MCP session id (MCP 2025-06-18, "Session Management").
pub const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
/// Header carrying the negotiated protocol version on every request after `initialize`.
pub const PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// Header mirroring a modern request's `method` (MCP 2026-07-28, SEP-2243).
pub const METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
/// Header mirroring a modern request's `params.name` or `params.uri` (SEP-2243).
pub const NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");
/// Header naming the last SSE event id a client saw, to resume a stream (WHATWG HTML, "Server-sent
/// events"; MCP 2025-06-18, "Resumability and Redelivery").
pub const LAST_EVENT_ID_HEADER: HeaderName = HeaderName::from_static("last-event-id");
