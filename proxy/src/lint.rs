//! `berth-proxy lint`: checks a tool policy offline and, given an upstream, against the tools
//! that upstream really offers, so a rollout can be gated on it (exit status non-zero on any
//! finding).

use std::time::Duration;

use berth_crds::{PolicyFinding, ProxyConfig};

use crate::transport::upstream::{
    Endpoint, HttpUpstream, UpstreamError, UpstreamSession, list_tools, tools,
};

/// Why lint could not judge the policy.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The upstream could not be reached, initialized or listed.
    #[error("failed to list the upstream's tools")]
    Upstream(#[source] UpstreamError),
    /// The upstream did not answer within the connect budget.
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
}

/// Every finding for `config.tools`: the policy's own (empty list, empty names, duplicates)
/// and, when `upstream_url` is given, allowed tools the upstream lacks or (with `readOnly`)
/// does not annotate read-only. Uses one upstream session, closed afterwards.
///
/// # Errors
/// [`LintError`] when the upstream cannot be listed within `timeouts.connect` plus
/// `timeouts.call`.
pub async fn lint(
    config: &ProxyConfig,
    upstream_url: Option<&str>,
) -> Result<Vec<PolicyFinding>, LintError> {
    let mut findings = config.tools.check();
    let Some(url) = upstream_url else {
        return Ok(findings);
    };
    let connect = config.timeouts.connect().unwrap_or(Duration::from_secs(10));
    let call = config.timeouts.call().unwrap_or(Duration::from_secs(60));
    let headers = config
        .upstream
        .resolve_headers(|var| std::env::var(var).ok())
        .map_err(|e| LintError::Upstream(UpstreamError::Config(e.to_string())))?;
    let http = HttpUpstream::new(url, connect, &headers).map_err(LintError::Upstream)?;
    let budget = connect + call;
    let listing = async {
        let session = UpstreamSession::handshake(&Endpoint::Http(http), None).await?;
        let listed = list_tools(&session).await;
        session.close().await;
        listed
    };
    let listed = tokio::time::timeout(budget, listing)
        .await
        .map_err(|_| LintError::Timeout(budget))?
        .map_err(LintError::Upstream)?;
    let hints: Vec<(String, bool)> = listed
        .iter()
        .filter_map(|tool| {
            let name = tool.get("name")?.as_str()?.to_owned();
            Some((name, tools::is_read_only(tool)))
        })
        .collect();
    findings.extend(
        config
            .tools
            .check_against(hints.iter().map(|(n, r)| (n.as_str(), *r))),
    );
    Ok(findings)
}
