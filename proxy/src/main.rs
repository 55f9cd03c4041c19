//! `berth-proxy`: the MCP proxy binary. Parses flags, sets up tracing, runs the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use berth_crds::proxy_config::audit::AuditLog;
use berth_crds::{ProxyConfig, SessionStrategy, Transport, UpstreamEndpoint};
use clap::{Parser, Subcommand};

/// mimalloc instead of the C library's allocator: 10–25% less CPU per call (issue 14,
/// docs/benchmarks.md). The image sets `MIMALLOC_ARENA_EAGER_COMMIT=0` and
/// `MIMALLOC_PURGE_DELAY=0` (images/proxy.Dockerfile), so memory is committed as it is used and
/// freed pages go back at once: idle RSS stays near the C allocator's. After a load it keeps a
/// high-water mark of freed memory, less than the C allocator's (docs/benchmarks.md, sixth
/// run).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Berth MCP proxy: one long-lived upstream session, budgets, per-call outcome metrics.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Proxy config file (YAML, the format the operator renders into the ConfigMap).
    #[arg(long, env = "BERTH_PROXY_CONFIG", conflicts_with_all = ["upstream_url", "upstream_command"])]
    config: Option<PathBuf>,
    /// Upstream Streamable HTTP endpoint, e.g. http://127.0.0.1:3001/mcp (instead of --config).
    #[arg(long, conflicts_with = "upstream_command")]
    upstream_url: Option<String>,
    /// Stdio upstream: the server's command line, split like a shell does (quotes respected),
    /// e.g. "npx -y @modelcontextprotocol/server-everything stdio". The proxy spawns one child
    /// per client session (instead of --config).
    #[arg(long)]
    upstream_command: Option<String>,
    /// Session strategy with --upstream-url / --upstream-command: Shared or PerClient.
    /// Default: Shared for HTTP, PerClient for stdio.
    #[arg(long, value_parser = parse_strategy)]
    strategy: Option<SessionStrategy>,
    /// Most client sessions (for stdio: children) at once with PerClient. Default 16.
    #[arg(long)]
    max_sessions: Option<u32>,
    /// Address to serve MCP on; overrides the config file.
    #[arg(long)]
    listen: Option<String>,
    /// Address to serve /metrics, /healthz and /readyz on; overrides the config file.
    #[arg(long)]
    admin_listen: Option<String>,
    /// Where audit events go: Stdout (one JSON line per `tools/call` on standard output) or
    /// Off; overrides the config file's `audit`. Default: Stdout.
    #[arg(long, value_parser = parse_audit_log)]
    audit_log: Option<AuditLog>,
    /// Threads that run the proxy (tokio workers). 1 runs everything on one thread, with no
    /// wake-ups across threads; more spread calls over cores. Default: the CPUs this process
    /// may use (its CPU affinity and cgroup quota).
    #[arg(long, env = "BERTH_PROXY_WORKER_THREADS", global = true)]
    worker_threads: Option<std::num::NonZeroUsize>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the tool policy (`tools`) of a proxy config offline and, with --upstream-url,
    /// against the tools that upstream offers. Exits 1 on any finding, 2 when the upstream
    /// cannot be listed.
    Lint {
        /// Proxy config file to check.
        #[arg(long)]
        config: PathBuf,
        /// Upstream to check the policy against, e.g. http://127.0.0.1:3001/mcp.
        #[arg(long)]
        upstream_url: Option<String>,
    },
    /// Run in a stdio pod's upstream sidecar: one child per connection on a Unix socket, at
    /// most --max-children, stopped with close-stdin, SIGTERM, SIGKILL and always reaped.
    StdioHost {
        /// Unix socket to listen on: `@name` for an abstract socket (what the operator uses,
        /// e.g. @berth-stdio-host), else a path.
        #[arg(long)]
        socket: PathBuf,
        /// Serve only connections whose peer runs as this user id (the proxy's); others are
        /// closed unanswered and counted. Default: any peer.
        #[arg(long)]
        allow_uid: Option<u32>,
        /// Most children alive at once; further connections are refused with a reason.
        #[arg(long)]
        max_children: usize,
        /// Wait after closing a child's stdin before SIGTERM, and after SIGTERM before SIGKILL.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        grace: Duration,
        /// The server's command and arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Copy this executable to DEST with mode 0755 (for an init container without `cp`).
    CopySelf {
        /// Destination path.
        dest: PathBuf,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    berth_crds::DurationString::new(text)
        .to_duration()
        .map_err(|e| e.to_string())
}

fn parse_strategy(text: &str) -> Result<SessionStrategy, String> {
    match text {
        "Shared" => Ok(SessionStrategy::Shared),
        "PerClient" => Ok(SessionStrategy::PerClient),
        _ => Err(format!("expected Shared or PerClient, got {text:?}")),
    }
}

fn parse_audit_log(text: &str) -> Result<AuditLog, String> {
    match text {
        "Stdout" => Ok(AuditLog::Stdout),
        "Off" => Ok(AuditLog::Off),
        _ => Err(format!("expected Stdout or Off, got {text:?}")),
    }
}

fn read_config(path: &std::path::Path) -> anyhow::Result<ProxyConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    ProxyConfig::from_yaml(&text).with_context(|| format!("in {}", path.display()))
}

