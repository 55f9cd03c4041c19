//! One stdio connection: newline-delimited JSON-RPC to a child's stdin (or a stdio host's
//! socket) and from its stdout, with the routing the upstream session needs.
//!
//! The connection has exactly one reader and one owner of its request ids (README.md "Why it exists", failure 2):
//! a response goes to the one pending request with its id; a progress notification to the
//! request its `berth-<id>` token names; a server-to-client request or a log message
//! (`notifications/message`) to the only pending request (so the client that made the call
//! gets it) or else, like every other notification, to the standalone channel. Lines that are blank, not JSON, not JSON-RPC, or longer than the line
//! limit are skipped and counted, never forwarded (field case BR-10); an over-long response
//! fails its own request with a clear error.
//!
//! Memory is bounded: one line (the limit), [`PENDING_BUFFER`] messages per pending request and
//! [`STANDALONE_BUFFER`] standalone messages. A pending request whose reader stops reading
//! holds up only this connection's reader, never another connection's.
//!
//! This module holds the handle ([`Connection`]), the reply stream of one request
//! ([`PendingReply`]) and the writer task. The child module `shared` holds the state the handle
//! and the tasks share ([`EndReason`] among it); `read` is the reader task and its routing. The
//! children use each other (`read` uses `shared`), never this module.

mod read;
mod shared;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::transport::upstream::UpstreamError;
use crate::wire::jsonrpc::WireMessage;
pub use read::REFUSAL_PREFIX;
use read::read_lines;
use shared::Callless;
pub use shared::EndReason;
pub(super) use shared::Shared;

/// Messages buffered per pending request.
pub const PENDING_BUFFER: usize = 32;
/// Server messages buffered for the standalone channel before new ones are dropped.
pub const STANDALONE_BUFFER: usize = 64;
/// Lines buffered for the writer.
const WRITE_BUFFER: usize = 64;

/// A live stdio connection. Dropping it closes it (the child is stopped in the background).
#[derive(Debug)]
pub struct Connection {
    shared: Arc<Shared>,
    writer: mpsc::Sender<Vec<u8>>,
    standalone: Mutex<Option<mpsc::Receiver<WireMessage>>>,
    close: CancellationToken,
}

impl Connection {
    /// Starts the reader and writer tasks over `read` and `write`. `close` stops the writer (so
    /// the child's stdin closes); the caller's keeper stops the child and calls `end`.
    pub(super) fn start(
        shared: Arc<Shared>,
        read: impl AsyncRead + Send + Unpin + 'static,
        write: impl AsyncWrite + Send + Unpin + 'static,
        close: CancellationToken,
        socket: bool,
    ) -> Self {
        let (writer, lines) = mpsc::channel(WRITE_BUFFER);
        let (standalone_tx, standalone) = mpsc::channel(STANDALONE_BUFFER);
        tokio::spawn(write_lines(
            write,
            lines,
            close.clone(),
            shared.ended.clone(),
        ));
        tokio::spawn(read_lines(Arc::clone(&shared), read, standalone_tx, socket));
        Self {
            shared,
            writer,
            standalone: Mutex::new(Some(standalone)),
            close,
        }
    }

    /// The connection's label (`program#n` or `socket#n`), for logs.
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// Fires when the connection has ended (child exit, stdout EOF, refusal, close).
    pub fn ended(&self) -> &CancellationToken {
        &self.shared.ended
    }

