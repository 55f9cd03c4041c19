//! Room for new client sessions (issue 39, item 5): the sessions being opened now, counted
//! against the session caps from the moment room is found until the session exists
//! ([`Opening`], [`Reservation`]), and the new-session rate per authenticated caller
//! ([`NewSessionRate`], `session.newSessionsPerMinute`).
//!
//! Not responsible for: deciding whether there is room or whose idle session ends for it
//! (`front::mcp::session_cap`).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// The sessions being opened now (room reserved, not yet created), in all and per owner.
#[derive(Debug, Default)]
pub struct Opening {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_owner: HashMap<String, usize>,
}

impl Opening {
    /// Holds the counts: a check made while holding them and the [`OpeningGuard::reserve`]
    /// that follows are one step, so two callers never both take the last place.
    pub fn lock(&self) -> OpeningGuard<'_> {
        OpeningGuard {
            opening: self,
            counts: self.inner.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// The held counts of [`Opening`].
pub struct OpeningGuard<'a> {
    opening: &'a Opening,
    counts: MutexGuard<'a, Counts>,
}

impl<'a> OpeningGuard<'a> {
    /// Sessions being opened, in all.
    pub fn total(&self) -> usize {
        self.counts.total
    }

    /// Sessions being opened by `owner` (an owner digest).
    pub fn of(&self, owner: &str) -> usize {
        self.counts.by_owner.get(owner).copied().unwrap_or(0)
    }

    /// Counts one more session being opened, by `owner` if known, until the reservation is
    /// dropped.
    pub fn reserve(mut self, owner: Option<String>) -> Reservation<'a> {
        self.counts.total += 1;
        if let Some(owner) = &owner {
            *self.counts.by_owner.entry(owner.clone()).or_default() += 1;
        }
        Reservation {
            opening: self.opening,
            owner,
        }
    }
}

/// Room for one session being opened, counted against the caps until dropped: hold it until
/// the session is created (or its opening failed).
#[derive(Debug)]
#[must_use = "the room is given back when the reservation is dropped"]
pub struct Reservation<'a> {
    opening: &'a Opening,
    owner: Option<String>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut counts = self.opening.inner.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(owner) = &self.owner
            && let Some(count) = counts.by_owner.get_mut(owner)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.by_owner.remove(owner);
            }
        }
    }
}

/// `session.newSessionsPerMinute`: a token bucket per authenticated caller (GCRA, the
/// `governor` crate), refilled at that rate. Buckets that are full again are dropped once
/// [`RATE_BUCKETS_KEPT`] callers have one, so memory follows the callers seen in the last
/// minute.
pub struct NewSessionRate {
    buckets: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

/// Buckets kept before the full ones are dropped.
pub const RATE_BUCKETS_KEPT: usize = 1024;

impl NewSessionRate {
    /// `per_minute` new sessions per caller and minute, in bursts of as many (at least 1).
    pub fn new(per_minute: u32) -> Self {
        let per_minute = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Self {
            buckets: RateLimiter::keyed(Quota::per_minute(per_minute)),
            clock: DefaultClock::default(),
        }
    }

    /// Takes one new session of `owner` (an owner digest) from its bucket.
    ///
    /// # Errors
    /// The wait until the bucket has a session again.
    pub fn admit(&self, owner: &str) -> Result<(), Duration> {
        if self.buckets.len() >= RATE_BUCKETS_KEPT {
            self.buckets.retain_recent();
        }
        self.buckets
            .check_key(&owner.to_owned())
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

impl std::fmt::Debug for NewSessionRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSessionRate")
            .field("callers", &self.buckets.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_counts_until_dropped_in_all_and_for_its_owner() {
        let opening = Opening::default();
        let first = opening.lock().reserve(Some("a".to_owned()));
        let second = opening.lock().reserve(None);
        assert_eq!(opening.lock().total(), 2);
        assert_eq!(opening.lock().of("a"), 1);
        drop(first);
        assert_eq!(opening.lock().of("a"), 0);
        drop(second);
        assert_eq!(opening.lock().total(), 0);
    }

    #[test]
    fn new_session_rate_is_a_burst_per_caller() {
        let rate = NewSessionRate::new(2);
        assert!(rate.admit("a").is_ok());
        assert!(rate.admit("a").is_ok());
        let wait = rate.admit("a").expect_err("the burst is spent");
        assert!(wait <= Duration::from_secs(30), "{wait:?}");
        assert!(rate.admit("b").is_ok(), "another caller's own bucket");
    }
}