async fn lint(path: &std::path::Path, upstream_url: Option<&str>) -> anyhow::Result<()> {
    // Parsed without the config's own checks, so every policy finding is listed, not the first.
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    let config: ProxyConfig =
        serde_yaml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    match berth_proxy::lint::lint(&config, upstream_url).await {
        Ok(findings) if findings.is_empty() => {
            println!("ok: no findings");
            Ok(())
        }
        Ok(findings) => {
            for finding in &findings {
                println!("finding: {finding}");
            }
            std::process::exit(1);
        }
        Err(error) => {
            eprintln!("error: {:#}", anyhow::Error::new(error));
            std::process::exit(2);
        }
    }
}

fn standalone_upstream(args: &Args) -> anyhow::Result<Option<UpstreamEndpoint>> {
    let mut upstream = UpstreamEndpoint {
        command: Vec::new(),
        socket: None,
        max_line_bytes: None,
        transport: Transport::StreamableHttp,
        url: None,
        headers: Vec::new(),
    };
    match (&args.upstream_url, &args.upstream_command) {
        (Some(url), _) => upstream.url = Some(url.clone()),
        (None, Some(command)) => {
            upstream.transport = Transport::Stdio;
            upstream.command = shell_words::split(command)
                .with_context(|| format!("invalid --upstream-command {command:?}"))?;
            if upstream.command.first().is_none_or(|p| p.trim().is_empty()) {
                anyhow::bail!("--upstream-command must name a program, got {command:?}");
            }
        }
        (None, None) => return Ok(None),
    }
    Ok(Some(upstream))
}

fn config_from(args: &Args) -> anyhow::Result<ProxyConfig> {
    let mut config = match (&args.config, standalone_upstream(args)?) {
        (Some(path), _) => read_config(path)?,
        (None, Some(upstream)) => ProxyConfig {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9090".into(),
            session: berth_crds::SessionSpec {
                strategy: args.strategy.unwrap_or(match upstream.transport {
                    Transport::Stdio => SessionStrategy::PerClient,
                    Transport::StreamableHttp => SessionStrategy::Shared,
                }),
                max_sessions: args.max_sessions.unwrap_or(16),
                ..Default::default()
            },
            upstream,
            tools_probe: Default::default(),
            timeouts: Default::default(),
            tools: Default::default(),
            downstream_auth: None,
            session_key_env: None,
            request_origin: Default::default(),
            audit: Default::default(),
            limits: Default::default(),
            diagnostics_token_sha256: None,
        },
        (None, None) => {
            anyhow::bail!("one of --config, --upstream-url or --upstream-command is required")
        }
    };
    if let Some(listen) = &args.listen {
        config.listen.clone_from(listen);
    }
    if let Some(admin) = &args.admin_listen {
        config.admin_listen.clone_from(admin);
    }
    if let Some(audit) = args.audit_log {
        config.audit = audit;
    }
    Ok(config)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Before the OTLP exporter's HTTP client is built.
    berth_proxy::install_crypto_provider();
    let settings = berth_proxy::observe::telemetry::Settings::from_env()?;
    let telemetry = berth_proxy::observe::telemetry::init(&settings)?;
    let threads = args
        .worker_threads
        .map(std::num::NonZeroUsize::get)
        .or_else(|| std::thread::available_parallelism().ok().map(Into::into))
        .unwrap_or(1);
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let result = runtime.block_on(run(args));
    // Queued spans are exported after the runtime stops (the exporter's client is blocking).
    drop(runtime);
    telemetry.shutdown();
    result
}

async fn run(args: Args) -> anyhow::Result<()> {
    match &args.command {
        Some(Command::Lint {
            config,
            upstream_url,
        }) => return lint(config, upstream_url.as_deref()).await,
        Some(Command::StdioHost {
            socket,
            allow_uid,
            max_children,
            grace,
            command,
        }) => {
            let settings = berth_proxy::transport::stdio::host::HostSettings {
                socket: socket.clone(),
                allowed_uid: *allow_uid,
                max_children: *max_children,
                grace: *grace,
                command: command.clone(),
            };
            let host = berth_proxy::transport::stdio::host::Host::bind(settings)?;
            let shutdown = tokio_util::sync::CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                stop.cancel();
            });
            host.run(shutdown).await;
            return Ok(());
        }
        Some(Command::CopySelf { dest }) => {
            return berth_proxy::transport::stdio::copy_self(dest)
                .with_context(|| format!("failed to copy this executable to {}", dest.display()));
        }
        None => {}
    }
    let config = config_from(&args)?;
    let running = berth_proxy::start(&config).await?;
    let engine = std::sync::Arc::clone(&running.engine);
    let stopped = running.shutdown_token();
    // SIGTERM drains (not ready, still serving for timeouts.drain) and then shuts down; a
    // proxy that stops on its own (a crash-looping stdio upstream) shuts down at once.
    tokio::select! {
        () = shutdown_signal() => running.drain().await,
        () = stopped.cancelled() => running.wait().await,
    }
    if engine.upstream.gave_up() {
        // The stdio server crash-loops: exit non-zero so the pod shows it (field case BR-34).
        anyhow::bail!("the stdio upstream failed too often in a row; see the log for its stderr");
    }
    Ok(())
}

/// SIGINT or SIGTERM (what the kubelet sends on pod deletion).
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
