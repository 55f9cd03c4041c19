//! The proxy configuration contract: the file the operator renders into a ConfigMap and the
//! proxy reads at start-up, plus the session, tools-probe and timeout settings that the
//! `McpUpstream` spec embeds unchanged.
//!
//! One definition, two users: the operator serializes [`ProxyConfig`], the proxy deserializes it,
//! so the two can never disagree on a field name or a default.

pub mod audit;
pub mod oauth;
pub mod request_origin;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{DurationError, DurationString};
use crate::tool_policy::ToolsPolicySpec;
use crate::transport::Transport;

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
}

/// How clients authenticate to the proxy: exactly one of a static bearer token or OAuth 2.1
/// access tokens (checked by [`ProxyConfig::check`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DownstreamAuth {
    /// Name of an environment variable of the proxy holding the bearer token clients must send
    /// as `Authorization: Bearer <token>` (the operator fills it from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// JWT access tokens from an OAuth 2.1 authorization server (issue 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<oauth::OAuthSpec>,
}

impl DownstreamAuth {
    /// Checks that exactly one way of authenticating is set and that its fields are usable.
    ///
    /// # Errors
    /// [`ProxyConfigError::DownstreamAuth`] naming the field.
    pub fn check(&self) -> Result<(), ProxyConfigError> {
        let bad = |why: &str| Err(ProxyConfigError::DownstreamAuth(why.to_owned()));
        match (&self.bearer_token_env, &self.oauth) {
            (Some(_), Some(_)) => bad("set exactly one of bearerTokenEnv and oauth, not both"),
            (None, None) => bad("set one of bearerTokenEnv and oauth"),
            (Some(var), None) if var.trim().is_empty() => bad("bearerTokenEnv is empty"),
            (Some(_), None) => Ok(()),
            (None, Some(oauth)) => {
                let url = |u: &str| u.starts_with("https://") || u.starts_with("http://");
                if !url(&oauth.issuer) {
                    return bad("oauth.issuer must be an http(s) URL");
                }
                if !url(&oauth.audience) {
                    return bad("oauth.audience must be an http(s) URL");
                }
                if oauth.allowed_algorithms.is_empty() {
                    return bad("oauth.allowedAlgorithms is empty");
                }
                if let Some(scope) = oauth.required_scopes.iter().find(|s| {
                    s.is_empty() || s.bytes().any(|b| b <= b' ' || b == b'"' || b == b'\\')
                }) {
                    return Err(ProxyConfigError::DownstreamAuth(format!(
                        "oauth.requiredScopes entry {scope:?} is not a scope token"
                    )));
                }
                let duration = |r: Result<Duration, DurationError>, field: &str| {
                    r.map(drop).map_err(|e| {
                        ProxyConfigError::DownstreamAuth(format!("oauth.{field}: {e}"))
                    })
                };
                duration(oauth.jwks_refresh(), "jwksRefresh")?;
                duration(oauth.clock_skew(), "clockSkew")
            }
        }
    }

