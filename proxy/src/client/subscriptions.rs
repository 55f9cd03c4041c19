//! Resource subscriptions, tracked per client over the shared upstream session.
//!
//! The upstream session has one subscription set for all clients, so the proxy subscribes
//! upstream when the first client subscribes to a URI and unsubscribes when the last one leaves
//! (by `resources/unsubscribe` or by its session ending). `notifications/resources/updated`
//! reaches only the clients subscribed to that URI. After a re-initialization every URI is
//! subscribed again on the new session. A client session holds at most
//! `limits.maxSubscriptionsPerSession` URIs, and the subscribes and unsubscribes the proxy
//! sends on its own go through [`OwnRequests`], bounded in flight (issue 39, item 4).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::client::sessions::DownstreamSession;
use crate::transport::upstream::UpstreamSession;
use crate::transport::upstream::control::OwnRequests;
use crate::transport::upstream::era::UpstreamEra;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::WireMessage;

/// Answers `resources/subscribe` / `resources/unsubscribe` locally when the upstream's
/// subscription set does not change (another client already subscribed, or still is); `None`
/// when the request must go upstream. A modern upstream (MCP 2026-07-28) has no
/// `resources/subscribe`: the URI is added to (or removed from) the proxy's
/// `subscriptions/listen` stream on `upstream`, and the request is always answered here.
/// `subscriptions` is the proxy's set for the shared upstream session.
///
/// # Errors
/// `Some(Err(_))` when a subscribe would take the session past
/// `limits.maxSubscriptionsPerSession` (nothing changes; the caller refuses the request).
pub fn local_answer(
    subscriptions: &Subscriptions,
    session: &DownstreamSession,
    upstream: &UpstreamSession,
    id: &Value,
    method: &str,
    body: &WireMessage,
) -> Option<Result<Answer, SubscriptionLimit>> {
    let subscribed = match method {
        "resources/subscribe" => true,
        "resources/unsubscribe" => false,
        _ => return None,
    };
    let uri = body.view().get("params")?.get("uri")?.as_str()?;
    let modern = upstream.era() == UpstreamEra::Modern;
    let empty = || {
        Some(Ok(Answer::ok(
            json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
        )))
    };
    if session.dedicated().is_some() {
        // PerClient: the client's own upstream session holds its subscriptions.
        if modern {
            upstream.set_listen_uri(uri, subscribed);
            return empty();
        }
        return None;
    }
    let upstream_changes = if subscribed {
        match subscriptions.add(uri, session.id()) {
            Ok(first) => first,
            Err(limit) => return Some(Err(limit)),
        }
    } else {
        subscriptions.remove(uri, session.id())
    };
    if modern {
        if upstream_changes {
            upstream.set_listen_uri(uri, subscribed);
        }
        return empty();
    }
    if upstream_changes { None } else { empty() }
}

/// A subscribe refused by a limit (issue 39, item 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionLimit {
    /// The session holds `limit` URIs already (`limits.maxSubscriptionsPerSession`).
    #[error(
        "resource subscription refused: the session is subscribed to {limit} resources, the most limits.maxSubscriptionsPerSession allows"
    )]
    PerSession {
        /// The limit.
        limit: usize,
    },
    /// The URI is `bytes` long, over `limit` (`limits.maxUriBytes`).
    #[error(
        "resource subscription refused: the URI is {bytes} bytes, more than limits.maxUriBytes ({limit})"
    )]
    UriBytes {
        /// The URI's length, in bytes.
        bytes: usize,
        /// The limit, in bytes.
        limit: usize,
    },
}

impl SubscriptionLimit {
    /// The `limit` label of `berth_proxy_subscriptions_refused_total`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::PerSession { .. } => "max_subscriptions_per_session",
            Self::UriBytes { .. } => "max_uri_bytes",
        }
    }
}

/// URI -> ids of the downstream sessions subscribed to it, with a cap per session and the
/// sender of the proxy's own subscribes and unsubscribes.
#[derive(Debug)]
pub struct Subscriptions {
    inner: Mutex<Inner>,
    max_per_session: usize,
    max_uri_bytes: usize,
    own_requests: OwnRequests,
}

#[derive(Debug, Default)]
struct Inner {
    by_uri: BTreeMap<String, BTreeSet<String>>,
    /// How many URIs each session is subscribed to.
    per_session: HashMap<String, usize>,
}

impl Inner {
    fn forget_one(&mut self, session: &str) {
        if let Some(count) = self.per_session.get_mut(session) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_session.remove(session);
            }
        }
    }
}

impl Default for Subscriptions {
    /// 1024 URIs per session, 16 own requests in flight, URIs of at most 4096 bytes.
    fn default() -> Self {
        Self::new(1024, OwnRequests::default())
    }
}

impl Subscriptions {
    /// At most `max_per_session` URIs per session; own requests sent through `own_requests`;
    /// URIs of at most 4096 bytes ([`Self::with_max_uri_bytes`]).
    pub fn new(max_per_session: usize, own_requests: OwnRequests) -> Self {
        Self {
            inner: Mutex::default(),
            max_per_session,
            max_uri_bytes: 4096,
            own_requests,
        }
    }

