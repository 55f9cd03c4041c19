//! Where upstream sessions come from: a Streamable HTTP endpoint, or a source of stdio
//! connections (one child each). The supervisor, `PerClient` sessions, budgets, outcomes and the
//! tools probe work on either.

use std::sync::Arc;

use super::http::HttpUpstream;
use crate::transport::stdio::StdioEndpoint;

/// An upstream MCP server's transport endpoint.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// Streamable HTTP (`upstream.url`).
    Http(HttpUpstream),
    /// Stdio children (`upstream.command`) or a stdio host (`upstream.socket`).
    Stdio(Arc<StdioEndpoint>),
}

impl Endpoint {
    /// The protocol era the upstream was last found to speak ([`super::era`]).
    pub fn era(&self) -> &super::era::EraCache {
        match self {
            Self::Http(http) => http.era(),
            Self::Stdio(stdio) => stdio.era(),
        }
    }

    /// The stdio endpoint, if this is one.
    pub fn stdio(&self) -> Option<&Arc<StdioEndpoint>> {
        match self {
            Self::Stdio(stdio) => Some(stdio),
            Self::Http(_) => None,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http(http) => write!(f, "{}", http.shown_url()),
            Self::Stdio(stdio) => write!(f, "{stdio}"),
        }
    }
}
