//! The MCP HTTP headers the proxy reads and writes, on both sides (MCP 2025-06-18 "Streamable
//! HTTP"; MCP 2026-07-28, SEP-2243).

/// Header carrying the MCP session id (MCP 2025-06-18, "Session Management").
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated protocol version on every request after `initialize`.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// Header mirroring a modern request's `method` (MCP 2026-07-28, SEP-2243).
pub const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring a modern request's `params.name` or `params.uri` (SEP-2243).
pub const NAME_HEADER: &str = "mcp-name";
