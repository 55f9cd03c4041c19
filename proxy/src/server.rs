//! Wiring: the shared [`Proxy`] state, the two listeners, and orderly shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use berth_crds::{ProxyConfig, ProxyConfigError, SessionStrategy, ToolsPolicySpec};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::sessions::Sessions;
use crate::subscriptions::Subscriptions;
use crate::upstream::{HttpUpstream, Upstream, UpstreamError, UpstreamSettings};

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

/// State shared by every handler.
pub struct Proxy {
    /// The shared upstream session.
    pub upstream: Arc<Upstream>,
    /// Downstream sessions.
    pub sessions: Sessions,
    /// Resource subscriptions per client.
    pub subscriptions: Subscriptions,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// `timeouts.call`.
    pub call_budget: Duration,
    /// `timeouts.maxCall`: when set, progress restarts the call budget up to this cap.
    pub max_call: Option<Duration>,
    /// `timeouts.connect`.
    pub connect_budget: Duration,
    /// Fires when the proxy shuts down; long-lived streams end with it.
    pub shutdown: CancellationToken,
    /// `session.strategy`.
    pub strategy: SessionStrategy,
    /// `tools`: which upstream tools clients may see and call.
    pub tools_policy: ToolsPolicySpec,
    /// `session.maxSessions` (`PerClient`).
    pub max_sessions: usize,
    /// The upstream endpoint, for `PerClient` sessions.
    pub http: HttpUpstream,
    /// `downstreamAuth`: the bearer token clients must present; `None` admits every client.
    pub downstream_token: Option<crate::front::BearerToken>,
}

impl Proxy {
    /// Ends downstream session `id` (DELETE, idle expiry, or an unrecoverable upstream), releasing
    /// its resource subscriptions. Returns whether it existed.
    pub fn end_session(&self, id: &str) -> bool {
        let existed = self.sessions.remove(id);
        if existed {
            self.metrics
                .downstream_sessions
                .set(self.sessions.len() as i64);
            for uri in self.subscriptions.remove_session(id) {
                if let Some(upstream) = self.upstream.current() {
                    let message = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": upstream.next_request_id(),
                        "method": "resources/unsubscribe",
                        "params": { "uri": uri },
                    });
                    crate::forward::send_in_background(upstream, message);
                }
            }
        }
        existed
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
    /// The shared state (for tests and embedding).
    pub proxy: Arc<Proxy>,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningProxy {
    /// Stops serving, closes the upstream session, and waits for the servers to end.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// Waits until `shutdown` fires or a server ends.
    pub async fn wait(self) {
        for task in self.tasks {
            let _ = task.await;
        }
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
    let connect_budget = config.timeouts.connect()?;
    let call_budget = config.timeouts.call()?;
    let max_call = config.timeouts.max_call()?;
    let idle_timeout = config.session.idle_timeout()?;
    let (downstream_token, sessions) = downstream_secrets(config, env, idle_timeout)?;
    let url = config.upstream.url.as_deref().unwrap_or_default();
    let headers = config.upstream.resolve_headers(env)?;
    let http = HttpUpstream::new(url, connect_budget, &headers)?;
    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let (server_messages, server_messages_rx) = tokio::sync::mpsc::channel(SERVER_MESSAGE_BUFFER);
    let settings = UpstreamSettings {
        connect_budget,
        probe: config.tools_probe.clone(),
        probe_budget: call_budget,
        policy: config.tools.clone(),
    };
    let upstream = Upstream::spawn(
        http.clone(),
        settings,
        Arc::clone(&metrics),
        server_messages,
        shutdown.clone(),
    );
    let proxy = Arc::new(Proxy {
        upstream,
        sessions,
        subscriptions: Subscriptions::default(),
        metrics,
        call_budget,
        max_call,
        connect_budget,
        shutdown: shutdown.clone(),
        strategy: config.session.strategy,
        tools_policy: config.tools.clone(),
        max_sessions: config.session.max_sessions as usize,
        http,
        downstream_token,
    });
    let mcp_addr = local_addr(&mcp, &config.listen)?;
    let admin_addr = local_addr(&admin, &config.admin_listen)?;
    let tasks = vec![
        serve(
            mcp,
            crate::front::router(Arc::clone(&proxy)),
            shutdown.clone(),
        ),
        serve(
            admin,
            crate::admin::router(Arc::clone(&proxy)),
            shutdown.clone(),
        ),
        tokio::spawn(expire_sessions(
            Arc::clone(&proxy),
            idle_timeout,
            shutdown.clone(),
        )),
        tokio::spawn(crate::fanout::run(
            Arc::clone(&proxy),
            server_messages_rx,
            shutdown.clone(),
        )),
    ];
    tracing::info!(%mcp_addr, %admin_addr, upstream = url, "berth proxy serving");
    Ok(RunningProxy {
        mcp_addr,
        admin_addr,
        proxy,
        shutdown,
        tasks,
    })
}

/// The client bearer token (`downstreamAuth.bearerTokenEnv`) and the session store, signing ids
/// with the key from `sessionKeyEnv` when set. Both variables, when named, must hold a value.
fn downstream_secrets(
    config: &ProxyConfig,
    env: &dyn Fn(&str) -> Option<String>,
    idle_timeout: Duration,
) -> Result<(Option<crate::front::BearerToken>, Sessions), StartError> {
    let token = match &config.downstream_auth {
        None => None,
        Some(auth) => Some(
            env(&auth.bearer_token_env)
                .as_deref()
                .and_then(crate::front::BearerToken::new)
                .ok_or_else(|| StartError::Secret {
                    var: auth.bearer_token_env.clone(),
                    field: "downstreamAuth.bearerTokenEnv",
                    problem: "is unset or empty".to_owned(),
                })?,
        ),
    };
    let mut sessions = Sessions::new(idle_timeout);
    if let Some(var) = &config.session_key_env {
        let secret = |problem: String| StartError::Secret {
            var: var.clone(),
            field: "sessionKeyEnv",
            problem,
        };
        let key = env(var).ok_or_else(|| secret("is unset".to_owned()))?;
        let signer = crate::sessions::signed_id::SessionSigner::new(key.as_bytes())
            .map_err(|short| secret(short.to_string()))?;
        sessions = sessions.with_signer(signer);
    }
    Ok((token, sessions))
}

fn local_addr(listener: &TcpListener, configured: &str) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        addr: configured.to_owned(),
        source,
    })
}

fn serve(
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "server failed");
        }
    })
}

async fn expire_sessions(proxy: Arc<Proxy>, idle_timeout: Duration, shutdown: CancellationToken) {
    let period = (idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let expired = proxy.sessions.expired_ids();
        for id in &expired {
            if proxy.end_session(id) {
                proxy.metrics.downstream_sessions_expired.inc();
            }
        }
        if !expired.is_empty() {
            tracing::info!(expired = expired.len(), "downstream sessions expired");
        }
    }
}
