//! `subscriptions/listen` for modern clients (MCP 2026-07-28, "Subscriptions"), mapped onto a
//! legacy upstream: the request's session is stored while the stream is open, so the
//! upstream's standalone stream reaches it like any client's (`fanout`, or a `PerClient`
//! session's own listener); resource URIs are subscribed upstream as `resources/subscribe`
//! would. The stream starts with `notifications/subscriptions/acknowledged` naming the subset
//! the upstream supports, carries only the notification types the client asked for, each tagged
//! with `_meta["io.modelcontextprotocol/subscriptionId"]` (the request's id), and ends the
//! session when the client closes it. On shutdown the stream gets the graceful closing result.

use crate::wire::jsonrpc::Pointer as _;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::client::sessions::DownstreamSession;
use crate::front::mcp::state::Front;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;

/// `_meta` key tagging every message of a subscription.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// How often an open stream marks its session active, well inside any `session.idleTimeout`.
const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// What a client asked to hear, as honored.
#[derive(Debug, Default, PartialEq)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Filter {
    /// The request's `params.notifications`, keeping only what the upstream's `capabilities`
    /// support (list changes it announces, resource subscriptions if it has `subscribe`).
    fn honored(requested: Option<&Value>, capabilities: &Value) -> Self {
        let asked = |key| requested.and_then(|n| n.get(key)) == Some(&Value::Bool(true));
        let offers = |kind: &str, flag: &str| {
            capabilities.pointer(&format!("/{kind}/{flag}")) == Some(&Value::Bool(true))
        };
        let uris = if offers("resources", "subscribe") {
            crate::wire::jsonrpc::strings(requested.and_then(|n| n.get("resourceSubscriptions")))
        } else {
            Vec::new()
        };
        Self {
            tools: asked("toolsListChanged") && offers("tools", "listChanged"),
            prompts: asked("promptsListChanged") && offers("prompts", "listChanged"),
            resources: asked("resourcesListChanged") && offers("resources", "listChanged"),
            uris,
        }
    }

    fn as_json(&self) -> Value {
        let mut honored = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                honored.insert(key.to_owned(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            honored.insert("resourceSubscriptions".to_owned(), json!(self.uris));
        }
        Value::Object(honored)
    }

    /// Whether a server notification passes.
    fn passes(&self, message: &Value) -> bool {
        match message.get("method").and_then(Value::as_str) {
            Some("notifications/tools/list_changed") => self.tools,
            Some("notifications/prompts/list_changed") => self.prompts,
            Some("notifications/resources/list_changed") => self.resources,
            Some("notifications/resources/updated") => message
                .at("/params/uri")
                .and_then(Value::as_str)
                .is_some_and(|uri| self.uris.iter().any(|u| u == uri)),
            _ => false,
        }
    }
}

/// Opens the listen stream of request `id` on `session` (request-scoped, not yet stored). A
/// listen naming more resource URIs than `limits.maxListenUris` is refused (HTTP 200, -32602
/// naming the limit, outcome `rejected`) before anything is stored or subscribed (issue 39).
pub fn open(
    proxy: &Arc<Front>,
    session: Arc<DownstreamSession>,
    id: Value,
    body: &Value,
    capabilities: &Value,
) -> Answer {
    let filter = Filter::honored(body.at("/params/notifications"), capabilities);
    if filter.uris.len() > proxy.max_listen_uris {
        return too_many_uris(proxy, &id, filter.uris.len());
    }
    proxy.engine.sessions.register(Arc::clone(&session));
    let (mut server_messages, _) = session.open_standalone();
    if let Some(dedicated) = session.dedicated() {
        dedicated.listen(crate::engine::fanout::to_client(
            Arc::downgrade(&session),
            Arc::clone(&proxy.engine.metrics),
        ));
    }
    subscribe(proxy, &session, &filter.uris);
    let (sink, stream) = mpsc::channel(crate::client::sessions::STANDALONE_BUFFER);
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION_ID: id}, "notifications": filter.as_json()}});
    let proxy = Arc::clone(proxy);
    let started = std::time::Instant::now();
    tokio::spawn(async move {
        let mut touch = tokio::time::interval(TOUCH_EVERY);
        let mut next = Some(WireMessage::from(ack));
        loop {
            if let Some(message) = next.take()
                && sink.send(message).await.is_err()
            {
                break;
            }
            tokio::select! {
                () = sink.closed() => break,
                () = proxy.shutdown.cancelled() => {
                    let done = json!({"jsonrpc": "2.0", "id": id, "result": {
                        "resultType": "complete", "_meta": {SUBSCRIPTION_ID: id}}});
                    let _ = sink.send(WireMessage::from(done)).await;
                    break;
                }
                _ = touch.tick() => {
                    let _ = proxy.engine.sessions.get(session.id());
                }
                message = server_messages.recv() => match message {
                    Some(mut message) if filter.passes(&message) => {
                        tag(&mut message, &id);
                        next = Some(message);
                    }
                    Some(_) => {}
                    None => break,
                },
            }
        }
        proxy.engine.end_session(session.id());
        // A subscription ends when either side closes it; that is its normal end.
        proxy.engine.metrics.record(
            "subscriptions/listen",
            None,
            crate::wire::outcome::Outcome::Ok,
            started.elapsed(),
            crate::observe::metrics::Era::Modern,
        );
    });
    Answer::Stream(stream)
}

