//! Event ids on a session's SSE streams, and resuming a broken stream from `Last-Event-ID`
//! (MCP 2025-11-25, "Transports: Resumability and Redelivery"; issue 13).
//!
//! Every stream the proxy writes to a legacy client (a POST's reply stream, the standalone GET
//! stream) passes through a pump that numbers its events `<log>.<stream>.<seq>` and keeps them
//! in the session's [`EventLog`] before handing them to the connection. When the connection
//! drops, the pump keeps going: a call's stream is not cancelled by a disconnect (the spec: a
//! disconnection is not a cancellation), its remaining messages and final response are kept,
//! and a `GET` with `Last-Event-ID` replays what followed that id on that stream only, then
//! carries the stream on live. `<log>` is random per session and replica, so an id minted by
//! another replica is never taken for one of ours.
//!
//! Bounds: [`STREAM_EVENTS`] events per stream, [`RETAINED_BYTES`] of message text per
//! session (the oldest finished streams go first), the [`ReplayBudget`] of all sessions
//! together (the streams that finished first, in any session, go first), and a standalone
//! stream nobody reads is given up after [`DETACHED_GRACE`], after which server messages for it
//! are dropped and counted as before.

mod budget;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::wire::answer::StreamEvent;
use crate::wire::jsonrpc::WireMessage;
pub use budget::ReplayBudget;

/// Events kept per stream for replay; older ones are dropped first.
pub const STREAM_EVENTS: usize = 256;
/// Message text (bytes) a session keeps for replay across its streams.
pub const RETAINED_BYTES: usize = 4 << 20;
/// Streams a session remembers, finished or not; the oldest finished is forgotten first.
pub const RETAINED_STREAMS: usize = 32;
/// How long a standalone stream is kept for a client that lost its connection to resume.
pub const DETACHED_GRACE: Duration = Duration::from_secs(30);
/// Events buffered towards one connection beyond the replayed ones.
const CONNECTION_BUFFER: usize = 32;

/// The kind of stream a pump carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// A POST's reply stream: ends with the request's final response.
    Reply,
    /// The session's standalone GET stream.
    Standalone,
}

/// A session's numbered SSE streams and the events kept for resumption.
#[derive(Debug)]
pub struct EventLog {
    prefix: String,
    inner: Mutex<Inner>,
    /// The replay budget of all sessions, which this log's kept bytes count against.
    budget: Arc<ReplayBudget>,
}

#[derive(Debug, Default)]
struct Inner {
    next_stream: u64,
    streams: VecDeque<StreamLog>,
    bytes: usize,
}

#[derive(Debug)]
struct StreamLog {
    number: u64,
    kind: StreamKind,
    next_seq: u64,
    /// The text of each message kept, by sequence number: text only, so a kept message costs
    /// its bytes and not also its parsed view (re-parsed on the rare replay).
    events: VecDeque<(u64, bytes::Bytes)>,
    finished: bool,
    connection: Option<mpsc::Sender<StreamEvent>>,
}

/// Why a `Last-Event-ID` could not be resumed: the client gets a plain GET stream instead.
#[derive(Debug, PartialEq, Eq)]
pub enum Unresumable {
    /// Not an id this session's log minted (another replica's, malformed, or forgotten).
    Unknown,
    /// The stream is known but events after the id were dropped by the bounds above.
    Evicted,
}

impl Unresumable {
    /// The `result` label of `berth_proxy_stream_resumptions_total`.
    pub fn as_label(&self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Evicted => "evicted",
        }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        self.budget.release(inner.bytes);
    }
}

impl budget::Forget for EventLog {
    fn forget(&self, stream: u64) {
        let released = {
            let mut inner = self.lock();
            match inner
                .streams
                .iter()
                .position(|s| s.number == stream && s.finished)
            {
                Some(index) => inner.remove(index),
                None => 0,
            }
        };
        self.budget.release(released);
    }

    fn holds(&self, stream: u64) -> bool {
        self.lock().streams.iter().any(|s| s.number == stream)
    }
}

fn rand_u32() -> u32 {
    // The low bits of a random (v4) UUID, from the operating system's CSPRNG.
    uuid::Uuid::new_v4().as_u128() as u32
}

