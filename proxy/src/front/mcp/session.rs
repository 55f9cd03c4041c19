//! Which downstream session a request names: one held here, or (strategy `Shared`, signed ids)
//! one another replica issued, adopted now (field case BR-35). Not responsible for: creating
//! sessions (`initialize`) or ending them.

use std::sync::Arc;

use axum::http::HeaderMap;

use crate::access::auth::Principal;
use crate::client::sessions::DownstreamSession;
use crate::front::mcp::state::Front;
use crate::wire::headers::SESSION_HEADER;

/// The live session `id` names: held here, or (strategy `Shared`, signed ids) issued by another
/// replica and adopted now (field case BR-35). `None` means 404: the client re-initializes.
///
/// A session bound to another OAuth identity is unknown to `caller` too
/// ([`DownstreamSession::admits`]).
pub(super) fn live_session(
    proxy: &Front,
    id: &str,
    caller: Option<&Principal>,
) -> Option<Arc<DownstreamSession>> {
    let session = live_session_of_anyone(proxy, id)?;
    session.admits(caller).then_some(session)
}

fn live_session_of_anyone(proxy: &Front, id: &str) -> Option<Arc<DownstreamSession>> {
    if let Some(session) = proxy.engine.sessions.get(id) {
        return Some(session);
    }
    if proxy.strategy != berth_crds::SessionStrategy::Shared {
        return None;
    }
    let session = proxy.engine.sessions.adopt(id)?;
    proxy.engine.metrics.downstream_sessions_adopted.inc();
    proxy
        .engine
        .metrics
        .downstream_sessions
        .set(proxy.engine.sessions.len() as i64);
    tracing::debug!(session = id, "adopted a session another replica issued");
    Some(session)
}

/// The `Mcp-Session-Id` a request names, if any.
pub(super) fn session_header(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}
