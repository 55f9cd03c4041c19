//! The chaos run's clock is the call count, not time: a fixed number of call tickets, and faults
//! due at fixed fractions of them. A call past a fault's ticket waits until that fault has begun,
//! and a call in the tail (after the last fault) until every fault is over and the proxy is ready
//! again, so every fault hits calls in flight however fast or slow the machine is, and the run
//! always ends with calls to a recovered proxy.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// Call tickets and the fault gates.
pub struct Schedule {
    total: u64,
    next: AtomicU64,
    /// The ticket at which each fault is due, ascending.
    due: Vec<u64>,
    /// The first ticket of the tail.
    tail: u64,
    /// Faults begun so far; `due.len() + 1` once the tail is open.
    stage: watch::Sender<usize>,
}

impl Schedule {
    /// `total` tickets and `faults` faults, due at `k / (faults + 2)` of them (k = 1..=faults);
    /// the tail is the last `1 / (faults + 2)`.
    pub fn new(total: u64, faults: usize) -> Self {
        let parts = faults as u64 + 2;
        Self {
            total,
            next: AtomicU64::new(0),
            due: (1..=faults as u64).map(|k| k * total / parts).collect(),
            tail: (parts - 1) * total / parts,
            stage: watch::Sender::new(0),
        }
    }

    /// The next call ticket, once the faults due before it have begun; `None` when all were
    /// taken.
    pub async fn take(&self) -> Option<u64> {
        let ticket = self.next.fetch_add(1, Ordering::SeqCst);
        if ticket >= self.total {
            return None;
        }
        let stage = self.stage(ticket);
        let mut gate = self.stage.subscribe();
        gate.wait_for(|begun| *begun >= stage).await.ok()?;
        Some(ticket)
    }

    /// Tickets taken so far.
    pub fn taken(&self) -> u64 {
        self.next.load(Ordering::SeqCst).min(self.total)
    }

    /// The stage of `ticket`: 0 before the first fault, `k` from fault `k` (1-based) on, and
    /// the number of faults + 1 in the tail.
    pub fn stage(&self, ticket: u64) -> usize {
        self.due.iter().filter(|due| **due <= ticket).count() + usize::from(ticket >= self.tail)
    }

    /// The stage a call on `ticket` that ends now is counted in: the tail when its ticket is
    /// in the tail (it began after every fault was over), else the stage of the last fault
    /// begun by now (so a call in flight when a fault begins is counted with that fault).
    pub fn stage_ended(&self, ticket: u64) -> usize {
        let tail = self.due.len() + 1;
        if self.stage(ticket) == tail {
            return tail;
        }
        (*self.stage.borrow()).min(self.due.len())
    }

    /// The ticket at which fault `k` (0-based) is due.
    pub fn due(&self, k: usize) -> u64 {
        self.due.get(k).copied().unwrap_or(self.total)
    }

    /// Lets the calls past fault `k` (0-based) go: it has begun.
    pub fn begin(&self, k: usize) {
        self.stage.send_replace(k + 1);
    }

    /// Opens the tail: every fault is over.
    pub fn all_clear(&self) {
        self.stage.send_replace(self.due.len() + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn schedule_calls_past_a_fault_wait_until_it_begins() {
        let schedule = Schedule::new(10, 2);
        // Due at 2 and 5, the tail from 7.
        assert_eq!((schedule.due(0), schedule.due(1)), (2, 5));
        assert_eq!(schedule.take().await, Some(0));
        assert_eq!(schedule.take().await, Some(1));
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(50), schedule.take());
        assert!(blocked.await.is_err(), "ticket 2 waits for fault 0");
        schedule.begin(0);
        assert_eq!(schedule.take().await, Some(3));
        assert_eq!(schedule.stage_ended(1), 1, "in flight when fault 0 began");
        assert_eq!(schedule.take().await, Some(4));
        schedule.begin(1);
        assert_eq!(schedule.take().await, Some(5));
        assert_eq!(schedule.take().await, Some(6));
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(50), schedule.take());
        assert!(blocked.await.is_err(), "the tail waits for the all clear");
        schedule.all_clear();
        assert_eq!(
            (schedule.stage(1), schedule.stage(2), schedule.stage(8)),
            (0, 1, 3)
        );
        assert_eq!(schedule.take().await, Some(8));
        assert_eq!((schedule.stage_ended(6), schedule.stage_ended(8)), (2, 3));
        assert_eq!(schedule.take().await, Some(9));
        assert_eq!(schedule.take().await, None);
        assert_eq!(schedule.taken(), 10);
    }
}
