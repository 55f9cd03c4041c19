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

use crate::wire::jsonrpc::Pointer as _;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::lines::{Line, LineReader};
use super::stderr::StderrTail;
use crate::observe::metrics::stdio::StdioMetrics;
use crate::transport::upstream::UpstreamError;
use crate::wire::jsonrpc::WireMessage;

/// Messages buffered per pending request.
pub const PENDING_BUFFER: usize = 32;
/// Server messages buffered for the standalone channel before new ones are dropped.
pub const STANDALONE_BUFFER: usize = 64;
/// Lines buffered for the writer.
const WRITE_BUFFER: usize = 64;
/// Prefix of the line a `berth-proxy stdio-host` sends before closing a connection it refuses.
pub const REFUSAL_PREFIX: &str = "berth-stdio-host: refused: ";

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The child exited on its own with this exit code label (`0`-`255` or `signal`).
    Exited(String),
    /// The child closed its stdout while still running (field case BR-08).
    StdoutClosed,
    /// The stdio host closed the connection (its child ended).
    Disconnected,
    /// The stdio host refused the connection, with its reason.
    Refused(String),
    /// The proxy closed the connection.
    Closed,
}

type PendingSender = mpsc::Sender<Result<WireMessage, UpstreamError>>;

/// State shared by the connection handle and its tasks.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) label: String,
    pending: Mutex<HashMap<String, PendingSender>>,
    /// Keys of the pending `subscriptions/listen` requests.
    listens: Mutex<std::collections::HashSet<String>>,
    reason: Mutex<Option<EndReason>>,
    pub(super) ended: CancellationToken,
    pub(super) eof: CancellationToken,
    pub(super) stderr_done: CancellationToken,
    pub(super) stderr: Arc<StderrTail>,
    max_line_bytes: usize,
    metrics: StdioMetrics,
}

impl Shared {
    pub(super) fn new(
        label: String,
        max_line_bytes: usize,
        stderr: Arc<StderrTail>,
        metrics: StdioMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            label,
            pending: Mutex::new(HashMap::new()),
            listens: Mutex::new(std::collections::HashSet::new()),
            reason: Mutex::new(None),
            ended: CancellationToken::new(),
            eof: CancellationToken::new(),
            stderr_done: CancellationToken::new(),
            stderr,
            max_line_bytes,
            metrics,
        })
    }

    /// Ends the connection (the first reason wins): every pending request fails with
    /// [`Self::gone_error`].
    pub(super) fn end(&self, reason: EndReason) {
        {
            let mut current = self.reason.lock().unwrap_or_else(|e| e.into_inner());
            if current.is_none() {
                *current = Some(reason);
            }
        }
        self.ended.cancel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Why the connection ended, if it did.
    pub(super) fn reason(&self) -> Option<EndReason> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The error requests on an ended connection get: [`UpstreamError::Refused`] for a refusal,
    /// else [`UpstreamError::Gone`] naming the reason and the child's last stderr lines.
    pub(super) fn gone_error(&self) -> UpstreamError {
        let what = match self.reason() {
            Some(EndReason::Refused(reason)) => return UpstreamError::Refused(reason),
            Some(EndReason::Exited(code)) => {
                format!("stdio child {} exited with code {code}", self.label)
            }
            Some(EndReason::StdoutClosed) => {
                format!("stdio child {} closed its stdout", self.label)
            }
            Some(EndReason::Disconnected) => {
                format!("stdio host closed the connection {}", self.label)
            }
            Some(EndReason::Closed) | None => format!("stdio connection {} was closed", self.label),
        };
        let stderr = self.stderr.summary();
        UpstreamError::Gone(if stderr.is_empty() {
            what
        } else {
            format!("{what}; last stderr: {stderr}")
        })
    }

    fn skip(&self, reason: &'static str, line: &[u8]) {
        self.metrics
            .skipped_lines
            .with_label_values(&[reason])
            .inc();
        let end = line.len().min(200);
        tracing::warn!(
            child = %self.label,
            reason,
            line = %String::from_utf8_lossy(&line[..end]),
            "skipped a line on child stdout"
        );
    }

    fn take_pending(&self, key: &str) -> Option<PendingSender> {
        self.listens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    fn pending_sender(&self, key: &str) -> Option<PendingSender> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// The only pending call, not counting `subscriptions/listen` requests (a modern upstream's
    /// listen stream is pending for as long as it lives, and owns no call's messages).
    fn only_pending(&self) -> Option<(String, PendingSender)> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let listens = self.listens.lock().unwrap_or_else(|e| e.into_inner());
        let mut calls = pending.iter().filter(|(key, _)| !listens.contains(*key));
        let only = calls.next()?;
        if calls.next().is_some() {
            return None;
        }
        Some((only.0.clone(), only.1.clone()))
    }
}

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
                let mut listens = self
                    .shared
                    .listens
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                listens.remove(&key);
                if message.get("method").and_then(Value::as_str) == Some("subscriptions/listen") {
                    listens.insert(key.clone());
                }
                drop(listens);
                self.shared
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), tx);
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

async fn read_lines(
    shared: Arc<Shared>,
    read: impl AsyncRead + Unpin,
    standalone: mpsc::Sender<WireMessage>,
    socket: bool,
) {
    let mut lines = LineReader::new(BufReader::new(read), shared.max_line_bytes);
    let mut first = true;
    loop {
        let line = tokio::select! {
            () = shared.ended.cancelled() => break,
            line = lines.next_line() => line,
        };
        match line {
            Ok(Some(Line::Complete(bytes))) => {
                if socket
                    && first
                    && let Some(reason) = refusal(&bytes)
                {
                    shared.metrics.refusals.inc();
                    shared.end(EndReason::Refused(reason));
                    break;
                }
                route(&shared, bytes, &standalone).await;
            }
            Ok(Some(Line::TooLong { bytes, head, tail })) => {
                too_long(&shared, bytes, &head, &tail).await;
            }
            Ok(None) | Err(_) => break,
        }
        first = false;
    }
    shared.eof.cancel();
}

