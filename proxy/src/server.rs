//! Start-up wiring: builds the call engine's [`Engine`] and the fronts' state from the config,
//! starts the upstream supervisor and the background tasks, serves the two listeners, and shuts
//! down in order.
//!
//! Shutdown runs in order (issue 11, rolling updates lose nothing): [`RunningProxy::drain`]
//! first reports not ready (`/readyz` 503 `draining`) while still serving for
//! `timeouts.drain`; then both listeners stop accepting, standalone GET streams end and
//! in-flight requests finish; only after both servers have ended do the upstream session, the
//! stdio children and the background tasks stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use berth_crds::proxy_config::audit::{AuditLog, MCP_UPSTREAM_ENV};
use berth_crds::proxy_config::upstream::POD_IP_ENV;
use berth_crds::{ProxyConfig, ProxyConfigError, Transport};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::client::audit::{AuditLimits, Auditor};
use crate::client::sessions::Sessions;
use crate::client::subscriptions::Subscriptions;
use crate::observe::metrics::Metrics;
use crate::transport::stdio::{StdioEndpoint, Target};
use crate::transport::upstream::exposure::{Exposure, Probe};
use crate::transport::upstream::http::ReplyLimit;
use crate::transport::upstream::{
    Endpoint, HttpUpstream, Upstream, UpstreamError, UpstreamSettings,
};

pub mod connections;
mod tasks;

pub use crate::engine::state::Engine;
use crate::front::mcp::Front;
pub use crate::front::mcp::linger::{self, LingerOnClose};
use crate::observe::metrics::connections::Port;
use connections::{Listener, ListenerLimits};

