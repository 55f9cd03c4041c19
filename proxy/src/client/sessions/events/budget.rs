//! What every session's replay logs keep, together ([`ReplayBudget`]): the bytes of message
//! text held for `Last-Event-ID` resumption across all sessions, capped at one limit.
//!
//! Each session's log is bounded on its own (`RETAINED_BYTES`), but those bounds add up with
//! the sessions: 64 sessions relaying 64 KiB results held 231 MiB (issue 14). Past the limit
//! the streams that finished first, in any session, are forgotten first; a live stream is
//! never forgotten here, so a call in progress can always be resumed within its own session's
//! bounds.
//!
//! Not responsible for: a session's own bounds or what resuming means (the parent).

use std::collections::VecDeque;
use std::sync::{Mutex, Weak};

use prometheus::IntGauge;

/// Entries of the finished queue before the first pruning of those that no longer hold bytes.
const PRUNE_FROM: usize = 1024;

/// A log that can forget one of its finished streams when the budget asks it to.
pub trait Forget: Send + Sync {
    /// Forgets finished stream `stream` and what it kept; a stream already gone is a no-op.
    fn forget(&self, stream: u64);
    /// Whether the log still keeps stream `stream`.
    fn holds(&self, stream: u64) -> bool;
}

/// The replay bytes of all sessions, and the finished streams in the order they finished.
#[derive(Debug)]
pub struct ReplayBudget {
    limit: usize,
    /// Bytes kept now: `berth_proxy_replay_bytes` when the proxy's metrics are passed in.
    used: IntGauge,
    finished: Mutex<Finished>,
}

/// Finished streams, oldest first. Entries whose stream went another way (its session's own
/// bounds, its session's end) are pruned when the queue has doubled since the last pruning,
/// so it stays proportional to the streams actually kept.
#[derive(Debug, Default)]
struct Finished {
    queue: VecDeque<(Weak<dyn Forget>, u64)>,
    prune_at: usize,
}

impl std::fmt::Debug for dyn Forget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forget")
    }
}

impl ReplayBudget {
    /// A budget of `limit` bytes of message text, counted in `used` (a gauge at 0).
    pub fn new(limit: usize, used: IntGauge) -> Self {
        Self {
            limit,
            used,
            finished: Mutex::new(Finished {
                queue: VecDeque::new(),
                prune_at: PRUNE_FROM,
            }),
        }
    }

    /// Bytes of message text kept now, across all sessions.
    pub fn used(&self) -> usize {
        usize::try_from(self.used.get()).unwrap_or(0)
    }

    /// `bytes` more are kept.
    pub(super) fn add(&self, bytes: usize) {
        self.used.add(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// `bytes` fewer are kept.
    pub(super) fn release(&self, bytes: usize) {
        self.used.sub(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Stream `stream` of `log` finished: it may be forgotten once it is the oldest.
    /// Call it holding no log's lock: pruning asks logs what they hold.
    pub(super) fn finished(&self, log: Weak<dyn Forget>, stream: u64) {
        let mut finished = self.queue();
        finished.queue.push_back((log, stream));
        if finished.queue.len() >= finished.prune_at {
            finished
                .queue
                .retain(|(log, stream)| log.upgrade().is_some_and(|log| log.holds(*stream)));
            finished.prune_at = (finished.queue.len() * 2).max(PRUNE_FROM);
        }
    }

    /// Entries in the finished queue (for tests of its pruning).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.queue().queue.len()
    }

    /// While over the limit, forgets the finished stream that finished first, of any session.
    /// Call it holding no log's lock: it takes other logs' locks.
    pub(super) fn enforce(&self) {
        while self.used() > self.limit {
            let Some((log, stream)) = self.queue().queue.pop_front() else {
                return;
            };
            if let Some(log) = log.upgrade() {
                log.forget(stream);
            }
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Finished> {
        self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }
}
