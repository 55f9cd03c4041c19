//! Where the proxy writes its audit events (issue 15; the fields are in `docs/audit.md`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the proxy writes its audit events: one JSON line per `tools/call` and per request
/// refused for want of a valid credential, apart from the log.
///
/// - `Stdout` (default): on the proxy container's standard output, where the log is not (the
///   log goes to standard error), so a log collector can route the two apart.
/// - `Off`: no audit events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AuditLog {
    /// One JSON line per event on standard output.
    #[default]
    Stdout,
    /// No audit events.
    Off,
}

/// The proxy's environment variable naming its McpUpstream as `<namespace>/<name>`, the
/// `mcpupstream` field of every audit event; the operator sets it on the proxy container.
pub const MCP_UPSTREAM_ENV: &str = "BERTH_MCPUPSTREAM";

/// The variable the operator fills with the pod's namespace (downward API), from which
/// [`MCP_UPSTREAM_ENV`] is composed.
pub const NAMESPACE_ENV: &str = "BERTH_NAMESPACE";