/// A proxy that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is unusable.
    #[error("invalid proxy config")]
    Config(#[from] ProxyConfigError),
    /// The upstream client cannot be built.
    #[error("invalid upstream settings")]
    Upstream(#[from] UpstreamError),
    /// A secret the config names by environment variable is unset, empty or unusable.
    #[error("environment variable {var} (from {field}) {problem}")]
    Secret {
        /// The variable's name.
        var: String,
        /// The config field that names it.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// An environment setting of the proxy is malformed.
    #[error("invalid environment: {0}")]
    Env(String),
    /// The OAuth settings of `downstreamAuth` are unusable.
    #[error("invalid {0}")]
    Auth(String),
    /// The audit writer thread cannot be started.
    #[error("failed to start the audit writer")]
    Audit(#[source] std::io::Error),
    /// A rule of `tools` (grants, rate limits) cannot be compiled.
    #[error("invalid {0}")]
    Policy(String),
    /// A listen address cannot be bound.
    #[error("failed to bind {addr}")]
    Bind {
        /// The address from the config.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl From<crate::access::auth::AuthConfigError> for StartError {
    fn from(error: crate::access::auth::AuthConfigError) -> Self {
        match error {
            crate::access::auth::AuthConfigError::Token(var) => Self::Secret {
                var,
                field: "downstreamAuth.bearerTokenEnv",
                problem: "is unset or empty".to_owned(),
            },
            crate::access::auth::AuthConfigError::OAuth(problem) => {
                Self::Auth(format!("downstreamAuth.{problem}"))
            }
        }
    }
}

/// Server messages buffered between the upstream's standalone stream and the fan-out.
const SERVER_MESSAGE_BUFFER: usize = 256;

/// A started proxy.
pub struct RunningProxy {
    /// Where MCP is served.
    pub mcp_addr: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub admin_addr: SocketAddr,
    /// The call engine's state (for tests and embedding).
    pub engine: Arc<Engine>,
    /// Set when a drain began: `/readyz` answers 503 `draining`.
    draining: Arc<AtomicBool>,
    shutdown: CancellationToken,
    drain: Duration,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningProxy {
    /// Stops serving (in-flight requests finish), then closes the upstream session, and waits
    /// for all of it to end.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.wait().await;
    }

    /// What the kubelet's SIGTERM starts: reports not ready at once and keeps serving for
    /// `timeouts.drain` (so the pod leaves its Service's endpoints first), then
    /// [`Self::shutdown`]. Returns early into the shutdown if the proxy is stopped meanwhile.
    ///
    /// Cancellation safety: dropping the future leaves the proxy draining but serving.
    pub async fn drain(self) {
        self.draining.store(true, Ordering::Relaxed);
        tracing::info!(
            drain_ms = self.drain.as_millis() as u64,
            "draining: not ready, still serving"
        );
        tokio::select! {
            () = tokio::time::sleep(self.drain) => {}
            () = self.shutdown.cancelled() => {}
        }
        tracing::info!("drain over: no new connections; waiting for in-flight requests");
        self.shutdown().await;
    }

    /// Waits until `shutdown` fires or a server ends.
    pub async fn wait(self) {
        for task in self.tasks {
            let _ = task.await;
        }
        // Every request has ended: its audit events are written before the process exits.
        self.engine.auditor.close();
    }

    /// The token that stops this proxy.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

async fn bind(addr: &str) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind {
            addr: addr.to_owned(),
            source,
        })
}

/// Checks `config`, binds its listen addresses and starts serving.
///
/// # Errors
/// [`StartError`] for an unusable config or an address that cannot be bound.
pub async fn start(config: &ProxyConfig) -> Result<RunningProxy, StartError> {
    start_with_env(config, &|var| std::env::var(var).ok()).await
}

/// As [`start`], reading the `valueEnv` of upstream headers through `env` instead of the
/// process environment.
///
/// # Errors
/// As [`start`].
pub async fn start_with_env(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RunningProxy, StartError> {
    config.check()?;
    let mcp = bind(&config.listen).await?;
    let admin = bind(&config.admin_listen).await?;
    start_on(config, mcp, admin, env).await
}

/// Starts serving on listeners the caller bound, reading header variables through `env`.
///
/// # Errors
/// [`StartError`] for an unusable config.
pub async fn start_on(
    config: &ProxyConfig,
    mcp: TcpListener,
    admin: TcpListener,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RunningProxy, StartError> {
    config.check()?;
    let budgets = Budgets {
        call: config.timeouts.call()?,
        max_call: config.timeouts.max_call()?,
        connect: config.timeouts.connect()?,
    };
    let idle_timeout = config.session.idle_timeout()?;
    let drain = config.timeouts.drain()?;
    let metrics = Arc::new(Metrics::new());
    let (downstream_auth, sessions) = downstream_secrets(config, env, idle_timeout, &metrics)?;
    // `shutdown` stops the listeners; `upstream_stop` everything behind them, once they ended.
    let shutdown = CancellationToken::new();
    let upstream_stop = CancellationToken::new();
    let endpoint = endpoint(config, env, budgets.connect, &metrics)?;
    let (server_messages, server_messages_rx) = tokio::sync::mpsc::channel(SERVER_MESSAGE_BUFFER);
    let (upstream, supervisor) = Upstream::spawn(
        endpoint.clone(),
        upstream_settings(config, env, budgets)?,
        Arc::clone(&metrics),
        server_messages,
        upstream_stop.clone(),
        shutdown.clone(),
    );
    let engine = Arc::new(engine(config, env, upstream, sessions, metrics, budgets)?);
    let front = Arc::new(Front {
        engine: Arc::clone(&engine),
        shutdown: shutdown.clone(),
        strategy: config.session.strategy,
        session_cap: config.session.cap() as usize,
        sessions_per_identity: config.session.per_identity() as usize,
        endpoint: endpoint.clone(),
        downstream_auth,
        request_origin: config.request_origin.clone(),
        max_request_bytes: usize::try_from(config.limits.max_request_bytes).unwrap_or(usize::MAX),
        max_listen_uris: usize::try_from(config.limits.max_listen_uris).unwrap_or(usize::MAX),
        opening: Default::default(),
        new_session_rate: crate::client::session_room::NewSessionRate::new(
            config.session.new_sessions_per_minute,
        ),
        new_sessions_per_minute: config.session.new_sessions_per_minute,
    });
    let draining = Arc::new(AtomicBool::new(false));
    let exposure = Arc::new(Exposure::new(engine.metrics.upstream_exposed.clone()));
    let mcp_addr = local_addr(&mcp, &config.listen)?;
    let admin_addr = local_addr(&admin, &config.admin_listen)?;
    let admin_state = crate::front::admin::Admin {
        upstream: Arc::clone(&engine.upstream),
        metrics: Arc::clone(&engine.metrics),
        draining: Arc::clone(&draining),
        diagnostics_token: crate::front::admin::diagnostics_digest(
            config.diagnostics_token_sha256.as_deref(),
        ),
        exposure: Arc::clone(&exposure),
    };
    let listeners = [
        Listener {
            socket: mcp,
            port: Port::Mcp,
            router: crate::front::mcp::router(Arc::clone(&front)),
            limits: ListenerLimits::mcp(&config.limits)?,
        },
        Listener {
            socket: admin,
            port: Port::Admin,
            router: crate::front::admin::router(admin_state),
            limits: ListenerLimits::admin(&config.limits)?,
        },
    ];
    let mut tasks = vec![
        serve_fronts(listeners, &engine.metrics, &shutdown, upstream_stop.clone()),
        // Ends once the upstream session is closed (after `upstream_stop`, within 2 s).
        supervisor,
    ];
    tasks.extend(tasks::spawn(
        &engine,
        front.downstream_auth.as_ref(),
        &endpoint,
        server_messages_rx,
        idle_timeout,
        &upstream_stop,
    ));
    if let Some(probe) = exposure_probe(&endpoint, env) {
        let stop = upstream_stop.clone();
        tasks.push(tokio::spawn(async move {
            exposure.watch(probe, stop).await;
        }));
    }
    tracing::info!(%mcp_addr, %admin_addr, upstream = %endpoint, "berth proxy serving");
    Ok(RunningProxy {
        mcp_addr,
        admin_addr,
        engine,
        draining,
        shutdown,
        drain,
        tasks,
    })
}

/// What the exposure check connects to: an HTTP upstream on loopback and the pod IP from
/// [`POD_IP_ENV`]; `None` for stdio, an upstream elsewhere, or no pod IP (issue 40, item 3).
fn exposure_probe(endpoint: &Endpoint, env: &dyn Fn(&str) -> Option<String>) -> Option<Probe> {
    let Endpoint::Http(http) = endpoint else {
        return None;
    };
    Probe::of(http.url(), env(POD_IP_ENV).as_deref())
}

/// How the upstream supervisor runs: `timeouts.connect`, the tool-list probe (within
/// `timeouts.call`), the tool policy, and [`MAX_QUICK_FAILURES_ENV`].
fn upstream_settings(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
    budgets: Budgets,
) -> Result<UpstreamSettings, StartError> {
    Ok(UpstreamSettings {
        connect_budget: budgets.connect,
        probe: config.tools_probe.clone(),
        probe_budget: budgets.call,
        policy: config.tools.clone(),
        max_quick_failures: env_number(env, MAX_QUICK_FAILURES_ENV)?
            .unwrap_or(DEFAULT_MAX_QUICK_FAILURES),
    })
}

/// `timeouts.call`, `timeouts.maxCall` and `timeouts.connect`, read once.
#[derive(Clone, Copy)]
struct Budgets {
    call: Duration,
    max_call: Option<Duration>,
    connect: Duration,
}

/// The call engine of `config` over `upstream` and the downstream `sessions`: the tool rules
/// compiled, the audit log opened.
fn engine(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
    upstream: Arc<Upstream>,
    sessions: Sessions,
    metrics: Arc<Metrics>,
    budgets: Budgets,
) -> Result<Engine, StartError> {
    let tool_grants = crate::access::auth::grants::Grants::new(&config.tools.grants)
        .map_err(StartError::Policy)?;
    let rate_limits = crate::access::rate_limits::RateLimits::new(&config.tools.rate_limits)
        .map_err(StartError::Policy)?;
    let auditor = match config.audit {
        AuditLog::Stdout => Auditor::stdout(
            env(MCP_UPSTREAM_ENV),
            AuditLimits::of(&config.limits),
            metrics.audit.clone(),
        )
        .map_err(StartError::Audit)?,
        AuditLog::Off => Auditor::off(),
    };
    Ok(Engine {
        upstream,
        sessions: Arc::new(sessions),
        subscriptions: Arc::new(
            Subscriptions::new(
                usize::try_from(config.limits.max_subscriptions_per_session).unwrap_or(usize::MAX),
                crate::transport::upstream::control::OwnRequests::new(
                    usize::try_from(config.limits.max_proxy_requests_in_flight).unwrap_or(16),
                    metrics.limits.own_requests_in_flight.clone(),
                ),
            )
            .with_max_uri_bytes(usize::try_from(config.limits.max_uri_bytes).unwrap_or(usize::MAX)),
        ),
        parked: Default::default(),
        metrics,
        call_budget: budgets.call,
        max_call: budgets.max_call,
        connect_budget: budgets.connect,
        tools_policy: config.tools.clone(),
        tool_grants,
        rate_limits,
        auditor,
    })
}

/// The client bearer token (`downstreamAuth.bearerTokenEnv`) and the session store, signing ids
/// with the key from `sessionKeyEnv` when set. Both variables, when named, must hold a value.
fn downstream_secrets(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
    idle_timeout: Duration,
    metrics: &Metrics,
) -> Result<(Option<crate::access::auth::DownstreamAuth>, Sessions), StartError> {
    let auth = config
        .downstream_auth
        .as_ref()
        .map(|auth| {
            crate::access::auth::DownstreamAuth::from_config(
                auth,
                env,
                &metrics.auth,
                config.limits.max_token_bytes as usize,
            )
        })
        .transpose()?;
    let mut sessions = Sessions::new(idle_timeout).with_replay_budget(
        config.session.replay_buffer_bytes(),
        metrics.replay_bytes.clone(),
    );
    if let Some(var) = &config.session_key_env {
        let secret = |problem: String| StartError::Secret {
            var: var.clone(),
            field: "sessionKeyEnv",
            problem,
        };
        let key = env(var).ok_or_else(|| secret("is unset".to_owned()))?;
        let signer = crate::client::sessions::signed_id::SessionSigner::new(key.as_bytes())
            .map_err(|short| secret(short.to_string()))?;
        sessions = sessions.with_signer(signer);
    }
    Ok((auth, sessions))
}

/// Environment variable: wait after closing a stdio child's stdin before SIGTERM, and after
/// SIGTERM before SIGKILL, as a duration (`2s`, the default).
pub const STDIO_GRACE_ENV: &str = "BERTH_STDIO_GRACE";
/// Environment variable: consecutive quick failures of the supervisor's stdio child after which
/// the proxy stops and exits non-zero (default 5; 0 never stops; field case BR-34).
pub const MAX_QUICK_FAILURES_ENV: &str = "BERTH_STDIO_MAX_QUICK_FAILURES";
/// Default of [`MAX_QUICK_FAILURES_ENV`].
pub const DEFAULT_MAX_QUICK_FAILURES: u32 = 5;

/// The upstream endpoint of `config`: HTTP, stdio children, or a stdio host's socket.
fn endpoint(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
    connect_budget: Duration,
    metrics: &Metrics,
) -> Result<Endpoint, StartError> {
    let upstream = &config.upstream;
    let max_reply_bytes = usize::try_from(config.limits.max_reply_bytes).unwrap_or(usize::MAX);
    let target = match (upstream.transport, &upstream.socket) {
        (Transport::StreamableHttp, _) => {
            let url = upstream.url.as_deref().unwrap_or_default();
            let headers = upstream.resolve_headers(env)?;
            let limit = ReplyLimit::new(
                max_reply_bytes,
                metrics
                    .limits
                    .upstream_replies_refused
                    .with_label_values(&["too_large"]),
            );
            return Ok(Endpoint::Http(
                HttpUpstream::new(url, connect_budget, &headers)?.with_reply_limit(limit),
            ));
        }
        (Transport::Stdio, Some(socket)) => Target::Socket(socket.into()),
        (Transport::Stdio, None) => Target::Command(upstream.command.clone()),
    };
    // One stdio line is one reply: `limits.maxReplyBytes` caps `upstream.maxLineBytes`.
    let max_line_bytes = upstream
        .max_line_bytes
        .map_or(crate::transport::stdio::DEFAULT_MAX_LINE_BYTES, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .min(max_reply_bytes);
    let grace = match env(STDIO_GRACE_ENV) {
        None => crate::transport::stdio::DEFAULT_GRACE,
        Some(text) => berth_crds::DurationString::new(&text)
            .to_duration()
            .map_err(|e| StartError::Env(format!("{STDIO_GRACE_ENV}: {e}")))?,
    };
    Ok(Endpoint::Stdio(Arc::new(StdioEndpoint::new(
        target,
        max_line_bytes,
        grace,
        connect_budget,
        metrics.stdio.clone(),
    ))))
}

fn env_number(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<u32>, StartError> {
    env(var)
        .map(|text| {
            text.trim()
                .parse()
                .map_err(|_| StartError::Env(format!("{var} must be a whole number, got {text:?}")))
        })
        .transpose()
}

fn local_addr(listener: &TcpListener, configured: &str) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        addr: configured.to_owned(),
        source,
    })
}

/// Serves the MCP front and the admin front until `shutdown` ([`connections::serve`]); once
/// both have ended (every in-flight request answered), fires `upstream_stop` for everything
/// behind them.
fn serve_fronts(
    listeners: [Listener; 2],
    metrics: &Metrics,
    shutdown: &CancellationToken,
    upstream_stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let servers = listeners.map(|listener| {
        connections::serve(listener, metrics.connections.clone(), shutdown.clone())
    });
    tokio::spawn(async move {
        for server in servers {
            let _ = server.await;
        }
        upstream_stop.cancel();
    })
}