fn refusal(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    text.strip_prefix(REFUSAL_PREFIX).map(str::to_owned)
}

async fn route(shared: &Shared, bytes: Vec<u8>, standalone: &mpsc::Sender<WireMessage>) {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        shared
            .metrics
            .skipped_lines
            .with_label_values(&["blank"])
            .inc();
        return;
    }
    let Ok(message) = WireMessage::parse(&bytes) else {
        return shared.skip("not_json", &bytes);
    };
    // A JSON-RPC batch (an array, as servers of revision 2025-03-26 may send): each member is
    // routed on its own, so a response inside one still completes its call at once (BR-23).
    if let Some(members) = message.members() {
        for member in members {
            let raw = member.text().as_bytes().to_vec();
            route_message(shared, member, &raw, standalone).await;
        }
        return;
    }
    route_message(shared, message, &bytes, standalone).await;
}

/// Routes one JSON-RPC message from the child; `bytes` is its text, for skip logs.
async fn route_message(
    shared: &Shared,
    message: WireMessage,
    bytes: &[u8],
    standalone: &mpsc::Sender<WireMessage>,
) {
    if !message.is_object() {
        return shared.skip("not_jsonrpc", bytes);
    }
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").filter(|id| !id.is_null());
    let is_response = message.get("result").is_some() || message.get("error").is_some();
    match (method, id) {
        (None, Some(id)) if is_response => {
            let key = id.to_string();
            match shared.take_pending(&key) {
                Some(tx) => {
                    let _ = tx.send(Ok(message)).await;
                }
                None => shared.skip("unmatched", bytes),
            }
        }
        (Some(_), Some(_)) => match shared.only_pending() {
            // A server request during exactly one call belongs to that call's client.
            Some((_, tx)) => {
                let _ = tx.send(Ok(message)).await;
            }
            None => deliver_standalone(shared, standalone, message),
        },
        (Some(_), None) => {
            let token = message
                .at("/params/progressToken")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("berth-"));
            // A log message during exactly one call is that call's, as a server request is:
            // stdio has no per-call stream, and the client reads the call's (MCP
            // "Streamable HTTP": messages related to a request go on its stream).
            let owner = match token {
                Some(key) => shared.pending_sender(key),
                None if method == Some("notifications/message") => {
                    shared.only_pending().map(|(_, tx)| tx)
                }
                None => None,
            };
            match owner {
                Some(tx) => {
                    if tx.try_send(Ok(message)).is_err() {
                        tracing::debug!(child = %shared.label, "dropped a call notification for a slow reader");
                    }
                }
                None => deliver_standalone(shared, standalone, message),
            }
        }
        _ => shared.skip("not_jsonrpc", bytes),
    }
}

fn deliver_standalone(
    shared: &Shared,
    standalone: &mpsc::Sender<WireMessage>,
    message: WireMessage,
) {
    if standalone.try_send(message).is_err() {
        tracing::debug!(child = %shared.label, "dropped a server message: standalone buffer full or unread");
    }
}

/// An over-long line: the request it answers (found by its id at either end of the line, or
/// the only pending request) fails with [`UpstreamError::TooLong`]; otherwise it is skipped.
async fn too_long(shared: &Shared, bytes: u64, head: &[u8], tail: &[u8]) {
    shared.skip("too_long", head);
    let target = response_id(head, tail)
        .and_then(|key| shared.take_pending(&key))
        .or_else(|| {
            let (key, _) = shared.only_pending()?;
            shared.take_pending(&key)
        });
    if let Some(tx) = target {
        let error = UpstreamError::TooLong {
            bytes,
            limit: shared.max_line_bytes,
        };
        let _ = tx.send(Err(error)).await;
    }
}

/// The JSON-RPC id of a message cut to its two ends: after a leading `{"jsonrpc":"2.0","id":`
/// or `{"id":` (Python SDK order), or before a trailing `}` as the last `"id":` (Node SDK
/// order). Returned in the form of `Value::to_string` (`7` or `"abc"`).
pub(super) fn response_id(head: &[u8], tail: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(head);
    let compact: String = head
        .chars()
        .filter(|c| !c.is_whitespace())
        .take(64)
        .collect();
    for prefix in [r#"{"jsonrpc":"2.0","id":"#, r#"{"id":"#] {
        if let Some(rest) = compact.strip_prefix(prefix) {
            return id_token(rest);
        }
    }
    let tail = String::from_utf8_lossy(tail);
    let tail = tail.trim_end();
    let body = tail.strip_suffix('}')?;
    let at = body.rfind("\"id\":")?;
    let token = body[at + 5..].trim();
    id_token(token).filter(|t| t.len() == token.len())
}

fn id_token(rest: &str) -> Option<String> {
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    let token = rest[..end].trim();
    let valid = serde_json::from_str::<Value>(token).is_ok_and(|v| v.is_number() || v.is_string());
    valid.then(|| token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_id_is_found_at_either_end() {
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":12,"result":{"x":"#, b"").as_deref(),
            Some("12")
        );
        assert_eq!(
            response_id(
                br#"{"result":{"content":[{"id":99"#,
                br#"xx"}]},"jsonrpc":"2.0","id":"a-1"}"#
            )
            .as_deref(),
            Some(r#""a-1""#)
        );
        assert_eq!(response_id(b"garbage", b"more garbage"), None);
    }
}