    /// A static bearer token read from environment variable `var`.
    pub fn bearer(var: impl Into<String>) -> Self {
        Self {
            bearer_token_env: Some(var.into()),
            oauth: None,
        }
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Smallest `session.maxSessions`.
pub const MAX_SESSIONS_MIN: u64 = 1;
/// Largest `session.maxSessions`.
pub const MAX_SESSIONS_MAX: u64 = 1024;

/// A [`ProxyConfig`] that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    /// The text is not valid YAML for [`ProxyConfig`].
    #[error("failed to parse proxy config")]
    Parse(#[source] serde_yaml::Error),
    /// A key the format does not have, at any depth (a typo would otherwise silently fall back to
    /// a default).
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// A duration field does not parse.
    #[error("invalid {field}")]
    Duration {
        /// Dotted path of the field, e.g. `timeouts.call`.
        field: &'static str,
        /// What was wrong with it.
        #[source]
        source: DurationError,
    },
    /// The transport needs a field that is absent.
    #[error("{field} is required when upstream.transport is {transport:?}")]
    Missing {
        /// Dotted path of the missing field.
        field: &'static str,
        /// The configured transport.
        transport: Transport,
    },
    /// An upstream header has no value (neither or both of `value`/`valueEnv`, or the variable
    /// is unset).
    #[error(
        "upstream header {0:?} needs exactly one of value or valueEnv, and valueEnv must be set"
    )]
    Header(String),
    /// A number outside its range.
    #[error("{field} must be {min}-{max}, got {value}")]
    OutOfRange {
        /// Dotted path of the field, e.g. `session.maxSessions`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// The tool policy is malformed.
    #[error("invalid tools policy: {0}")]
    Tools(crate::tool_policy::PolicyFinding),
    /// `downstreamAuth` sets both or neither of `bearerTokenEnv` and `oauth`, or an `oauth`
    /// field is unusable.
    #[error("invalid downstreamAuth: {0}")]
    DownstreamAuth(String),
    /// `tools.grants` without `downstreamAuth.oauth`: there are no claims to match.
    #[error(
        "tools.grants needs downstreamAuth.oauth: grants match the claims of OAuth access tokens"
    )]
    GrantsNeedOAuth,
    /// `tools.readOnly` or a read-only grant with `toolsProbe.policy: Never`: whether a tool is
    /// read-only is learned from the proxy's own listing, which `Never` never makes.
    #[error(
        "toolsProbe.policy Never cannot serve tools.readOnly or a readOnly grant: readOnlyHint comes from the proxy's own tool listing"
    )]
    ReadOnlyNeedsProbe,
    /// The transport is declared in the API but this proxy build does not serve it yet.
    #[error("upstream.transport {0:?} is not supported by this proxy version")]
    UnsupportedTransport(Transport),
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
        let max_sessions = u64::from(self.session.max_sessions);
        if !(MAX_SESSIONS_MIN..=MAX_SESSIONS_MAX).contains(&max_sessions) {
            return Err(ProxyConfigError::OutOfRange {
                field: "session.maxSessions",
                value: max_sessions,
                min: MAX_SESSIONS_MIN,
                max: MAX_SESSIONS_MAX,
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

/// The upstream MCP server as the proxy reaches it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamEndpoint {
    /// Wire transport of the upstream.
    pub transport: Transport,
    /// Streamable HTTP endpoint URL, e.g. `http://127.0.0.1:3001/mcp` (the sidecar is on the
    /// pod's loopback). Required for `StreamableHttp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers presented on every upstream request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderSource>,
    /// `Stdio` only: the server's argv (`[program, args...]`); the proxy spawns one child per
    /// client session itself. Exactly one of `command` and `socket` is set for `Stdio`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// `Stdio` only: Unix socket path of a `berth-proxy stdio-host` in the same pod; the proxy
    /// opens one connection (one child) per client session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// `Stdio` only: longest JSON-RPC line accepted from a child, in bytes; a longer reply
    /// fails its request with a clear error and is never buffered whole. Default 16 MiB
    /// (16777216).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_line_bytes: Option<u64>,
}

/// One upstream header: `name` and exactly one of a literal `value` or `valueEnv`, the name of
/// an environment variable of the proxy that holds the value (the operator fills it from a
/// Secret, so the value is in neither the config nor a command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderSource {
    /// Header name.
    pub name: String,
    /// Literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Environment variable holding the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env: Option<String>,
}

impl UpstreamEndpoint {
    /// `Stdio` rules: exactly one of `command` and `socket`; a command whose program is not
    /// empty; a socket path that is not empty; `maxLineBytes` at least 1.
    ///
    /// # Errors
    /// [`ProxyConfigError::Missing`] whose `field` names the field and what it needs, e.g.
    /// "upstream.command is required when upstream.transport is Stdio".
    pub fn check_stdio(&self) -> Result<(), ProxyConfigError> {
        let missing = |field| {
            Err(ProxyConfigError::Missing {
                field,
                transport: Transport::Stdio,
            })
        };
        match (&self.socket, self.command.is_empty()) {
            (Some(_), false) => missing("exactly one of upstream.command and upstream.socket"),
            (None, true) => missing("upstream.command (or upstream.socket)"),
            (Some(socket), true) if socket.trim().is_empty() => {
                missing("upstream.socket (a non-empty path)")
            }
            (None, false) if self.command[0].trim().is_empty() => {
                missing("upstream.command (a non-empty program as its first element)")
            }
            _ if self.max_line_bytes == Some(0) => missing("upstream.maxLineBytes (at least 1)"),
            _ => Ok(()),
        }
    }

    /// The headers with their values, reading `valueEnv` through `env`.
    ///
    /// # Errors
    /// [`ProxyConfigError::Header`] naming the header whose value is missing or ambiguous (the
    /// value itself is never in the error).
    pub fn resolve_headers(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, ProxyConfigError> {
        self.headers
            .iter()
            .map(|header| {
                let value = match (&header.value, &header.value_env) {
                    (Some(value), None) => Some(value.clone()),
                    (None, Some(var)) => env(var),
                    _ => None,
                };
                value
                    .map(|value| (header.name.clone(), value))
                    .ok_or_else(|| ProxyConfigError::Header(header.name.clone()))
            })
            .collect()
    }
}

/// How downstream (client) sessions map onto upstream sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpec {
    /// Session strategy. `Shared` (default): one long-lived upstream session serves every client;
    /// the proxy answers each client's `initialize` from the upstream's handshake and rewrites
    /// JSON-RPC request ids so clients never see each other's replies. `PerClient`: each client
    /// session gets an upstream session of its own, opened with the client's own `initialize`
    /// and closed when the client's session ends (DELETE or idle expiry); at most
    /// `maxSessions` at once.
    #[serde(default)]
    pub strategy: SessionStrategy,
    /// A client session with no request for this long ends; its next request gets HTTP 404 and
    /// the client starts a new session. Example `30m`. Default `30m`.
    #[serde(default = "default_idle_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.session.idleTimeout must be more than 0s and at most 168h"}]))]
    pub idle_timeout: DurationString,
    /// Most client sessions served at once with the `PerClient` strategy (each holds an upstream
    /// session of its own); past it, a new `initialize` gets a clear JSON-RPC error. Range
    /// 1-1024. Default `16`.
    #[serde(default = "default_max_sessions")]
    #[schemars(with = "i32", range(min = MAX_SESSIONS_MIN, max = MAX_SESSIONS_MAX))]
    pub max_sessions: u32,
}

impl Default for SessionSpec {
    fn default() -> Self {
        Self {
            strategy: SessionStrategy::default(),
            idle_timeout: default_idle_timeout(),
            max_sessions: default_max_sessions(),
        }
    }
}

impl SessionSpec {
    /// The client session idle timeout.
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `idleTimeout` does not parse.
    pub fn idle_timeout(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("session.idleTimeout", &self.idle_timeout)
    }
}

/// How client sessions map onto upstream sessions: `Shared` or `PerClient`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SessionStrategy {
    /// One upstream session for the whole pod, reused by every client.
    #[default]
    Shared,
    /// One upstream session per client session.
    PerClient,
}

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

/// [`parse_field`], and more than zero: a zero connect budget never completes a handshake, a
/// zero idle timeout ends every session at once, and a zero probe interval lists tools in a hot
/// loop.
fn parse_positive(
    field: &'static str,
    value: &DurationString,
) -> Result<Duration, ProxyConfigError> {
    let parsed = parse_field(field, value)?;
    if parsed.is_zero() {
        return Err(ProxyConfigError::Duration {
            field,
            source: DurationError {
                value: value.0.clone(),
                reason: "must be more than 0s",
            },
        });
    }
    Ok(parsed)
}

fn parse_field(field: &'static str, value: &DurationString) -> Result<Duration, ProxyConfigError> {
    value
        .to_duration()
        .map_err(|source| ProxyConfigError::Duration { field, source })
}

fn default_max_sessions() -> u32 {
    16
}

fn default_idle_timeout() -> DurationString {
    DurationString::new("30m")
}

fn default_probe_interval() -> DurationString {
    DurationString::new("5m")
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

#[cfg(test)]
mod tests {
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