    /// Why it ended, if it did.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.shared.reason()
    }

    /// Marks the era probe as waiting for its answer (`true`) or answered (`false`): a child
    /// that exits while it waits is counted as `cause="era_probe"`, not as a crash
    /// (`berth_proxy_stdio_child_exits_total`; issue 39, item 11).
    pub fn set_era_probe(&self, waiting: bool) {
        self.shared.set_era_probe(waiting);
    }

    /// The child's last stderr lines (redacted), joined with ` | `.
    pub fn stderr_tail(&self) -> String {
        self.shared.stderr.summary()
    }

    /// Takes the receiver of server messages that belong to no pending request (once).
    pub fn take_standalone(&self) -> Option<mpsc::Receiver<WireMessage>> {
        self.standalone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Writes one message. A request (`method` and a non-null `id`) gets a stream of the
    /// messages routed to it, ending with its response; anything else gets `Accepted`.
    ///
    /// # Errors
    /// [`UpstreamError::Gone`] / [`UpstreamError::Refused`] when the connection has ended;
    /// [`UpstreamError::Encode`] when the message cannot be encoded.
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future (or the returned stream) forgets the pending request.
    pub async fn send(&self, message: &WireMessage) -> Result<PendingReply, UpstreamError> {
        self.send_marked(message, false).await
    }

    /// As [`Self::send`], for a request of the proxy's own (tools probe, liveness ping): a
    /// server request or log message the child prints while it is pending is never taken as
    /// its own, but goes where it would with no request pending.
    ///
    /// # Errors
    /// As [`Self::send`].
    pub async fn send_own(&self, message: &WireMessage) -> Result<PendingReply, UpstreamError> {
        self.send_marked(message, true).await
    }

    async fn send_marked(
        &self,
        message: &WireMessage,
        own: bool,
    ) -> Result<PendingReply, UpstreamError> {
        if self.shared.ended.is_cancelled() {
            return Err(self.shared.gone_error());
        }
        let mut line = message.line().into_owned().into_bytes();
        line.push(b'\n');
        let id = message
            .get("id")
            .filter(|id| !id.is_null() && message.get("method").is_some());
        let reply = match id {
            Some(id) => {
                let key = id.to_string();
                let (tx, rx) = mpsc::channel(PENDING_BUFFER);
                let callless = if message.get("method").and_then(Value::as_str)
                    == Some("subscriptions/listen")
                {
                    Some(Callless::Listen)
                } else {
                    own.then_some(Callless::Own)
                };
                self.shared.add_pending(&key, tx, callless);
                PendingReply {
                    rx: Some(rx),
                    key,
                    shared: Arc::clone(&self.shared),
                }
            }
            None => PendingReply {
                rx: None,
                key: String::new(),
                shared: Arc::clone(&self.shared),
            },
        };
        // Recorded before the line is queued: the child cannot answer it sooner.
        self.shared
            .written(reply.rx.is_some().then_some(reply.key.as_str()));
        if self.shared.ended.is_cancelled() || self.writer.send(line).await.is_err() {
            return Err(self.shared.gone_error());
        }
        Ok(reply)
    }

    /// Closes the connection: the child's stdin closes, then it is stopped within the grace
    /// periods and reaped (in the background).
    pub fn close(&self) {
        self.close.cancel();
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close.cancel();
    }
}

/// The messages routed to one request, ending with its response. When the connection ends
/// first, the last item is the connection's error.
pub struct PendingReply {
    rx: Option<mpsc::Receiver<Result<WireMessage, UpstreamError>>>,
    key: String,
    shared: Arc<Shared>,
}

impl PendingReply {
    /// Whether this is the reply of a request (a stream) rather than of a notification.
    pub fn is_request(&self) -> bool {
        self.rx.is_some()
    }
}

impl Stream for PendingReply {
    type Item = Result<WireMessage, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(None) => {
                self.rx = None;
                if self.shared.ended.is_cancelled() {
                    Poll::Ready(Some(Err(self.shared.gone_error())))
                } else {
                    Poll::Ready(None)
                }
            }
            other => other,
        }
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        if self.rx.is_some() {
            self.shared.take_pending(&self.key);
        }
    }
}

async fn write_lines(
    mut write: impl AsyncWrite + Unpin,
    mut lines: mpsc::Receiver<Vec<u8>>,
    close: CancellationToken,
    ended: CancellationToken,
) {
    loop {
        let line = tokio::select! {
            biased;
            () = close.cancelled() => break,
            () = ended.cancelled() => break,
            line = lines.recv() => line,
        };
        let Some(line) = line else { break };
        let written = tokio::select! {
            () = close.cancelled() => break,
            () = ended.cancelled() => break,
            written = async { write.write_all(&line).await?; write.flush().await } => written,
        };
        if written.is_err() {
            break;
        }
    }
    let _ = write.shutdown().await;
}
