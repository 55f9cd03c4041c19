//! What the call engine needs to run a request's life ([`Engine`]): the upstream, the
//! downstream sessions and their subscriptions, the calls parked for input, the budgets and tool
//! rules from the config, the metrics and the audit log. The engine's steps get it passed in;
//! the fronts hold one beside their own settings; start-up wiring
//! (`server`) builds it.
//!
//! Not responsible for: serving or the fronts' settings (client auth, `Origin` rules, session
//! limits: `front::mcp`), a request's life (`forward`), or building itself from the config
//! (`server`).

use std::sync::Arc;
use std::time::Duration;

use berth_crds::ToolsPolicySpec;

use crate::client::sessions::Sessions;
use crate::client::subscriptions::Subscriptions;
use crate::observe::metrics::Metrics;
use crate::transport::upstream::Upstream;
use crate::transport::upstream::era::UpstreamEra;
use crate::wire::jsonrpc::WireMessage;

/// What the call engine runs on, shared by every request.
pub struct Engine {
    /// The shared upstream session.
    pub upstream: Arc<Upstream>,
    /// Downstream sessions.
    pub sessions: Arc<Sessions>,
    /// Resource subscriptions per client.
    pub subscriptions: Arc<Subscriptions>,
    /// Calls parked on a legacy upstream's server request until their modern client retries
    /// (MRTR bridging, issue 13).
    pub parked: crate::client::parked::ParkedCalls,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// `timeouts.call`.
    pub call_budget: Duration,
    /// `timeouts.maxCall`: when set, progress restarts the call budget up to this cap.
    pub max_call: Option<Duration>,
    /// `timeouts.connect`.
    pub connect_budget: Duration,
    /// `tools`: which upstream tools clients may see and call.
    pub tools_policy: ToolsPolicySpec,
    /// `tools.grants`, compiled: which of those each OAuth caller may use; `None` without
    /// grants.
    pub tool_grants: Option<crate::access::auth::grants::Grants>,
    /// The compiled `tools.rateLimits`; `None` without any.
    pub rate_limits: Option<crate::access::rate_limits::RateLimits>,
    /// Where audit events go (`audit`; [`crate::client::audit`]).
    pub auditor: crate::client::audit::Auditor,
}

impl Engine {
    /// Ends downstream session `id` (DELETE, idle expiry, or an unrecoverable upstream), releasing
    /// its resource subscriptions. Returns whether it existed.
    pub fn end_session(&self, id: &str) -> bool {
        let existed = self.sessions.remove(id);
        if existed {
            self.metrics
                .downstream_sessions
                .set(self.sessions.len() as i64);
            let emptied = self.subscriptions.remove_session(id);
            if let (false, Some(upstream)) = (emptied.is_empty(), self.upstream.current()) {
                let mut messages = Vec::new();
                for uri in emptied {
                    if upstream.era() == UpstreamEra::Modern {
                        upstream.set_listen_uri(&uri, false);
                        continue;
                    }
                    messages.push(WireMessage::from(serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": upstream.next_request_id(),
                        "method": "resources/unsubscribe",
                        "params": { "uri": uri },
                    })));
                }
                self.subscriptions.send_all(upstream, messages);
            }
        }
        existed
    }
}
