//! When the proxy lists the upstream's tools and what tool drift does (`toolsProbe`). The
//! McpUpstream spec embeds it unchanged.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ProxyConfigError, parse_positive};
use crate::duration::DurationString;

/// When the proxy lists the upstream's tools (`tools/list`, always over the one long-lived
/// upstream session and paginated to the end), and what it does when the tools drift.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolsProbeSpec {
    /// `OnStart` (default): after each upstream handshake; readiness waits for it.
    /// `Interval`: after the handshake and then every `interval`. `OnListChanged`: after the
    /// handshake and whenever the upstream sends `notifications/tools/list_changed`.
    /// `PerCall`: before every `tools/call` (costly: one extra round trip per call).
    /// `Never`: not at all (tool names in metrics are then all `other`).
    /// With every policy but `Never`, a `notifications/tools/list_changed` also re-lists.
    #[serde(default)]
    pub policy: ToolsProbePolicy,
    /// Time between probes when `policy` is `Interval`, e.g. `5m`. Default `5m`.
    #[serde(default = "default_probe_interval")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.toolsProbe.interval must be more than 0s and at most 168h"}]))]
    pub interval: DurationString,
    /// What happens when a tool of the baseline (the first listing, or `expectedFingerprint`)
    /// disappears or changes its definition: `inputSchema`, `description`, `title`,
    /// `annotations` or `outputSchema` (a reworded description can smuggle instructions to the
    /// model). `FailClosed` (default): calls to that tool get a JSON-RPC error (outcome
    /// `drift_blocked`) until the listing matches the baseline again. `Refresh`: the new
    /// listing becomes the baseline.
    #[serde(default)]
    pub on_drift: DriftPolicy,
    /// Pins the baseline: `sha256:<64 lowercase hex>` as the proxy reports it on its admin
    /// `/tools` endpoint, over every tool's name, `title`, `description`, `inputSchema`,
    /// `outputSchema` and `annotations`. A listing with another fingerprint blocks every tool
    /// (with `FailClosed`). Default: none (the first listing is the baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub expected_fingerprint: Option<String>,
}

impl Default for ToolsProbeSpec {
    fn default() -> Self {
        Self {
            policy: ToolsProbePolicy::default(),
            interval: default_probe_interval(),
            on_drift: DriftPolicy::default(),
            expected_fingerprint: None,
        }
    }
}

impl ToolsProbeSpec {
    /// The probe interval.
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `interval` does not parse.
    pub fn interval(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("toolsProbe.interval", &self.interval)
    }
}

/// When tools are listed: `OnStart`, `Interval`, `OnListChanged`, `PerCall` or `Never`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ToolsProbePolicy {
    /// List tools after each upstream handshake.
    #[default]
    OnStart,
    /// List tools after the handshake and then every `interval`.
    Interval,
    /// List tools after the handshake and on `notifications/tools/list_changed`.
    OnListChanged,
    /// List tools before every `tools/call`.
    PerCall,
    /// Never list tools.
    Never,
}

/// What tool drift does: `FailClosed` or `Refresh`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DriftPolicy {
    /// Calls to a drifted tool fail with outcome `drift_blocked`.
    #[default]
    FailClosed,
    /// The new listing becomes the baseline.
    Refresh,
}

fn default_probe_interval() -> DurationString {
    DurationString::new("5m")
}
