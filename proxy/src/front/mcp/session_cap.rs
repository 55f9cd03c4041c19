//! Room for a new client session under the session caps (issue 39, item 5; issue 13): the
//! strategy's cap (`session.maxSessions` for `PerClient`, `session.maxSharedSessions` for
//! `Shared`) and the per-identity quota (`session.maxSessionsPerIdentity`).
//!
//! Room is made first from the caller's own sessions: its least recently active idle one (no
//! request in flight, no open stream) is ended. At the cap, a caller with no idle session of its
//! own may end the least recently active idle session of an identity holding at least two more
//! sessions than it does, so abandoned sessions never lock new callers out for a whole idle
//! timeout (issue 13), and no caller is ever left with fewer sessions than the one that ended
//! its session. At its quota, a caller ends only its own. Without OAuth every caller is the
//! same anonymous one and only the cap applies.
//!
//! Room is reserved, not only found: [`make_room`] counts the sessions still being opened (a
//! `PerClient` handshake can take seconds) and returns a [`Reservation`] the caller holds until
//! its session exists, so concurrent `initialize`s cannot all pass the check before any of them
//! is created and together overshoot a cap (each `PerClient` one with a child process).
//!
//! Not responsible for: opening the session (`initialize`, `modern`) or ending idle sessions
//! on expiry (`server::tasks`).

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::access::auth::Principal;
use crate::client::session_room::Reservation;
use crate::front::mcp::state::Front;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::outcome::Outcome;

/// Which limit a new session would break: each names its spec field and is the `limit` label
/// of `berth_proxy_session_limit_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionLimit {
    /// `session.maxSessions` (`PerClient`), or a stdio host's `--max-children`.
    MaxSessions,
    /// `session.maxSharedSessions` (`Shared`).
    MaxSharedSessions,
    /// `session.maxSessionsPerIdentity`.
    PerIdentity,
    /// `session.newSessionsPerMinute`: the caller opened its sessions too fast; it may try
    /// again after this many seconds (at least 1).
    NewSessionRate {
        /// `Retry-After`, in seconds.
        retry_after_secs: u64,
    },
}

impl SessionLimit {
    /// The spec field, also the metric label.
    pub fn field(self) -> &'static str {
        match self {
            Self::MaxSessions => "maxSessions",
            Self::MaxSharedSessions => "maxSharedSessions",
            Self::PerIdentity => "maxSessionsPerIdentity",
            Self::NewSessionRate { .. } => "newSessionsPerMinute",
        }
    }

    fn cap_of(proxy: &Front) -> Self {
        match proxy.strategy {
            berth_crds::SessionStrategy::Shared => Self::MaxSharedSessions,
            berth_crds::SessionStrategy::PerClient => Self::MaxSessions,
        }
    }
}

/// Makes room for one more session of `caller` and reserves it: while the caller is at its
/// quota, or the sessions (those being opened included) are at the cap, ends the caller's own
/// least recently active idle session (counted in
/// `berth_proxy_downstream_sessions_evicted_total`).
///
/// # Errors
/// The [`SessionLimit`] reached when every session of the caller is busy (or it has none).
pub fn make_room<'a>(
    proxy: &'a Front,
    caller: Option<&Principal>,
) -> Result<Reservation<'a>, SessionLimit> {
    let owner = caller.map(Principal::owner_digest);
    if let Some(owner) = &owner
        && let Err(wait) = proxy.new_session_rate.admit(owner)
    {
        return Err(SessionLimit::NewSessionRate {
            retry_after_secs: crate::access::rate_limits::retry_after_secs(wait),
        });
    }
    let sessions = &proxy.engine.sessions;
    // Held for the whole check: two callers never both take the last place.
    let opening = proxy.opening.lock();
    let held_by_all = |opening: &crate::client::session_room::OpeningGuard<'_>| {
        let scoped = match proxy.strategy {
            berth_crds::SessionStrategy::PerClient => sessions.request_scoped_len(),
            berth_crds::SessionStrategy::Shared => 0,
        };
        sessions.len() + scoped + opening.total()
    };
    loop {
        let (held, idle) = sessions.owned_by(owner.as_deref());
        let pending = owner.as_deref().map_or(0, |owner| opening.of(owner));
        let held = held + pending;
        let limit = if owner.is_some() && held >= proxy.sessions_per_identity {
            SessionLimit::PerIdentity
        } else if held_by_all(&opening) >= proxy.session_cap {
            SessionLimit::cap_of(proxy)
        } else {
            return Ok(opening.reserve(owner));
        };
        // At the cap (not the caller's quota), a caller with no idle session of its own may
        // end one of an identity holding at least two more than it does.
        let idle = idle.or_else(|| {
            (limit != SessionLimit::PerIdentity)
                .then(|| sessions.idle_of_a_larger_holder(held))
                .flatten()
        });
        let Some(id) = idle else {
            return Err(limit);
        };
        if proxy.engine.end_session(&id) {
            proxy.engine.metrics.downstream_sessions_evicted.inc();
            tracing::info!(
                mcp.session_id = %id,
                limit = limit.field(),
                "ended the caller's least recently active idle session to make room"
            );
        }
    }
}

/// A new session refused at `limit`: 503, -32014, outcome `rejected`, the field named in the
/// message and in `data.limit`; counted in `berth_proxy_session_limit_refusals_total{limit}`.
pub fn refused(proxy: &Front, id: &Value, limit: SessionLimit) -> Answer {
    proxy
        .engine
        .metrics
        .session_limit_refusals
        .with_label_values(&[limit.field()])
        .inc();
    if let SessionLimit::NewSessionRate { retry_after_secs } = limit {
        let mut answer = session_limit_answer(
            proxy,
            id,
            "this caller opens client sessions faster than session.newSessionsPerMinute allows; retry after Retry-After seconds",
            json!({ "limit": limit.field(), "value": proxy.new_sessions_per_minute }),
        );
        if let Answer::Json { body, .. } = answer {
            answer = Answer::TooManyRequests {
                body,
                retry_after_secs,
            };
        }
        return answer;
    }
    let (value, message) = match limit {
        SessionLimit::PerIdentity => (
            proxy.sessions_per_identity,
            "this caller holds its maximum number of client sessions (session.maxSessionsPerIdentity) and every one of them is busy; end one (DELETE) or retry later",
        ),
        SessionLimit::MaxSharedSessions => (
            proxy.session_cap,
            "the proxy keeps its maximum number of client sessions (session.maxSharedSessions) and this caller has none idle to end; retry later",
        ),
        SessionLimit::MaxSessions | SessionLimit::NewSessionRate { .. } => (
            proxy.session_cap,
            "the proxy serves its maximum number of client sessions (session.maxSessions) and every one of them is busy; retry later",
        ),
    };
    session_limit_answer(
        proxy,
        id,
        message,
        json!({ "limit": limit.field(), "value": value }),
    )
}

/// A new session refused at a session limit (`message` names its field): 503, -32014, outcome
/// `rejected`, `data` with the outcome added.
fn session_limit_answer(proxy: &Front, id: &Value, message: &str, mut data: Value) -> Answer {
    proxy.engine.metrics.record(
        "initialize",
        None,
        Outcome::Rejected,
        Duration::ZERO,
        crate::observe::metrics::Era::Legacy,
    );
    data["outcome"] = json!(Outcome::Rejected.as_label());
    Answer::error_with_data(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        jsonrpc::SESSION_LIMIT,
        message,
        data,
    )
}
