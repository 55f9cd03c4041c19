//! Outcomes: how each forwarded request ended, the label Berth's alerts are built on.
//!
//! Every `tools/call` ends in exactly one [`Outcome`] (README.md "Why it exists", failure 5). A
//! result with `isError: true` is a failure (`tool_error`), never a success (field case BR-30).

use crate::wire::jsonrpc::WireMessage;

/// How one forwarded request ended. The label values are a contract: alerts and
/// `docs/metrics.md` use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A result that is not a tool error.
    Ok,
    /// A `tools/call` result with `isError: true`.
    ToolError,
    /// A JSON-RPC error response from the upstream.
    RpcError,
    /// The `timeouts.call` budget ran out.
    Timeout,
    /// The client went away or cancelled before the result.
    Cancelled,
    /// No upstream session could be had, or the upstream failed at the transport level.
    UpstreamUnavailable,
    /// The upstream forgot the session while the request was in flight.
    SessionLost,
    /// The proxy refused the request (a limit or a protocol rule).
    Rejected,
    /// The tool drifted from the baseline and `toolsProbe.onDrift` is `FailClosed`.
    DriftBlocked,
    /// No grant of `tools.grants` names the tool for this caller (issue 15).
    Denied,
    /// The caller is over a `tools.rateLimits` limit for the tool (issue 15).
    RateLimited,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Self; 11] = [
        Self::Ok,
        Self::ToolError,
        Self::RpcError,
        Self::Timeout,
        Self::Cancelled,
        Self::UpstreamUnavailable,
        Self::SessionLost,
        Self::Rejected,
        Self::DriftBlocked,
        Self::Denied,
        Self::RateLimited,
    ];

    /// The metric label value, e.g. `tool_error`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::RpcError => "rpc_error",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::UpstreamUnavailable => "upstream_unavailable",
            Self::SessionLost => "session_lost",
            Self::Rejected => "rejected",
            Self::DriftBlocked => "drift_blocked",
            Self::Denied => "denied",
            Self::RateLimited => "rate_limited",
        }
    }

    /// Classifies the upstream's final JSON-RPC response to a request.
    ///
    /// `error` present -> [`Outcome::RpcError`]; `result.isError == true` -> [`Outcome::ToolError`]
    /// (MCP 2025-06-18, "Tools: Error Handling"); anything else -> [`Outcome::Ok`].
    /// Read through the message's envelope: the result is not parsed (issue 14).
    pub fn of_response(response: &WireMessage) -> Self {
        if response.member_text(&["error"]).is_some() {
            Self::RpcError
        } else if response.member_text(&["result", "isError"]) == Some("true") {
            Self::ToolError
        } else {
            Self::Ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcome_is_error_true_is_tool_error() {
        let r = json!({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}});
        assert_eq!(Outcome::of_response(&r.into()), Outcome::ToolError);
    }

    #[test]
    fn outcome_is_error_false_or_absent_is_ok() {
        let r = json!({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}});
        assert_eq!(Outcome::of_response(&r.into()), Outcome::Ok);
        let r = json!({"jsonrpc":"2.0","id":1,"result":{"content":[]}});
        assert_eq!(Outcome::of_response(&r.into()), Outcome::Ok);
    }

    #[test]
    fn outcome_json_rpc_error_is_rpc_error() {
        let r = json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}});
        assert_eq!(Outcome::of_response(&r.into()), Outcome::RpcError);
    }

    #[test]
    fn outcome_labels_are_distinct() {
        let mut labels: Vec<_> = Outcome::ALL.iter().map(|o| o.as_label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Outcome::ALL.len());
    }
}
