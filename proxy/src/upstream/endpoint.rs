//! Where upstream sessions come from: a Streamable HTTP endpoint, or a source of stdio
//! connections (one child each). The supervisor, `PerClient` sessions, budgets, outcomes and the
//! tools probe work on either.

use std::sync::Arc;

use super::http::HttpUpstream;
use crate::stdio::StdioEndpoint;

/// An upstream MCP server's transport endpoint.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// Streamable HTTP (`upstream.url`).
    Http(HttpUpstream),
    /// Stdio children (`upstream.command`) or a stdio host (`upstream.socket`).
    Stdio(Arc<StdioEndpoint>),
}

impl Endpoint {
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
            Self::Http(http) => write!(f, "{}", redacted(http.url())),
            Self::Stdio(stdio) => write!(f, "{stdio}"),
        }
    }
}

/// `url` as logs may show it: user name and password (credentials in the URL's userinfo) are
/// replaced by `redacted`, so they never reach a log line.
pub fn redacted(url: &reqwest::Url) -> reqwest::Url {
    let mut shown = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        let _ = shown.set_password(None);
        let _ = shown.set_username("redacted");
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_in_the_upstream_url_is_redacted_for_display() {
        let parse = |s: &str| reqwest::Url::parse(s).expect("url");
        let shown = redacted(&parse("http://admin:s3cr3t@127.0.0.1:3001/mcp")).to_string();
        assert_eq!(shown, "http://redacted@127.0.0.1:3001/mcp");
        let token = redacted(&parse("https://tok3n@example.test/mcp")).to_string();
        assert!(!token.contains("tok3n"), "{token}");
        let plain = redacted(&parse("http://127.0.0.1:3001/mcp")).to_string();
        assert_eq!(plain, "http://127.0.0.1:3001/mcp");
    }
}
