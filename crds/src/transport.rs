//! The upstream's wire transport, which the `McpUpstream` spec, its session settings and the
//! proxy configuration all name.
//!
//! Responsible for: the [`Transport`] enum only, at the bottom of the crate so that both
//! [`crate::mcp_upstream`] and [`crate::proxy_config`] can use it. Not responsible for: what a
//! transport means to the pod (the operator) or on the wire (the proxy).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Wire transport of an upstream MCP server: `StreamableHttp` or `Stdio`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Transport {
    /// MCP Streamable HTTP (spec revision 2025-03-26 and later).
    #[default]
    StreamableHttp,
    /// Newline-delimited JSON-RPC on the server's stdin/stdout.
    Stdio,
}
