//! The proxy configuration contract: the file the operator renders into a ConfigMap and the
//! proxy reads at start-up, plus the session, tools-probe and timeout settings that the
//! `McpUpstream` spec embeds unchanged.
//!
//! One definition, two users: the operator serializes [`ProxyConfig`], the proxy deserializes it,
//! so the two can never disagree on a field name or a default.
//!
//! This module holds [`ProxyConfig`] itself, its parsing and the rules across its parts. Each
//! part is a child module: `upstream` (where the upstream is and how to reach it), `session`,
//! `tools_probe`, `timeouts`, `downstream_auth` (with [`oauth`]), [`request_origin`],
//! [`audit`] and [`limits`]; `error` holds [`ProxyConfigError`], which every part uses. The children use only
//! each other (`error` and `oauth`), never this module.

pub mod audit;
mod downstream_auth;
mod error;
pub mod limits;
pub mod oauth;
pub mod request_origin;
mod session;
mod timeouts;
mod tools_probe;
pub mod upstream;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::tool_policy::ToolsPolicySpec;
use crate::transport::Transport;
pub use downstream_auth::DownstreamAuth;
pub use error::ProxyConfigError;
pub use session::{
    MAX_SESSIONS_MAX, MAX_SESSIONS_MIN, MAX_SHARED_SESSIONS_MAX, NEW_SESSIONS_PER_MINUTE_MAX,
    REPLAY_BUFFER_MIB_MAX, SessionSpec, SessionStrategy, default_max_shared_sessions,
    default_new_sessions_per_minute, default_replay_buffer_mib,
};
pub use timeouts::{MAX_DRAIN, TimeoutsSpec};
pub use tools_probe::{DriftPolicy, ToolsProbePolicy, ToolsProbeSpec};
pub use upstream::{HeaderSource, UpstreamEndpoint};

