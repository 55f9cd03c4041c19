//! The state a running proxy shares between its handlers: the upstream, the downstream
//! sessions and their subscriptions, the budgets and policies from the config, the metrics.
//! The call engine and the fronts read it; start-up wiring (`server`) builds it.
//!
//! Not responsible for: serving (the fronts), a request's life (`forward`), or building itself
//! from the config (`server`).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use berth_crds::{SessionStrategy, ToolsPolicySpec};
use tokio_util::sync::CancellationToken;

use crate::client::sessions::Sessions;
use crate::client::subscriptions::Subscriptions;
use crate::observe::metrics::Metrics;
use crate::transport::upstream::control::send_in_background;
use crate::transport::upstream::era::UpstreamEra;
use crate::transport::upstream::{Endpoint, Upstream};

/// State shared by every handler.
pub struct Proxy {
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
    /// Fires when the proxy stops serving; long-lived streams end with it. The upstream session
    /// outlives it until in-flight requests have finished.
    pub shutdown: CancellationToken,
    /// Set when a drain began ([`crate::server::RunningProxy::drain`]): `/readyz` answers 503
    /// `draining`. Shared with the admin endpoints ([`crate::front::admin::Admin`]).
    pub draining: Arc<AtomicBool>,
    /// `session.strategy`.
    pub strategy: SessionStrategy,
    /// `tools`: which upstream tools clients may see and call.
    pub tools_policy: ToolsPolicySpec,
    /// `tools.grants`, compiled: which of those each OAuth caller may use; `None` without
    /// grants.
    pub tool_grants: Option<crate::access::auth::grants::Grants>,
    /// The compiled `tools.rateLimits`; `None` without any.
    pub rate_limits: Option<crate::access::rate_limits::RateLimits>,
    /// Where audit events go (`audit`; [`crate::client::audit`]).
    pub auditor: crate::client::audit::Auditor,
    /// `session.maxSessions` (`PerClient`).
    pub max_sessions: usize,
    /// The upstream endpoint (HTTP, or stdio children), for `PerClient` sessions.
    pub endpoint: Endpoint,
    /// `downstreamAuth`: the static token or the OAuth resource server clients must satisfy;
    /// `None` admits every client.
    pub downstream_auth: Option<crate::access::auth::DownstreamAuth>,
    /// `requestOrigin`: the `Origin` and `Host` values the MCP endpoint accepts.
    pub request_origin: berth_crds::proxy_config::request_origin::RequestOriginSpec,
}

impl Proxy {
    /// Ends downstream session `id` (DELETE, idle expiry, or an unrecoverable upstream), releasing
    /// its resource subscriptions. Returns whether it existed.
    pub fn end_session(&self, id: &str) -> bool {
        let existed = self.sessions.remove(id);
        if existed {
            self.metrics
                .downstream_sessions
                .set(self.sessions.len() as i64);
            for uri in self.subscriptions.remove_session(id) {
                if let Some(upstream) = self.upstream.current() {
                    if upstream.era() == UpstreamEra::Modern {
                        upstream.set_listen_uri(&uri, false);
                        continue;
                    }
                    let message = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": upstream.next_request_id(),
                        "method": "resources/unsubscribe",
                        "params": { "uri": uri },
                    });
                    send_in_background(upstream, message);
                }
            }
        }
        existed
    }
}
