//! The caps on open connections of one listener, in total and per source IP address (issue 39,
//! item 2): a connection is admitted or refused the moment it is accepted, before a byte of it
//! is read, and its place is given back when the connection ends.
//!
//! Not responsible for: what a refused connection is told (`server::connections` writes it), or
//! the read deadlines (`server::connections::deadlines`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::observe::metrics::connections::Refusal;

/// The open connections of one listener, counted against its two caps. Cheap to clone.
#[derive(Clone)]
pub(super) struct Caps {
    total: Arc<Semaphore>,
    per_source: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max_per_source: usize,
    open: IntGauge,
}

impl Caps {
    /// Caps of `max_total` connections and `max_per_source` from one source address; `open` is
    /// the gauge of this listener's open connections.
    pub(super) fn new(max_total: usize, max_per_source: usize, open: IntGauge) -> Self {
        Self {
            total: Arc::new(Semaphore::new(max_total)),
            per_source: Arc::default(),
            max_per_source,
            open,
        }
    }

    /// Admits a connection from `source`, or says which cap it is past. The total cap is
    /// checked first. Never waits.
    pub(super) fn admit(&self, source: IpAddr) -> Result<Admission, Refusal> {
        let permit = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Refusal::MaxConnections)?;
        // An IPv4 client of a dual-stack listener counts as its IPv4 address.
        let source = source.to_canonical();
        {
            let mut counts = self
                .per_source
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let count = counts.get(&source).copied().unwrap_or(0);
            if count >= self.max_per_source {
                return Err(Refusal::MaxConnectionsPerSource);
            }
            counts.insert(source, count + 1);
        }
        self.open.inc();
        Ok(Admission {
            _permit: permit,
            source,
            caps: self.clone(),
        })
    }

    fn release(&self, source: IpAddr) {
        self.open.dec();
        let mut counts = self
            .per_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&source);
            }
        }
    }
}

/// An admitted connection's place under both caps; dropping it gives the place back.
pub(super) struct Admission {
    _permit: OwnedSemaphorePermit,
    source: IpAddr,
    caps: Caps,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.caps.release(self.source);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn caps(total: usize, per_source: usize) -> Caps {
        let gauge = IntGauge::new("open", "open").expect("valid gauge");
        Caps::new(total, per_source, gauge)
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn caps_past_the_per_source_cap_refuse_that_source_only() {
        let caps = caps(10, 2);
        let _first = caps.admit(A).expect("first");
        let _second = caps.admit(A).expect("second");
        assert_eq!(caps.admit(A).err(), Some(Refusal::MaxConnectionsPerSource));
        assert!(caps.admit(B).is_ok());
    }

    #[test]
    fn caps_past_the_total_cap_refuse_every_source_until_one_ends() {
        let caps = caps(2, 2);
        let first = caps.admit(A).expect("first");
        let _second = caps.admit(B).expect("second");
        assert_eq!(caps.admit(B).err(), Some(Refusal::MaxConnections));
        drop(first);
        let _third = caps.admit(B).expect("a place was given back");
        assert_eq!(caps.open.get(), 2, "the gauge follows admissions");
    }

    #[test]
    fn caps_forget_a_source_whose_connections_all_ended() {
        let caps = caps(4, 4);
        drop(caps.admit(A).expect("admitted"));
        assert!(caps.per_source.lock().expect("lock").is_empty());
        assert_eq!(caps.open.get(), 0);
    }
}