    /// The same table refusing URIs longer than `max_uri_bytes` (`limits.maxUriBytes`).
    #[must_use]
    pub fn with_max_uri_bytes(mut self, max_uri_bytes: usize) -> Self {
        self.max_uri_bytes = max_uri_bytes;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends the proxy's own `messages` (subscribes, unsubscribes) on `upstream`, bounded in
    /// flight ([`OwnRequests::send_all`]).
    pub fn send_all(&self, upstream: Arc<UpstreamSession>, messages: Vec<WireMessage>) {
        self.own_requests.send_all(upstream, messages);
    }

    /// Adds `session` to `uri`; `Ok(true)` when it is the first subscriber (the proxy must
    /// subscribe upstream).
    ///
    /// # Errors
    /// [`SubscriptionLimit::UriBytes`] when `uri` is longer than `limits.maxUriBytes`;
    /// [`SubscriptionLimit::PerSession`] when `session` holds `limits.maxSubscriptionsPerSession`
    /// URIs already and `uri` is not one of them. Nothing changes.
    pub fn add(&self, uri: &str, session: &str) -> Result<bool, SubscriptionLimit> {
        if uri.len() > self.max_uri_bytes {
            return Err(SubscriptionLimit::UriBytes {
                bytes: uri.len(),
                limit: self.max_uri_bytes,
            });
        }
        let mut inner = self.lock();
        let held = inner.per_session.get(session).copied().unwrap_or(0);
        let already = inner
            .by_uri
            .get(uri)
            .is_some_and(|subscribers| subscribers.contains(session));
        if already {
            return Ok(false);
        }
        if held >= self.max_per_session {
            return Err(SubscriptionLimit::PerSession {
                limit: self.max_per_session,
            });
        }
        *inner.per_session.entry(session.to_owned()).or_default() += 1;
        let subscribers = inner.by_uri.entry(uri.to_owned()).or_default();
        let first = subscribers.is_empty();
        subscribers.insert(session.to_owned());
        Ok(first)
    }

    /// Removes `session` from `uri`; returns true when no subscriber is left (the proxy must
    /// unsubscribe upstream).
    pub fn remove(&self, uri: &str, session: &str) -> bool {
        let mut inner = self.lock();
        let Some(subscribers) = inner.by_uri.get_mut(uri) else {
            return false;
        };
        let removed = subscribers.remove(session);
        let last = removed && subscribers.is_empty();
        if subscribers.is_empty() {
            inner.by_uri.remove(uri);
        }
        if removed {
            inner.forget_one(session);
        }
        last
    }

    /// Removes `session` from every URI; returns the URIs left without subscribers.
    pub fn remove_session(&self, session: &str) -> Vec<String> {
        let mut inner = self.lock();
        inner.per_session.remove(session);
        let mut emptied = Vec::new();
        inner.by_uri.retain(|uri, subscribers| {
            if subscribers.remove(session) && subscribers.is_empty() {
                emptied.push(uri.clone());
            }
            !subscribers.is_empty()
        });
        emptied
    }

    /// Sessions subscribed to `uri`.
    pub fn subscribers(&self, uri: &str) -> Vec<String> {
        self.lock()
            .by_uri
            .get(uri)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every subscribed URI.
    pub fn uris(&self) -> Vec<String> {
        self.lock().by_uri.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_subscriber_and_last_leaver_reach_upstream() {
        let s = Subscriptions::default();
        assert_eq!(s.add("file:///a", "d1"), Ok(true));
        assert!(
            !s.add("file:///a", "d2").expect("under the cap"),
            "second subscriber is answered locally"
        );
        assert!(!s.remove("file:///a", "d1"), "d2 still subscribed");
        assert_eq!(s.subscribers("file:///a"), ["d2"]);
        assert!(s.remove("file:///a", "d2"));
        assert!(s.uris().is_empty());
    }

    #[test]
    fn ending_a_session_releases_its_uris() {
        let s = Subscriptions::default();
        for (uri, session) in [("u1", "d1"), ("u2", "d1"), ("u2", "d2")] {
            s.add(uri, session).expect("under the cap");
        }
        assert_eq!(s.remove_session("d1"), ["u1"]);
        assert_eq!(s.uris(), ["u2"]);
    }

    #[test]
    fn subscriptions_past_the_session_cap_are_refused_and_freed_by_removal() {
        let s = Subscriptions::new(2, OwnRequests::default());
        assert_eq!(s.add("u1", "d1"), Ok(true));
        assert_eq!(s.add("u2", "d1"), Ok(true));
        assert_eq!(
            s.add("u2", "d1"),
            Ok(false),
            "a URI held already is not counted twice"
        );
        assert_eq!(
            s.add("u3", "d1"),
            Err(SubscriptionLimit::PerSession { limit: 2 })
        );
        assert_eq!(s.add("u3", "d2"), Ok(true), "the cap is per session");
        assert!(s.remove("u1", "d1"));
        assert_eq!(s.add("u3", "d1"), Ok(false));
        s.remove_session("d1");
        assert_eq!(s.add("u4", "d1"), Ok(true));
    }
}

#[cfg(test)]
mod uri_tests {
    use super::*;

    #[test]
    fn a_uri_over_max_uri_bytes_is_refused_and_nothing_is_kept() {
        let s = Subscriptions::default().with_max_uri_bytes(256);
        let long = format!("file:///{}", "x".repeat(300));
        assert_eq!(
            s.add(&long, "d1"),
            Err(SubscriptionLimit::UriBytes {
                bytes: long.len(),
                limit: 256
            })
        );
        assert!(s.uris().is_empty());
        assert_eq!(s.add("file:///short", "d1"), Ok(true));
    }
}
