//! Resource subscriptions, tracked per client over the shared upstream session.
//!
//! The upstream session has one subscription set for all clients, so the proxy subscribes
//! upstream when the first client subscribes to a URI and unsubscribes when the last one leaves
//! (by `resources/unsubscribe` or by its session ending). `notifications/resources/updated`
//! reaches only the clients subscribed to that URI. After a re-initialization every URI is
//! subscribed again on the new session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::client::sessions::DownstreamSession;
use crate::transport::upstream::UpstreamSession;
use crate::transport::upstream::era::UpstreamEra;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::WireMessage;

/// Answers `resources/subscribe` / `resources/unsubscribe` locally when the upstream's
/// subscription set does not change (another client already subscribed, or still is); `None`
/// when the request must go upstream. A modern upstream (MCP 2026-07-28) has no
/// `resources/subscribe`: the URI is added to (or removed from) the proxy's
/// `subscriptions/listen` stream on `upstream`, and the request is always answered here.
/// `subscriptions` is the proxy's set for the shared upstream session.
pub fn local_answer(
    subscriptions: &Subscriptions,
    session: &DownstreamSession,
    upstream: &UpstreamSession,
    id: &Value,
    method: &str,
    body: &WireMessage,
) -> Option<Answer> {
    let subscribed = match method {
        "resources/subscribe" => true,
        "resources/unsubscribe" => false,
        _ => return None,
    };
    let uri = body.view().get("params")?.get("uri")?.as_str()?;
    let modern = upstream.era() == UpstreamEra::Modern;
    let empty = || {
        Some(Answer::ok(
            json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
        ))
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
        subscriptions.add(uri, session.id())
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

/// URI -> ids of the downstream sessions subscribed to it.
#[derive(Debug, Default)]
pub struct Subscriptions {
    by_uri: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

impl Subscriptions {
    /// Adds `session` to `uri`; returns true when it is the first subscriber (the proxy must
    /// subscribe upstream).
    pub fn add(&self, uri: &str, session: &str) -> bool {
        let mut by_uri = self.by_uri.lock().unwrap_or_else(|e| e.into_inner());
        let subscribers = by_uri.entry(uri.to_owned()).or_default();
        let first = subscribers.is_empty();
        subscribers.insert(session.to_owned());
        first
    }

    /// Removes `session` from `uri`; returns true when no subscriber is left (the proxy must
    /// unsubscribe upstream).
    pub fn remove(&self, uri: &str, session: &str) -> bool {
        let mut by_uri = self.by_uri.lock().unwrap_or_else(|e| e.into_inner());
        let Some(subscribers) = by_uri.get_mut(uri) else {
            return false;
        };
        let removed = subscribers.remove(session);
        let last = removed && subscribers.is_empty();
        if subscribers.is_empty() {
            by_uri.remove(uri);
        }
        last
    }

    /// Removes `session` from every URI; returns the URIs left without subscribers.
    pub fn remove_session(&self, session: &str) -> Vec<String> {
        let mut by_uri = self.by_uri.lock().unwrap_or_else(|e| e.into_inner());
        let mut emptied = Vec::new();
        by_uri.retain(|uri, subscribers| {
            if subscribers.remove(session) && subscribers.is_empty() {
                emptied.push(uri.clone());
            }
            !subscribers.is_empty()
        });
        emptied
    }

    /// Sessions subscribed to `uri`.
    pub fn subscribers(&self, uri: &str) -> Vec<String> {
        let by_uri = self.by_uri.lock().unwrap_or_else(|e| e.into_inner());
        by_uri
            .get(uri)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every subscribed URI.
    pub fn uris(&self) -> Vec<String> {
        let by_uri = self.by_uri.lock().unwrap_or_else(|e| e.into_inner());
        by_uri.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_subscriber_and_last_leaver_reach_upstream() {
        let s = Subscriptions::default();
        assert!(s.add("file:///a", "d1"));
        assert!(
            !s.add("file:///a", "d2"),
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
        s.add("u1", "d1");
        s.add("u2", "d1");
        s.add("u2", "d2");
        assert_eq!(s.remove_session("d1"), ["u1"]);
        assert_eq!(s.uris(), ["u2"]);
    }
}
