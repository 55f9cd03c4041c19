//! Rate limits on `tools/call` (`tools.rateLimits`, issue 15): a token bucket per caller and
//! per tool, so one agent in a loop cannot exhaust an upstream for everyone. Counted per proxy
//! replica: with `replicas: 3` a caller may make up to three times the calls, one bucket in
//! each pod.
//!
//! Not responsible for: counting at run time (the proxy's `rate_limits` module does, with the
//! `governor` crate).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::DurationString;

/// One rate limit: each caller may call each tool `tools` names `calls` times per `per`, with
/// bursts of up to `burst` calls (a token bucket of `burst` tokens refilled at `calls` per
/// `per`). The caller is the OAuth principal (`sub` and client id) with
/// `spec.proxy.auth.oauth`; without it, every client of the endpoint counts as one caller.
/// A call over the limit gets HTTP 429 with `Retry-After` and a JSON-RPC error (outcome
/// `rate_limited`) and never reaches the upstream. When several limits name a tool, each
/// applies. Calls naming a tool the upstream's listing does not have share one bucket per
/// caller.
///
/// Example: `{tools: ["search*"], calls: 60, per: 1m, burst: 10}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolRateLimit {
    /// Tool names or glob patterns (as in `grants`: `*`, `?`, `[abc]`, `{a,b}`), for example
    /// `["search", "github_*"]`. Default `["*"]`: every tool.
    #[serde(default = "every_tool")]
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 256)))]
    pub tools: Vec<String>,
    /// Calls allowed per `per`, for each caller and each tool: the steady rate.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub calls: u32,
    /// The window `calls` are counted over, for example `1s`, `1m` (default) or `1h`.
    #[serde(default = "one_minute")]
    pub per: DurationString,
    /// Calls a caller may make at once before the steady rate applies. Default: `calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub burst: Option<u32>,
}

fn every_tool() -> Vec<String> {
    vec!["*".to_owned()]
}

fn one_minute() -> DurationString {
    DurationString::new("1m")
}

impl ToolRateLimit {
    /// The time one call's token takes to come back (`per / calls`), and the bucket size.
    ///
    /// # Errors
    /// Why the window is unusable: not a duration, or shorter than one nanosecond per call.
    pub fn refill(&self) -> Result<(Duration, u32), String> {
        let per = self.per.to_duration().map_err(|e| e.to_string())?;
        let interval = per / self.calls.max(1);
        if interval.is_zero() {
            return Err(format!(
                "per {:?} is too short for {} calls",
                self.per.0, self.calls
            ));
        }
        Ok((interval, self.burst.unwrap_or(self.calls).max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_defaults_to_every_tool_per_minute_with_a_burst_of_calls() {
        let limit: ToolRateLimit = serde_yaml::from_str("{calls: 30}").expect("parses");
        assert_eq!(limit.tools, ["*"]);
        assert_eq!(
            limit.refill(),
            Ok((Duration::from_secs(2), 30)),
            "30 per minute: one token back every 2 s, a bucket of 30"
        );
        let tuned: ToolRateLimit =
            serde_yaml::from_str("{tools: [search], calls: 10, per: 1s, burst: 2}")
                .expect("parses");
        assert_eq!(tuned.refill(), Ok((Duration::from_millis(100), 2)));
        let bad: ToolRateLimit = serde_yaml::from_str("{calls: 1, per: soon}").expect("parses");
        assert!(
            bad.refill()
                .expect_err("not a duration")
                .contains("invalid duration")
        );
        assert!(serde_yaml::from_str::<ToolRateLimit>("{calls: 1, every: 1s}").is_err());
    }
}