/// Everything the berth proxy needs to run, as YAML under the ConfigMap key
/// [`crate::PROXY_CONFIG_KEY`] (camelCase keys).
///
/// Example:
/// ```yaml
/// listen: 0.0.0.0:8080
/// adminListen: 0.0.0.0:9090
/// upstream: { transport: StreamableHttp, url: http://127.0.0.1:3001/mcp }
/// session: { strategy: Shared }
/// toolsProbe: { policy: OnStart, interval: 5m }
/// timeouts: { connect: 10s, call: 60s }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyConfig {
    /// Socket address the MCP endpoint listens on, `host:port`.
    pub listen: String,
    /// Socket address of `/metrics`, `/healthz` and `/readyz`, `host:port`.
    pub admin_listen: String,
    /// Where the upstream MCP server is and how to speak to it.
    pub upstream: UpstreamEndpoint,
    /// How downstream sessions map onto upstream sessions.
    #[serde(default)]
    pub session: SessionSpec,
    /// When the proxy lists the upstream's tools.
    #[serde(default)]
    pub tools_probe: ToolsProbeSpec,
    /// Time budgets the proxy enforces.
    #[serde(default)]
    pub timeouts: TimeoutsSpec,
    /// Which upstream tools clients may see and call.
    #[serde(default, skip_serializing_if = "is_default")]
    pub tools: ToolsPolicySpec,
    /// Client authentication on the MCP endpoint. Default: none (any client may connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downstream_auth: Option<DownstreamAuth>,
    /// Name of an environment variable of the proxy holding the key that signs downstream
    /// session ids, so every replica sharing the key accepts a session another replica issued
    /// (field case BR-35). Default: none (ids are valid on the issuing replica only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key_env: Option<String>,
    /// Browser origins and `Host` names the MCP endpoint accepts (DNS rebinding protection).
    /// Default: loopback origins, any `Host`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub request_origin: request_origin::RequestOriginSpec,
    /// Where audit events go (one JSON line per `tools/call` and per refused request;
    /// `docs/audit.md`). Default `Stdout`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub audit: audit::AuditLog,
    /// What one client, connection or upstream reply may cost the proxy (issue 39). Default:
    /// [`limits::LimitsSpec::default`].
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: limits::LimitsSpec,
    /// SHA-256 (64 lowercase hex digits) of the bearer token the admin port's diagnostics
    /// (`/tools`: tool names and fingerprints; `/upstream`: the upstream's last error and a
    /// stdio child's last stderr lines) require from a peer that is not on loopback. The
    /// operator sets it and sends the token; `/metrics`, `/healthz` and `/readyz` stay open to
    /// probes and scrapers. Default: none, and the diagnostics answer loopback peers only
    /// (issue 39, item 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics_token_sha256: Option<String>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl ProxyConfig {
    /// Parses and checks a proxy config from YAML text.
    ///
    /// # Errors
    /// [`ProxyConfigError`] naming the first field that is malformed, missing or unsupported.
    pub fn from_yaml(text: &str) -> Result<Self, ProxyConfigError> {
        let mut unknown = Vec::new();
        let deserializer = serde_yaml::Deserializer::from_str(text);
        let config: Self = serde_ignored::deserialize(deserializer, |path| {
            unknown.push(path.to_string());
        })
        .map_err(ProxyConfigError::Parse)?;
        if let Some(field) = unknown.into_iter().next() {
            return Err(ProxyConfigError::UnknownField(field));
        }
        config.check()?;
        Ok(config)
    }

    /// Renders the config as YAML (the form stored in the ConfigMap).
    ///
    /// # Errors
    /// Only if serialization fails, which the types here do not allow in practice.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        serde_yaml::to_string(self)
    }

    /// Checks cross-field rules and that every duration parses.
    ///
    /// # Errors
    /// [`ProxyConfigError`] for the first failed rule.
    pub fn check(&self) -> Result<(), ProxyConfigError> {
        self.timeouts.connect()?;
        self.session.idle_timeout()?;
        self.timeouts.call()?;
        self.timeouts.max_call()?;
        self.timeouts.drain()?;
        self.tools_probe.interval()?;
        self.limits.check()?;
        if let Some(digest) = &self.diagnostics_token_sha256
            && !(digest.len() == 64
                && digest
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        {
            return Err(ProxyConfigError::DiagnosticsToken);
        }
        let max_sessions = u64::from(self.session.max_sessions);
        if !(MAX_SESSIONS_MIN..=MAX_SESSIONS_MAX).contains(&max_sessions) {
            return Err(ProxyConfigError::OutOfRange {
                field: "session.maxSessions",
                value: max_sessions,
                min: MAX_SESSIONS_MIN,
                max: MAX_SESSIONS_MAX,
            });
        }
        let per_identity = self.session.max_sessions_per_identity.unwrap_or(1);
        for (field, value) in [
            (
                "session.maxSharedSessions",
                self.session.max_shared_sessions,
            ),
            ("session.maxSessionsPerIdentity", per_identity),
        ] {
            if !(1..=MAX_SHARED_SESSIONS_MAX).contains(&u64::from(value)) {
                return Err(ProxyConfigError::OutOfRange {
                    field,
                    value: u64::from(value),
                    min: 1,
                    max: MAX_SHARED_SESSIONS_MAX,
                });
            }
        }
        let rate = u64::from(self.session.new_sessions_per_minute);
        if !(1..=NEW_SESSIONS_PER_MINUTE_MAX).contains(&rate) {
            return Err(ProxyConfigError::OutOfRange {
                field: "session.newSessionsPerMinute",
                value: rate,
                min: 1,
                max: NEW_SESSIONS_PER_MINUTE_MAX,
            });
        }
        let replay_buffer = u64::from(self.session.replay_buffer_mib);
        if replay_buffer > REPLAY_BUFFER_MIB_MAX {
            return Err(ProxyConfigError::OutOfRange {
                field: "session.replayBufferMiB",
                value: replay_buffer,
                min: 0,
                max: REPLAY_BUFFER_MIB_MAX,
            });
        }
        if let Some(finding) = self.tools.check().into_iter().next() {
            return Err(ProxyConfigError::Tools(finding));
        }
        let oauth = self.downstream_auth.as_ref().and_then(|a| a.oauth.as_ref());
        if !self.tools.grants.is_empty() && oauth.is_none() {
            return Err(ProxyConfigError::GrantsNeedOAuth);
        }
        let read_only = self.tools.read_only || self.tools.grants.iter().any(|g| g.read_only);
        if read_only && self.tools_probe.policy == ToolsProbePolicy::Never {
            return Err(ProxyConfigError::ReadOnlyNeedsProbe);
        }
        if let Some(auth) = &self.downstream_auth {
            auth.check()?;
        }
        for header in &self.upstream.headers {
            if header.value.is_some() == header.value_env.is_some() {
                return Err(ProxyConfigError::Header(header.name.clone()));
            }
        }
        match self.upstream.transport {
            Transport::StreamableHttp if self.upstream.url.is_none() => {
                Err(ProxyConfigError::Missing {
                    field: "upstream.url",
                    transport: Transport::StreamableHttp,
                })
            }
            Transport::StreamableHttp => Ok(()),
            Transport::Stdio => self.upstream.check_stdio(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MINIMAL: &str = "listen: 127.0.0.1:8080\nadminListen: 127.0.0.1:9090\n\
        upstream: {transport: StreamableHttp, url: 'http://127.0.0.1:3001/mcp'}\n";

    #[test]
    fn proxy_config_minimal_yaml_gets_defaults() {
        let config = ProxyConfig::from_yaml(MINIMAL).expect("minimal config parses");
        assert_eq!(config.session.strategy, SessionStrategy::Shared);
        assert_eq!(config.tools_probe.policy, ToolsProbePolicy::OnStart);
        assert_eq!(
            config.timeouts.connect().ok(),
            Some(Duration::from_secs(10))
        );
        assert_eq!(config.timeouts.call().ok(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn read_only_rules_need_a_tools_probe() {
        let mut config = ProxyConfig::from_yaml(MINIMAL).expect("minimal config parses");
        config.tools_probe.policy = ToolsProbePolicy::Never;
        assert!(config.check().is_ok(), "Never alone is fine");
        config.tools.read_only = true;
        assert!(matches!(
            config.check(),
            Err(ProxyConfigError::ReadOnlyNeedsProbe)
        ));
        config.tools_probe.policy = ToolsProbePolicy::PerCall;
        assert!(config.check().is_ok());
    }

    #[test]
    fn proxy_config_round_trips_through_yaml() {
        let config = ProxyConfig::from_yaml(MINIMAL).expect("minimal config parses");
        let text = config.to_yaml().expect("serializes");
        assert_eq!(ProxyConfig::from_yaml(&text).expect("reparses"), config);
    }

    #[test]
    fn proxy_config_bad_duration_names_the_field() {
        let text = format!("{MINIMAL}timeouts: {{call: 5 seconds}}\n");
        let err = ProxyConfig::from_yaml(&text).expect_err("bad duration rejected");
        assert!(err.to_string().contains("timeouts.call"), "{err}");
    }

    #[test]
    fn proxy_config_max_sessions_outside_1_to_1024_names_the_field() {
        for value in [0, 1025] {
            let text = format!("{MINIMAL}session: {{maxSessions: {value}}}\n");
            let err = ProxyConfig::from_yaml(&text).expect_err("out of range rejected");
            assert!(
                err.to_string()
                    .contains("session.maxSessions must be 1-1024"),
                "{err}"
            );
        }
        for value in [1, 1024] {
            let text = format!("{MINIMAL}session: {{maxSessions: {value}}}\n");
            ProxyConfig::from_yaml(&text).expect("in range accepted");
        }
    }

    #[test]
    fn proxy_config_replay_buffer_over_4096_mib_names_the_field() {
        let text = format!("{MINIMAL}session: {{replayBufferMiB: 4097}}\n");
        let err = ProxyConfig::from_yaml(&text).expect_err("out of range rejected");
        assert!(
            err.to_string()
                .contains("session.replayBufferMiB must be 0-4096"),
            "{err}"
        );
        for value in [0, 4096] {
            let text = format!("{MINIMAL}session: {{replayBufferMiB: {value}}}\n");
            let config = ProxyConfig::from_yaml(&text).expect("in range accepted");
            assert_eq!(config.session.replay_buffer_bytes(), (value as usize) << 20);
        }
        let config = ProxyConfig::from_yaml(MINIMAL).expect("minimal");
        assert_eq!(
            config.session.replay_buffer_bytes(),
            32 << 20,
            "default 32 MiB"
        );
    }

    #[test]
    fn proxy_config_zero_connect_idle_timeout_or_probe_interval_names_the_field() {
        for (line, field) in [
            ("timeouts: {connect: 0s}", "timeouts.connect"),
            ("session: {idleTimeout: 0s}", "session.idleTimeout"),
            (
                "toolsProbe: {policy: Interval, interval: 0s}",
                "toolsProbe.interval",
            ),
        ] {
            let text = format!("{MINIMAL}{line}\n");
            let err = ProxyConfig::from_yaml(&text).expect_err("zero rejected");
            let chain = format!(
                "{err}: {}",
                std::error::Error::source(&err)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
            assert!(chain.contains(field), "{line}: {chain}");
            assert!(chain.contains("more than 0s"), "{line}: {chain}");
        }
    }

    #[test]
    fn proxy_config_http_without_url_is_rejected() {
        let text = "listen: a:1\nadminListen: b:2\nupstream: {transport: StreamableHttp}\n";
        let err = ProxyConfig::from_yaml(text).expect_err("missing url rejected");
        assert!(err.to_string().contains("upstream.url"), "{err}");
    }

    #[test]
    fn proxy_config_stdio_needs_exactly_one_of_command_and_socket() {
        let base = "listen: a:1\nadminListen: b:2\n";
        let ok = [
            "upstream: {transport: Stdio, command: [node, server.js]}",
            "upstream: {transport: Stdio, socket: /berth/stdio/host.sock}",
        ];
        for upstream in ok {
            let config = ProxyConfig::from_yaml(&format!("{base}{upstream}\n"))
                .unwrap_or_else(|e| panic!("{upstream}: {e}"));
            assert_eq!(config.upstream.max_line_bytes, None);
        }
        let bad = [
            ("upstream: {transport: Stdio}", "upstream.command"),
            (
                "upstream: {transport: Stdio, command: []}",
                "upstream.command",
            ),
            (
                "upstream: {transport: Stdio, command: ['']}",
                "upstream.command",
            ),
            (
                "upstream: {transport: Stdio, command: [x], socket: /s}",
                "upstream.command",
            ),
            (
                "upstream: {transport: Stdio, socket: ''}",
                "upstream.socket",
            ),
            (
                "upstream: {transport: Stdio, command: [x], maxLineBytes: 0}",
                "upstream.maxLineBytes",
            ),
        ];
        for (upstream, field) in bad {
            let err = ProxyConfig::from_yaml(&format!("{base}{upstream}\n")).expect_err(upstream);
            assert!(err.to_string().contains(field), "{upstream}: {err}");
        }
    }

    #[test]
    fn proxy_config_nested_unknown_key_is_rejected() {
        let text = format!("{MINIMAL}timeouts: {{connect: 10s, cal: 5s}}\n");
        let err = ProxyConfig::from_yaml(&text).expect_err("nested typo rejected");
        assert!(err.to_string().contains("timeouts.cal"), "{err}");
    }

    #[test]
    fn proxy_config_zero_or_huge_call_budget_is_rejected() {
        for bad in ["0s", "5000000000000000h", "169h"] {
            let text = format!("{MINIMAL}timeouts: {{call: {bad}}}\n");
            let err = ProxyConfig::from_yaml(&text).expect_err("out of range");
            assert!(err.to_string().contains("timeouts.call"), "{bad}: {err}");
        }
    }

    #[test]
    fn proxy_config_unknown_key_is_rejected() {
        let text = format!("{MINIMAL}sesion: {{strategy: Shared}}\n");
        let err = ProxyConfig::from_yaml(&text).expect_err("typo rejected");
        assert!(format!("{:?}", err).contains("sesion"), "{err:?}");
    }
}
