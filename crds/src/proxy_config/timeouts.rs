//! The time budgets the proxy enforces itself (`timeouts`): connect, call, the progress cap
//! `maxCall` and the drain on shutdown. The McpUpstream spec embeds them unchanged.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ProxyConfigError, parse_field, parse_positive};
use crate::duration::{DurationError, DurationString};

/// Time budgets the proxy enforces itself, outside any HTTP library, so they hold even
/// against an upstream that accepts TCP and never answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!has(self.maxCall) || duration(self.maxCall) >= duration(self.call)", "message": "spec.timeouts.maxCall must be at least spec.timeouts.call"}]))]
pub struct TimeoutsSpec {
    /// Budget for reaching the upstream and completing the MCP handshake (`initialize` and
    /// `notifications/initialized`), e.g. `10s`. Default `10s`.
    #[serde(default = "default_connect")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.timeouts.connect must be more than 0s and at most 168h"}]))]
    pub connect: DurationString,
    /// Budget for one forwarded request such as `tools/call`, from receipt to the final
    /// response, e.g. `60s`. On expiry the client gets a JSON-RPC error and the upstream a
    /// `notifications/cancelled`. Default `60s`.
    #[serde(default = "default_call")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.timeouts.call must be more than 0s and at most 168h"}]))]
    pub call: DurationString,
    /// Hard cap for a request that reports progress, e.g. `10m`. When set, each
    /// `notifications/progress` of a request restarts its `call` budget, never past `maxCall`
    /// from receipt; without it, progress does not extend the `call` budget. Must be at least
    /// `call`, at most 168h. Default: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) <= duration('168h')", "message": "spec.timeouts.maxCall must be at most 168h"}]))]
    pub max_call: Option<DurationString>,
    /// How long the proxy keeps serving after it is told to stop (the kubelet's SIGTERM when a
    /// pod is deleted or rolled), e.g. `5s`. During the drain `/readyz` answers 503
    /// `draining`, so the pod leaves its Service's endpoints while it still accepts
    /// connections. Then the proxy stops accepting, ends standalone GET streams (clients
    /// reconnect to another pod), lets in-flight requests finish, and only then closes the
    /// upstream session. The operator sets the pod's `terminationGracePeriodSeconds` to
    /// `drain` plus `maxCall` (or `call`) plus 5 s, so in-flight calls can finish. `0s` stops
    /// accepting at once. Default `5s`, at most `5m`.
    #[serde(default = "default_drain")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('0s') && duration(self) <= duration('5m')", "message": "spec.timeouts.drain must be at least 0s and at most 5m"}]))]
    pub drain: DurationString,
}

impl Default for TimeoutsSpec {
    fn default() -> Self {
        Self {
            connect: default_connect(),
            call: default_call(),
            max_call: None,
            drain: default_drain(),
        }
    }
}

impl TimeoutsSpec {
    /// The connect-and-handshake budget.
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `connect` does not parse.
    pub fn connect(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("timeouts.connect", &self.connect)
    }

    /// The per-request budget (more than zero).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `call` does not parse or is zero.
    pub fn call(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("timeouts.call", &self.call)
    }

    /// How long the proxy keeps serving after a stop request while it reports not ready
    /// (at most [`MAX_DRAIN`]).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `drain` does not parse or is above [`MAX_DRAIN`].
    pub fn drain(&self) -> Result<Duration, ProxyConfigError> {
        let drain = parse_field("timeouts.drain", &self.drain)?;
        if drain > MAX_DRAIN {
            return Err(ProxyConfigError::OutOfRange {
                field: "timeouts.drain",
                value: drain.as_secs(),
                min: 0,
                max: MAX_DRAIN.as_secs(),
            });
        }
        Ok(drain)
    }

    /// The longest a forwarded request can run: `maxCall` when set, else `call`.
    ///
    /// # Errors
    /// As [`Self::call`] and [`Self::max_call`].
    pub fn longest_call(&self) -> Result<Duration, ProxyConfigError> {
        Ok(self.max_call()?.unwrap_or(self.call()?))
    }

    /// The hard cap for requests that report progress, if set (at least the `call` budget).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `maxCall` does not parse or is below `call`.
    pub fn max_call(&self) -> Result<Option<Duration>, ProxyConfigError> {
        let Some(max_call) = &self.max_call else {
            return Ok(None);
        };
        let cap = parse_field("timeouts.maxCall", max_call)?;
        if cap < self.call()? {
            return Err(ProxyConfigError::Duration {
                field: "timeouts.maxCall",
                source: DurationError {
                    value: max_call.0.clone(),
                    reason: "must be at least timeouts.call",
                },
            });
        }
        Ok(Some(cap))
    }
}

fn default_connect() -> DurationString {
    DurationString::new("10s")
}

fn default_call() -> DurationString {
    DurationString::new("60s")
}

fn default_drain() -> DurationString {
    DurationString::new("5s")
}

/// Longest `timeouts.drain` accepted.
pub const MAX_DRAIN: Duration = Duration::from_secs(300);