/// The refusal of a listen naming `count` URIs, over `limits.maxListenUris`: counted, and
/// answered under the request's id.
fn too_many_uris(proxy: &Front, id: &Value, count: usize) -> Answer {
    let metrics = &proxy.engine.metrics;
    metrics
        .limits
        .subscriptions_refused
        .with_label_values(&["max_listen_uris"])
        .inc();
    metrics.record(
        "subscriptions/listen",
        None,
        Outcome::Rejected,
        std::time::Duration::ZERO,
        crate::observe::metrics::Era::Modern,
    );
    let limit = proxy.max_listen_uris;
    Answer::error_with_data(
        axum::http::StatusCode::OK,
        id,
        crate::wire::jsonrpc::INVALID_PARAMS,
        &format!(
            "subscriptions/listen names {count} resource URIs, more than limits.maxListenUris ({limit})"
        ),
        json!({"outcome": Outcome::Rejected.as_label(), "limit": "maxListenUris", "max": limit}),
    )
}

/// Subscribes `uris` upstream for `session`: on its own upstream session (`PerClient`), or on
/// the shared one when it is the first subscriber of a URI; `resources/subscribe` for a legacy
/// upstream (sent bounded in flight, `limits.maxProxyRequestsInFlight`), the proxy's listen
/// stream for a modern one. A URI past `limits.maxSubscriptionsPerSession` is not subscribed.
fn subscribe(proxy: &Front, session: &DownstreamSession, uris: &[String]) {
    let subscriptions = &proxy.engine.subscriptions;
    let Some(upstream) = (match session.dedicated() {
        Some(dedicated) => Some(dedicated.current()),
        None => proxy.engine.upstream.current(),
    }) else {
        return;
    };
    let modern = upstream.era() == crate::transport::upstream::era::UpstreamEra::Modern;
    let mut messages = Vec::new();
    for uri in uris {
        if session.dedicated().is_none() {
            match subscriptions.add(uri, session.id()) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(limit) => {
                    proxy
                        .engine
                        .metrics
                        .limits
                        .subscriptions_refused
                        .with_label_values(&[limit.as_label()])
                        .inc();
                    tracing::warn!(error = %limit, "subscriptions/listen: a URI left out at a limit");
                    match limit {
                        crate::client::subscriptions::SubscriptionLimit::UriBytes { .. } => {
                            continue;
                        }
                        crate::client::subscriptions::SubscriptionLimit::PerSession { .. } => break,
                    }
                }
            }
        }
        if modern {
            upstream.set_listen_uri(uri, true);
            continue;
        }
        messages.push(WireMessage::from(
            json!({"jsonrpc": "2.0", "id": upstream.next_request_id(),
                "method": "resources/subscribe", "params": {"uri": uri}}),
        ));
    }
    subscriptions.send_all(upstream, messages);
}

/// Adds the subscription id to the notification's `params._meta`, replacing the one a modern
/// upstream put there for the proxy's own listen stream.
fn tag(message: &mut WireMessage, id: &Value) {
    if message
        .at("/params/_meta")
        .and_then(|meta| meta.get(SUBSCRIPTION_ID))
        .is_some()
    {
        message.set(&["params", "_meta", SUBSCRIPTION_ID], id);
    } else if message.at("/params/_meta").is_some_and(Value::is_object) {
        message.insert_member(&["params", "_meta"], SUBSCRIPTION_ID, id);
    } else if message.get("params").is_some_and(Value::is_object) {
        message.insert_member(&["params"], "_meta", &json!({ SUBSCRIPTION_ID: id }));
    } else {
        message.insert_member(&[], "params", &json!({"_meta": { SUBSCRIPTION_ID: id }}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_keeps_what_was_asked_and_the_upstream_supports() {
        let caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
        let asked = json!({"toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["file:///a"]});
        let filter = Filter::honored(Some(&asked), &caps);
        assert_eq!(
            filter.as_json(),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a"]})
        );
        assert!(filter.passes(&json!({"method": "notifications/tools/list_changed"})));
        assert!(!filter.passes(&json!({"method": "notifications/prompts/list_changed"})));
        assert!(!filter.passes(&json!({"method": "notifications/message", "params": {}})));
        let updated =
            |uri| json!({"method": "notifications/resources/updated", "params": {"uri": uri}});
        assert!(filter.passes(&updated("file:///a")));
        assert!(!filter.passes(&updated("file:///b")));
    }

    #[test]
    fn tag_adds_the_subscription_id_to_params_meta() {
        let mut bare = WireMessage::from(
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
        );
        tag(&mut bare, &json!(7));
        assert_eq!(bare["params"]["_meta"][SUBSCRIPTION_ID], json!(7));
        let mut with_meta = WireMessage::parse(
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x:/1","_meta":{"k":1}}}"#,
        )
        .expect("parse");
        tag(&mut with_meta, &json!("s"));
        assert_eq!(
            with_meta["params"]["_meta"],
            json!({SUBSCRIPTION_ID: "s", "k": 1})
        );
    }
}
