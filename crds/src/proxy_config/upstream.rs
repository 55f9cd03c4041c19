//! The upstream MCP server as the proxy reaches it (`upstream`): its transport, URL or stdio
//! command/socket, and the headers presented on every request, with the rules each transport
//! needs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::ProxyConfigError;
use crate::transport::Transport;

/// Environment variable of the proxy holding its pod's IP (the operator fills it from the
/// downward API `status.podIP`). With an HTTP upstream on loopback, the proxy checks whether
/// the upstream's port also answers on this address and reports it as `exposed` on the admin
/// port's `/upstream` (issue 40, item 3).
pub const POD_IP_ENV: &str = "BERTH_POD_IP";

/// The upstream MCP server as the proxy reaches it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamEndpoint {
    /// Wire transport of the upstream.
    pub transport: Transport,
    /// Streamable HTTP endpoint URL, e.g. `http://127.0.0.1:3001/mcp` (the sidecar is on the
    /// pod's loopback). Required for `StreamableHttp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers presented on every upstream request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderSource>,
    /// `Stdio` only: the server's argv (`[program, args...]`); the proxy spawns one child per
    /// client session itself. Exactly one of `command` and `socket` is set for `Stdio`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// `Stdio` only: Unix socket of a `berth-proxy stdio-host` in the same pod, a path or
    /// `@name` for an abstract socket (what the operator renders: `@berth-stdio-host`, issue
    /// 40, item 7); the proxy opens one connection (one child) per client session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// `Stdio` only: longest JSON-RPC line accepted from a child, in bytes; a longer reply
    /// fails its request with a clear error and is never buffered whole. Default 16 MiB
    /// (16777216).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_line_bytes: Option<u64>,
}

/// One upstream header: `name` and exactly one of a literal `value` or `valueEnv`, the name of
/// an environment variable of the proxy that holds the value (the operator fills it from a
/// Secret, so the value is in neither the config nor a command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderSource {
    /// Header name.
    pub name: String,
    /// Literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Environment variable holding the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env: Option<String>,
}

impl UpstreamEndpoint {
    /// `Stdio` rules: exactly one of `command` and `socket`; a command whose program is not
    /// empty; a socket path that is not empty; `maxLineBytes` at least 1.
    ///
    /// # Errors
    /// [`ProxyConfigError::Missing`] whose `field` names the field and what it needs, e.g.
    /// "upstream.command is required when upstream.transport is Stdio".
    pub fn check_stdio(&self) -> Result<(), ProxyConfigError> {
        let missing = |field| {
            Err(ProxyConfigError::Missing {
                field,
                transport: Transport::Stdio,
            })
        };
        match (&self.socket, self.command.is_empty()) {
            (Some(_), false) => missing("exactly one of upstream.command and upstream.socket"),
            (None, true) => missing("upstream.command (or upstream.socket)"),
            (Some(socket), true) if socket.trim().is_empty() => {
                missing("upstream.socket (a non-empty path)")
            }
            (None, false) if self.command[0].trim().is_empty() => {
                missing("upstream.command (a non-empty program as its first element)")
            }
            _ if self.max_line_bytes == Some(0) => missing("upstream.maxLineBytes (at least 1)"),
            _ => Ok(()),
        }
    }

    /// The headers with their values, reading `valueEnv` through `env`.
    ///
    /// # Errors
    /// [`ProxyConfigError::Header`] naming the header whose value is missing or ambiguous (the
    /// value itself is never in the error).
    pub fn resolve_headers(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, ProxyConfigError> {
        self.headers
            .iter()
            .map(|header| {
                let value = match (&header.value, &header.value_env) {
                    (Some(value), None) => Some(value.clone()),
                    (None, Some(var)) => env(var),
                    _ => None,
                };
                value
                    .map(|value| (header.name.clone(), value))
                    .ok_or_else(|| ProxyConfigError::Header(header.name.clone()))
            })
            .collect()
    }
}
