//! The upstream session's standalone stream (`GET`, MCP 2025-06-18 "Listening for Messages
//! from the Server"), kept open for as long as the session lives.
//!
//! A broken or idle-closed stream is reopened with backoff, sending `Last-Event-ID` when the
//! upstream sent event ids; a read timeout never ends the session by itself (field case BR-15).
//! A modern upstream has no standalone stream: the proxy holds a `subscriptions/listen`
//! request open instead (the child module `modern`).

mod ended;
mod modern;

pub use ended::Ended;

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::backoff::{MAX_BACKOFF, MIN_BACKOFF};
use super::session::Link;
use super::{UpstreamError, UpstreamSession};
use crate::wire::jsonrpc::WireMessage;

/// Hands every message of the session's standalone stream to `sink` until `stop` fires, the
/// session is lost, or the sink closes. For a stdio session the standalone stream is every
/// child message that belongs to no pending request; its end (the child's) is `Lost`.
pub async fn listen(
    session: Arc<UpstreamSession>,
    stop: CancellationToken,
    sink: mpsc::Sender<WireMessage>,
) -> Ended {
    if session.era() == super::era::UpstreamEra::Modern {
        return modern::listen(session, stop, sink).await;
    }
    let (http, id) = match session.link() {
        Link::Http(http, Some(id)) => (http.clone(), id.clone()),
        Link::Http(_, None) => return Ended::Stopped,
        Link::Stdio(connection) => {
            let Some(mut messages) = connection.take_standalone() else {
                return Ended::Stopped;
            };
            loop {
                let message = tokio::select! {
                    () = stop.cancelled() => return Ended::Stopped,
                    message = messages.recv() => message,
                };
                let Some(message) = message else {
                    return Ended::Lost;
                };
                if sink.send(message).await.is_err() {
                    return Ended::Stopped;
                }
            }
        }
    };
    let protocol = session.protocol_version().to_owned();
    let mut last_event_id: Option<String> = None;
    let mut backoff = MIN_BACKOFF;
    while !stop.is_cancelled() && !session.is_lost() {
        let opened = tokio::select! {
            () = stop.cancelled() => return Ended::Stopped,
            opened = http.get(&id, &protocol, last_event_id.as_deref()) => opened,
        };
        match opened {
            Ok(None) => return Ended::Stopped,
            Ok(Some(mut stream)) => {
                backoff = MIN_BACKOFF;
                session.set_standalone_open(true);
                let _closed = StandaloneOpen(&session);
                loop {
                    let next = tokio::select! {
                        () = stop.cancelled() => return Ended::Stopped,
                        next = stream.next() => next,
                    };
                    let Some(Ok((event_id, message))) = next else {
                        break;
                    };
                    if event_id.is_some() {
                        last_event_id = event_id;
                    }
                    if sink.send(message).await.is_err() {
                        return Ended::Stopped;
                    }
                }
            }
            Err(UpstreamError::SessionLost) => return Ended::Lost,
            Err(error) => {
                tracing::debug!(error = %error, "upstream standalone stream failed; reopening");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return Ended::Stopped,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    Ended::Stopped
}

/// Marks the session's standalone stream closed when the stream (or the listener) ends.
struct StandaloneOpen<'a>(&'a UpstreamSession);

impl Drop for StandaloneOpen<'_> {
    fn drop(&mut self) {
        self.0.set_standalone_open(false);
    }
}