impl EventLog {
    /// An empty log whose kept bytes count against `budget`.
    pub fn new(budget: Arc<ReplayBudget>) -> Self {
        Self {
            prefix: format!("{:08x}", rand_u32()),
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// Numbers the messages of `messages` and keeps them until the stream ends (the sender
    /// side is dropped) or `closed` fires (the session ended). Returns the events for the
    /// connection: the priming event first when `prime`, then each message. The returned
    /// receiver may be dropped at any time; the stream goes on for [`EventLog::resume`].
    pub fn carry(
        self: &Arc<Self>,
        kind: StreamKind,
        messages: mpsc::Receiver<WireMessage>,
        prime: bool,
        closed: CancellationToken,
    ) -> mpsc::Receiver<StreamEvent> {
        let (tx, rx) = mpsc::channel(CONNECTION_BUFFER);
        let number = {
            let mut inner = self.lock();
            inner.next_stream += 1;
            let number = inner.next_stream;
            if prime {
                let _ = tx.try_send(StreamEvent {
                    id: self.event_id(number, 0),
                    message: None,
                });
            }
            inner.streams.push_back(StreamLog {
                number,
                kind,
                next_seq: 1,
                events: VecDeque::new(),
                finished: false,
                connection: Some(tx),
            });
            self.budget.release(inner.trim());
            number
        };
        tokio::spawn(Arc::clone(self).pump(kind, number, messages, closed));
        rx
    }

    /// The events after `last_event_id` on the stream that minted it, then that stream live
    /// until it ends. The stream's previous connection, if still open, is replaced.
    ///
    /// # Errors
    /// [`Unresumable`] when the id is not this log's or its successors were dropped.
    pub fn resume(&self, last_event_id: &str) -> Result<mpsc::Receiver<StreamEvent>, Unresumable> {
        let (number, seq) = self.parse(last_event_id).ok_or(Unresumable::Unknown)?;
        let mut inner = self.lock();
        let stream = inner
            .streams
            .iter_mut()
            .find(|s| s.number == number)
            .ok_or(Unresumable::Unknown)?;
        if seq >= stream.next_seq {
            return Err(Unresumable::Unknown);
        }
        let oldest = stream.events.front().map_or(stream.next_seq, |(s, _)| *s);
        if seq + 1 < oldest {
            return Err(Unresumable::Evicted);
        }
        let replay: Vec<_> = stream.events.iter().filter(|(s, _)| *s > seq).collect();
        let (tx, rx) = mpsc::channel(replay.len() + CONNECTION_BUFFER);
        for (s, text) in replay {
            // Kept text was a message's own: it parses again.
            let Ok(message) = WireMessage::parse(text) else {
                continue;
            };
            let _ = tx.try_send(StreamEvent {
                id: self.event_id(number, *s),
                message: Some(message),
            });
        }
        stream.connection = (!stream.finished).then_some(tx);
        Ok(rx)
    }

    /// Whether this session's standalone stream is kept only for resumption: carried here, not
    /// finished, and no client connected to it (its connection dropped within
    /// [`DETACHED_GRACE`]). Such a session may be ended at the session cap.
    pub fn standalone_detached(&self) -> bool {
        self.lock().streams.iter().any(|s| {
            s.kind == StreamKind::Standalone
                && !s.finished
                && s.connection.as_ref().is_none_or(mpsc::Sender::is_closed)
        })
    }

    async fn pump(
        self: Arc<Self>,
        kind: StreamKind,
        number: u64,
        mut messages: mpsc::Receiver<WireMessage>,
        closed: CancellationToken,
    ) {
        let mut detached_at = None;
        loop {
            let connection = self.connection(number);
            detached_at = match (&connection, detached_at) {
                (Some(_), _) => None,
                (None, None) => Some(tokio::time::Instant::now()),
                (None, since) => since,
            };
            let give_up = detached_at.filter(|_| kind == StreamKind::Standalone);
            let message = tokio::select! {
                message = messages.recv() => message,
                // A reply stream ends with its call, which is answered (if only with an error)
                // when the session ends; a standalone one ends with the session, after what was
                // already queued on it.
                () = closed.cancelled(), if kind == StreamKind::Standalone => {
                    messages.close();
                    messages.try_recv().ok()
                }
                () = sleep_until(give_up), if give_up.is_some() => None,
                () = gone(connection.as_ref()), if connection.is_some() => {
                    self.detach(number, connection.as_ref());
                    continue;
                }
            };
            let Some(message) = message else { break };
            let (event, connection) = self.append(number, message);
            if let Some(connection) = connection
                && connection.send(event).await.is_err()
            {
                self.detach(number, Some(&connection));
            }
        }
        self.finish(number);
    }

    fn append(
        &self,
        number: u64,
        message: WireMessage,
    ) -> (StreamEvent, Option<mpsc::Sender<StreamEvent>>) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let text = bytes::Bytes::copy_from_slice(message.text().as_bytes());
        let size = text.len();
        let (seq, connection) = match inner.streams.iter_mut().find(|s| s.number == number) {
            Some(stream) => {
                let seq = stream.next_seq;
                stream.next_seq += 1;
                stream.events.push_back((seq, text));
                let dropped = if stream.events.len() > STREAM_EVENTS {
                    stream.events.pop_front().map_or(0, |(_, text)| text.len())
                } else {
                    0
                };
                let connection = stream.connection.clone();
                inner.bytes = inner.bytes + size - dropped;
                self.budget.add(size);
                self.budget.release(dropped);
                (seq, connection)
            }
            // Forgotten under the bounds while live: its connection still gets the message.
            None => (0, None),
        };
        self.budget.release(inner.trim());
        drop(guard);
        self.budget.enforce();
        let event = StreamEvent {
            id: self.event_id(number, seq),
            message: Some(message),
        };
        (event, connection)
    }

    fn connection(&self, number: u64) -> Option<mpsc::Sender<StreamEvent>> {
        let inner = self.lock();
        inner
            .streams
            .iter()
            .find(|s| s.number == number)
            .and_then(|s| s.connection.clone())
    }

    /// Forgets `connection` as the stream's connection, unless a resumption replaced it.
    fn detach(&self, number: u64, connection: Option<&mpsc::Sender<StreamEvent>>) {
        let mut inner = self.lock();
        if let Some(stream) = inner.streams.iter_mut().find(|s| s.number == number)
            && let (Some(current), Some(gone)) = (&stream.connection, connection)
            && current.same_channel(gone)
        {
            stream.connection = None;
        }
    }

    fn finish(self: &Arc<Self>, number: u64) {
        {
            let mut inner = self.lock();
            if let Some(stream) = inner.streams.iter_mut().find(|s| s.number == number) {
                stream.finished = true;
                // Dropping the sender ends the connection's SSE body once it has been written.
                stream.connection = None;
            }
            self.budget.release(inner.trim());
        }
        let log: std::sync::Weak<Self> = Arc::downgrade(self);
        self.budget
            .finished(log as std::sync::Weak<dyn budget::Forget>, number);
        self.budget.enforce();
    }

    fn event_id(&self, number: u64, seq: u64) -> String {
        format!("{}.{number}.{seq}", self.prefix)
    }

    fn parse(&self, id: &str) -> Option<(u64, u64)> {
        let rest = id.strip_prefix(&self.prefix)?.strip_prefix('.')?;
        let (number, seq) = rest.split_once('.')?;
        Some((number.parse().ok()?, seq.parse().ok()?))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Forgets the oldest finished streams while over [`RETAINED_BYTES`] or
    /// [`RETAINED_STREAMS`]. Returns the bytes released.
    fn trim(&mut self) -> usize {
        let mut released = 0;
        while self.bytes > RETAINED_BYTES || self.streams.len() > RETAINED_STREAMS {
            let Some(index) = self.streams.iter().position(|s| s.finished) else {
                // Only live streams: drop the oldest kept event of the oldest stream.
                let Some(stream) = self.streams.iter_mut().find(|s| !s.events.is_empty()) else {
                    break;
                };
                let (_, text) = stream.events.pop_front().expect("non-empty");
                self.bytes -= text.len();
                released += text.len();
                continue;
            };
            released += self.remove(index);
        }
        released
    }

    /// Forgets the stream at `index`. Returns the bytes released.
    fn remove(&mut self, index: usize) -> usize {
        let Some(stream) = self.streams.remove(index) else {
            return 0;
        };
        let bytes = stream
            .events
            .iter()
            .map(|(_, text)| text.len())
            .sum::<usize>();
        self.bytes -= bytes;
        bytes
    }
}

async fn sleep_until(detached_at: Option<tokio::time::Instant>) {
    if let Some(at) = detached_at {
        tokio::time::sleep_until(at + DETACHED_GRACE).await;
    }
}

async fn gone(connection: Option<&mpsc::Sender<StreamEvent>>) {
    match connection {
        Some(connection) => connection.closed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
