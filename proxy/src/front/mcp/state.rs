//! What the `/mcp` front runs on ([`Front`]): the call engine it hands requests to, and the
//! front's own settings from the config (client authentication, the `Origin` and `Host` rules,
//! the session strategy and limit, the upstream endpoint a `PerClient` session connects to).
//!
//! Not responsible for: a request's life (the engine, [`Engine`]) or building itself from the
//! config (`server`).

use std::sync::Arc;

use berth_crds::SessionStrategy;
use berth_crds::proxy_config::request_origin::RequestOriginSpec;
use tokio_util::sync::CancellationToken;

use crate::access::auth::DownstreamAuth;
use crate::engine::state::Engine;
use crate::transport::upstream::Endpoint;

/// The `/mcp` front's state: the engine, and the settings only the front reads.
pub struct Front {
    /// The call engine every request goes through.
    pub engine: Arc<Engine>,
    /// Fires when the proxy stops serving; long-lived streams end with it. The upstream session
    /// outlives it until in-flight requests have finished.
    pub shutdown: CancellationToken,
    /// `session.strategy`.
    pub strategy: SessionStrategy,
    /// The session cap of the strategy: `session.maxSessions` (`PerClient`) or
    /// `session.maxSharedSessions` (`Shared`).
    pub session_cap: usize,
    /// `session.maxSessionsPerIdentity` (or its default, half the cap): the sessions one
    /// authenticated caller may hold.
    pub sessions_per_identity: usize,
    /// The upstream endpoint (HTTP, or stdio children), for `PerClient` sessions.
    pub endpoint: Endpoint,
    /// `downstreamAuth`: the static token or the OAuth resource server clients must satisfy;
    /// `None` admits every client.
    pub downstream_auth: Option<DownstreamAuth>,
    /// `requestOrigin`: the `Origin` and `Host` values the MCP endpoint accepts.
    pub request_origin: RequestOriginSpec,
    /// `limits.maxRequestBytes`: the largest POST body, in bytes; a larger one gets 413.
    pub max_request_bytes: usize,
    /// `limits.maxListenUris`: the most resource URIs one `subscriptions/listen` may name.
    pub max_listen_uris: usize,
    /// The client sessions being opened now, counted against the session caps
    /// (`front::mcp::session_cap::make_room`).
    pub opening: crate::client::session_room::Opening,
    /// `session.newSessionsPerMinute`, per authenticated caller.
    pub new_session_rate: crate::client::session_room::NewSessionRate,
    /// `session.newSessionsPerMinute`, as configured (for refusals).
    pub new_sessions_per_minute: u32,
}
