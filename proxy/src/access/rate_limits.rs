//! Rate limits on `tools/call` (`tools.rateLimits`, issue 15) at run time: one token bucket
//! (GCRA, the `governor` crate) per limit, caller and tool. Checked after the tool policy and
//! the caller's grants, before anything reaches the upstream; a call over a limit ends
//! `rate_limited` with HTTP 429 and `Retry-After`.
//!
//! Per replica: each proxy counts the calls it answers. Buckets of callers that have been
//! quiet long enough to be full again are dropped by [`RateLimits::retain_recent`], which the
//! proxy runs once a minute, so memory follows the callers seen recently.

use std::num::NonZeroU32;
use std::time::Duration;

use berth_crds::ToolRateLimit;
use berth_crds::tool_policy::grant::tool_globs;
use globset::GlobSet;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::access::auth::Principal;

/// The compiled `tools.rateLimits`.
pub struct RateLimits {
    rules: Vec<Rule>,
    clock: DefaultClock,
}

struct Rule {
    tools: GlobSet,
    /// Buckets by (caller identity, tool).
    buckets: DefaultKeyedRateLimiter<(String, String)>,
}

/// The caller key without OAuth: every client of the endpoint counts as one caller.
const ANYONE: &str = "";

/// The bucket key of every tool name the upstream's listing does not name (not a valid tool
/// name, so it never collides with one).
pub const UNLISTED: &str = "\u{0}unlisted";

impl RateLimits {
    /// Compiles `limits`; `None` when there are none.
    ///
    /// # Errors
    /// A message naming the limit whose pattern or window is unusable (the config check
    /// refuses these first, so only a config that skipped it gets here).
    pub fn new(limits: &[ToolRateLimit]) -> Result<Option<Self>, String> {
        if limits.is_empty() {
            return Ok(None);
        }
        let mut rules = Vec::with_capacity(limits.len());
        for (index, limit) in limits.iter().enumerate() {
            let field = format!("tools.rateLimits[{index}]");
            let tools = tool_globs(&limit.tools).map_err(|e| format!("{field}.tools {e}"))?;
            let (interval, burst) = limit.refill().map_err(|why| format!("{field}: {why}"))?;
            let burst = NonZeroU32::new(burst).ok_or_else(|| format!("{field}: burst is 0"))?;
            let quota = Quota::with_period(interval)
                .ok_or_else(|| format!("{field}: the refill interval is zero"))?
                .allow_burst(burst);
            rules.push(Rule {
                tools,
                buckets: RateLimiter::keyed(quota),
            });
        }
        Ok(Some(Self {
            rules,
            clock: DefaultClock::default(),
        }))
    }

    /// Takes one call of `tool` by `caller` from every limit naming the tool. `listed` says
    /// whether the upstream's tool listing names the tool: calls to names it does not list
    /// share one bucket per caller ([`UNLISTED`]), so made-up names neither escape the limit
    /// nor grow the buckets.
    ///
    /// # Errors
    /// The wait until the call would be admitted (the longest over the limits that refused),
    /// for `Retry-After`.
    pub fn admit(
        &self,
        caller: Option<&Principal>,
        tool: &str,
        listed: bool,
    ) -> Result<(), Duration> {
        let key = (
            caller.map_or_else(|| ANYONE.to_owned(), Principal::identity),
            if listed { tool } else { UNLISTED }.to_owned(),
        );
        let mut wait: Option<Duration> = None;
        for rule in self.rules.iter().filter(|rule| rule.tools.is_match(tool)) {
            if let Err(not_until) = rule.buckets.check_key(&key) {
                let this = not_until.wait_time_from(self.clock.now());
                wait = Some(wait.map_or(this, |w| w.max(this)));
            }
        }
        wait.map_or(Ok(()), Err)
    }

    /// Drops the buckets that are full again (their callers have been quiet); returns how
    /// many buckets remain.
    pub fn retain_recent(&self) -> usize {
        self.rules
            .iter()
            .map(|rule| {
                rule.buckets.retain_recent();
                rule.buckets.len()
            })
            .sum()
    }
}

/// `Retry-After` seconds for a wait: rounded up, at least 1 (RFC 9110 section 10.2.3).
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(subject: &str) -> Principal {
        Principal {
            subject: Some(subject.to_owned()),
            ..Principal::default()
        }
    }

    fn limits(yaml: &str) -> RateLimits {
        let specs: Vec<ToolRateLimit> = serde_yaml::from_str(yaml).expect("limits parse");
        RateLimits::new(&specs).expect("compile").expect("some")
    }

    #[test]
    fn each_caller_and_each_tool_has_its_own_bucket() {
        let limits = limits("[{tools: ['search*'], calls: 2, per: 1h}]");
        let (alice, bob) = (caller("alice"), caller("bob"));
        assert_eq!(limits.admit(Some(&alice), "search", true), Ok(()));
        assert_eq!(limits.admit(Some(&alice), "search", true), Ok(()));
        let wait = limits
            .admit(Some(&alice), "search", true)
            .expect_err("the third call in the hour is over the limit");
        assert!(
            wait > Duration::from_secs(29 * 60) && wait <= Duration::from_secs(30 * 60),
            "one token comes back every 30 min: {wait:?}"
        );
        assert_eq!(
            limits.admit(Some(&bob), "search", true),
            Ok(()),
            "bob's own bucket"
        );
        assert_eq!(
            limits.admit(Some(&alice), "search_docs", true),
            Ok(()),
            "another tool's own bucket"
        );
        assert_eq!(
            limits.admit(Some(&alice), "fetch", true),
            Ok(()),
            "not named: no limit"
        );
        assert_eq!(limits.admit(None, "search", true), Ok(()));
        assert_eq!(limits.admit(None, "search", true), Ok(()));
        assert!(
            limits.admit(None, "search", true).is_err(),
            "callers without a token share"
        );
        assert_eq!(limits.retain_recent(), 4, "every bucket is still draining");
        // Names the listing does not have share one bucket per caller.
        assert_eq!(limits.admit(Some(&bob), "search_a", false), Ok(()));
        assert_eq!(limits.admit(Some(&bob), "search_b", false), Ok(()));
        assert!(limits.admit(Some(&bob), "search_c", false).is_err());
        assert_eq!(limits.retain_recent(), 5);
    }

    #[test]
    fn a_burst_is_spent_then_the_steady_rate_applies_and_every_limit_holds() {
        let limits = limits("[{calls: 6, per: 1h, burst: 3}, {tools: [slow], calls: 1, per: 1h}]");
        let alice = caller("alice");
        for _ in 0..3 {
            assert_eq!(limits.admit(Some(&alice), "echo", true), Ok(()));
        }
        let wait = limits
            .admit(Some(&alice), "echo", true)
            .expect_err("burst spent");
        assert!(
            wait > Duration::from_secs(9 * 60) && wait <= Duration::from_secs(10 * 60),
            "then one call per 10 min: {wait:?}"
        );
        assert_eq!(limits.admit(Some(&alice), "slow", true), Ok(()));
        let wait = limits
            .admit(Some(&alice), "slow", true)
            .expect_err("the hourly limit on slow holds beside the broad one");
        assert!(wait > Duration::from_secs(3500), "{wait:?}");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_never_zero() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
        assert!(RateLimits::new(&[]).expect("empty").is_none());
    }
}
