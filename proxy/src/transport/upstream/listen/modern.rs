//! The standalone stream of a modern (MCP 2026-07-28) upstream: a `subscriptions/listen`
//! request the proxy holds open ("Subscriptions"), asking for every list change and for the
//! resource URIs its clients subscribed to ([`UpstreamSession::set_listen_uri`]). The stream's
//! notifications go to the same sink as a legacy upstream's GET stream, so the fan-out, the
//! tools re-probe on `list_changed` and `PerClient` relays work unchanged; the acknowledgement
//! is the proxy's own and goes nowhere. When the URIs change the stream is re-opened with them
//! (closing the old response stream ends that subscription: "Cancellation"); a stream that
//! ends or fails is re-opened with backoff.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::backoff::{MAX_BACKOFF, MIN_BACKOFF};
use super::super::era::fill_meta;
use super::super::{Reply, UpstreamSession};
use super::ended::Ended;
use crate::wire::jsonrpc::WireMessage;

/// The acknowledgement that opens a listen stream.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// Holds the listen stream open until `stop` fires, the session is lost or the sink closes.
pub(super) async fn listen(
    session: Arc<UpstreamSession>,
    stop: CancellationToken,
    sink: mpsc::Sender<WireMessage>,
) -> Ended {
    let mut uris = session.watch_listen_uris();
    let mut backoff = MIN_BACKOFF;
    while !stop.is_cancelled() && !session.is_lost() {
        let current: Vec<String> = uris.borrow_and_update().iter().cloned().collect();
        let id = session.next_request_id();
        let mut request: WireMessage = json!({
            "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": { "notifications": {
                "toolsListChanged": true,
                "promptsListChanged": true,
                "resourcesListChanged": true,
                "resourceSubscriptions": current,
            }},
        })
        .into();
        fill_meta(&mut request, session.protocol_version(), session.hop());
        let opened = tokio::select! {
            () = stop.cancelled() => return Ended::Stopped,
            opened = session.send(&request) => opened,
        };
        let mut stream = match opened {
            Ok(Reply::Stream(stream)) => stream,
            Ok(_) | Err(_) => {
                // Refused or failed: tried again after the backoff, or at once for new URIs.
                tracing::debug!("modern upstream's subscriptions/listen did not open; retrying");
                tokio::select! {
                    () = stop.cancelled() => return Ended::Stopped,
                    () = tokio::time::sleep(backoff) => {}
                    changed = uris.changed() => if changed.is_err() { return Ended::Stopped },
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        session.set_standalone_open(true);
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return closed(&session, Ended::Stopped),
                changed = uris.changed() => {
                    if changed.is_err() {
                        return closed(&session, Ended::Stopped);
                    }
                    break; // re-opened with the new URIs; dropping the stream ends the old one
                }
                next = stream.next() => next,
            };
            let Some(Ok(message)) = next else {
                break;
            };
            if message.get("method").and_then(Value::as_str) == Some(ACKNOWLEDGED) {
                backoff = MIN_BACKOFF;
                continue;
            }
            if message.get("method").is_none() {
                break; // the listen request's own result: the upstream ended the subscription
            }
            if sink.send(message).await.is_err() {
                return closed(&session, Ended::Stopped);
            }
        }
        session.set_standalone_open(false);
    }
    Ended::Stopped
}

fn closed(session: &UpstreamSession, ended: Ended) -> Ended {
    session.set_standalone_open(false);
    ended
}
