//! `berth-proxy`: the MCP proxy binary. Parses flags, sets up tracing, runs the library.

use std::path::PathBuf;

use anyhow::Context;
use berth_crds::{ProxyConfig, Transport, UpstreamEndpoint};
use clap::{Parser, Subcommand};

/// Berth MCP proxy: one long-lived upstream session, budgets, per-call outcome metrics.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Proxy config file (YAML, the format the operator renders into the ConfigMap).
    #[arg(long, env = "BERTH_PROXY_CONFIG", conflicts_with = "upstream_url")]
    config: Option<PathBuf>,
    /// Upstream Streamable HTTP endpoint, e.g. http://127.0.0.1:3001/mcp (instead of --config).
    #[arg(long)]
    upstream_url: Option<String>,
    /// Address to serve MCP on; overrides the config file.
    #[arg(long)]
    listen: Option<String>,
    /// Address to serve /metrics, /healthz and /readyz on; overrides the config file.
    #[arg(long)]
    admin_listen: Option<String>,
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

fn config_from(args: &Args) -> anyhow::Result<ProxyConfig> {
    let mut config = match (&args.config, &args.upstream_url) {
        (Some(path), _) => read_config(path)?,
        (None, Some(url)) => ProxyConfig {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9090".into(),
            upstream: UpstreamEndpoint {
                command: Vec::new(),
                socket: None,
                max_line_bytes: None,
                transport: Transport::StreamableHttp,
                url: Some(url.clone()),
                headers: Vec::new(),
            },
            session: Default::default(),
            tools_probe: Default::default(),
            timeouts: Default::default(),
            tools: Default::default(),
            downstream_auth: None,
            session_key_env: None,
        },
        (None, None) => anyhow::bail!("one of --config or --upstream-url is required"),
    };
    if let Some(listen) = &args.listen {
        config.listen.clone_from(listen);
    }
    if let Some(admin) = &args.admin_listen {
        config.admin_listen.clone_from(admin);
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    berth_proxy::install_crypto_provider();
    let args = Args::parse();
    if let Some(Command::Lint {
        config,
        upstream_url,
    }) = &args.command
    {
        return lint(config, upstream_url.as_deref()).await;
    }
    let config = config_from(&args)?;
    let running = berth_proxy::start(&config).await?;
    let shutdown = running.shutdown_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        shutdown.cancel();
    });
    running.wait().await;
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
