//! The state a stdio connection's handle, its reader and writer tasks and its keeper share:
//! the pending requests by id, why the connection ended, and the error requests get once it
//! has.
//!
//! Not responsible for: reading or routing lines (`read`) or writing them (the connection).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::observe::metrics::stdio::StdioMetrics;
use crate::transport::stdio::stderr::StderrTail;
use crate::transport::upstream::UpstreamError;
use crate::wire::jsonrpc::WireMessage;

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

pub(super) type PendingSender = mpsc::Sender<Result<WireMessage, UpstreamError>>;

/// A pending request that owns no call's messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Callless {
    /// The proxy's own request (handshake, probes, liveness ping).
    Own,
    /// A modern upstream's `subscriptions/listen` stream, pending for as long as it lives.
    Listen,
}

/// State shared by the connection handle and its tasks.
#[derive(Debug)]
pub(in crate::transport::stdio) struct Shared {
    pub(in crate::transport::stdio) label: String,
    pub(super) pending: Mutex<HashMap<String, PendingSender>>,
    /// The pending requests that own no call's messages, by key: the proxy's own requests
    /// and `subscriptions/listen` streams.
    callless: Mutex<HashMap<String, Callless>>,
    /// The key of the request written last, or `None` when the last message written was a
    /// notification or a response (issue 39, item 11: what an `id: null` error may answer).
    last_written: Mutex<Option<String>>,
    /// The era probe is waiting for its answer: a child that exits now is a legacy server
    /// ending on a request it does not know, not a crash (issue 39, item 11).
    era_probe: AtomicBool,
    reason: Mutex<Option<EndReason>>,
    pub(in crate::transport::stdio) ended: CancellationToken,
    pub(in crate::transport::stdio) eof: CancellationToken,
    pub(in crate::transport::stdio) stderr_done: CancellationToken,
    pub(in crate::transport::stdio) stderr: Arc<StderrTail>,
    pub(super) max_line_bytes: usize,
    pub(super) metrics: StdioMetrics,
}

impl Shared {
    pub(in crate::transport::stdio) fn new(
        label: String,
        max_line_bytes: usize,
        stderr: Arc<StderrTail>,
        metrics: StdioMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            label,
            pending: Mutex::new(HashMap::new()),
            callless: Mutex::new(HashMap::new()),
            last_written: Mutex::new(None),
            era_probe: AtomicBool::new(false),
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
    pub(in crate::transport::stdio) fn end(&self, reason: EndReason) {
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
    pub(in crate::transport::stdio) fn reason(&self) -> Option<EndReason> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The error requests on an ended connection get: [`UpstreamError::Refused`] for a refusal,
    /// else [`UpstreamError::Gone`] naming the reason and the child's last stderr lines.
    pub(in crate::transport::stdio) fn gone_error(&self) -> UpstreamError {
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

    pub(super) fn skip(&self, reason: &'static str, line: &[u8]) {
        self.metrics
            .skipped_lines
            .with_label_values(&[reason])
            .inc();
        let end = line.len().min(200);
        tracing::warn!(
            child = %self.label,
            reason,
            line = %crate::observe::escaped::Escaped(&String::from_utf8_lossy(&line[..end])),
            "skipped a line on child stdout"
        );
    }

    /// Registers the pending request `key` with its reply channel; `callless` when it owns no
    /// call's messages.
    pub(super) fn add_pending(&self, key: &str, tx: PendingSender, callless: Option<Callless>) {
        let mut marks = self.callless.lock().unwrap_or_else(|e| e.into_inner());
        match callless {
            Some(kind) => marks.insert(key.to_owned(), kind),
            None => marks.remove(key),
        };
        drop(marks);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned(), tx);
    }

    pub(super) fn take_pending(&self, key: &str) -> Option<PendingSender> {
        self.callless
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    pub(super) fn pending_sender(&self, key: &str) -> Option<PendingSender> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Marks (or unmarks) the era probe as waiting for its answer.
    pub(in crate::transport::stdio) fn set_era_probe(&self, waiting: bool) {
        self.era_probe.store(waiting, Ordering::Relaxed);
    }

    /// Whether the era probe is waiting for its answer.
    pub(in crate::transport::stdio) fn era_probe(&self) -> bool {
        self.era_probe.load(Ordering::Relaxed)
    }

    /// Records the message just queued for the child: the request `key`, or `None` for a
    /// notification or a response.
    pub(super) fn written(&self, key: Option<&str>) {
        *self.last_written.lock().unwrap_or_else(|e| e.into_inner()) = key.map(str::to_owned);
    }

    /// The key of the request an error with `id: null` answers: the only pending request (the
    /// proxy's own included, a modern upstream's `subscriptions/listen` stream not counted),
    /// and only while it is the last message written to the child. After a notification or a
    /// response was written the error may be that message's (a child that could not read it),
    /// so it answers nothing and the call keeps waiting for its own answer (issue 39, item 11).
    pub(super) fn null_id_target(&self) -> Option<String> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let callless = self.callless.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys = pending
            .keys()
            .filter(|key| callless.get(*key) != Some(&Callless::Listen));
        let only = keys.next()?;
        if keys.next().is_some() {
            return None;
        }
        let last = self.last_written.lock().unwrap_or_else(|e| e.into_inner());
        (last.as_deref() == Some(only.as_str())).then(|| only.clone())
    }

    /// The only pending call, not counting the requests that own no call's messages: a modern
    /// upstream's `subscriptions/listen` stream (pending for as long as it lives) and the
    /// proxy's own requests, whose reader waits only for their response (a server request
    /// routed there would never be answered).
    pub(super) fn only_pending(&self) -> Option<(String, PendingSender)> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let callless = self.callless.lock().unwrap_or_else(|e| e.into_inner());
        let mut calls = pending
            .iter()
            .filter(|(key, _)| !callless.contains_key(*key));
        let only = calls.next()?;
        if calls.next().is_some() {
            return None;
        }
        Some((only.0.clone(), only.1.clone()))
    }
}
