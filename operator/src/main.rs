//! `berth-operator`: the operator binary. Parses flags, sets up tracing, calls the library.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// Berth operator: runs McpUpstreams as berth proxy + digest-pinned upstream sidecar pods.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the McpUpstream CustomResourceDefinition as YAML.
    Crd,
    /// Run the operator against the cluster of the current kubeconfig or service account.
    Run {
        /// Address to serve /metrics and /healthz on.
        #[arg(long, env = "BERTH_METRICS_LISTEN", default_value = "127.0.0.1:8081")]
        metrics_listen: SocketAddr,
        /// Image of the berth proxy container.
        #[arg(long, env = "BERTH_PROXY_IMAGE", default_value = berth_operator::DEFAULT_PROXY_IMAGE)]
        proxy_image: String,
        /// DNS domain of the cluster, used in status.endpoint.
        #[arg(long, env = "BERTH_CLUSTER_DOMAIN", default_value = "cluster.local")]
        cluster_domain: String,
        /// Most reconciles running at once.
        #[arg(long, default_value_t = berth_operator::controller::DEFAULT_CONCURRENCY)]
        concurrency: u16,
        /// Seconds between re-reconciles of an unchanged McpUpstream (drift safety net).
        #[arg(long, default_value_t = berth_operator::reconcile::RESYNC_INTERVAL.as_secs())]
        resync_seconds: u64,
        /// Only watch McpUpstreams in these namespaces, comma-separated or repeated (default:
        /// all namespaces); the operator then needs rights in these namespaces only.
        #[arg(
            long = "watch-namespaces",
            alias = "namespace",
            env = "BERTH_WATCH_NAMESPACES",
            value_delimiter = ','
        )]
        namespaces: Vec<String>,
        /// Run the controller only while holding a coordination.k8s.io/v1 Lease; exit non-zero
        /// when it is lost.
        #[arg(long, env = "BERTH_LEADER_ELECT")]
        leader_elect: bool,
        /// Namespace of the Lease (in a pod: the pod's namespace via the downward API).
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        lease_namespace: String,
        /// Name of the Lease.
        #[arg(long, default_value = berth_operator::controller::DEFAULT_LEASE_NAME)]
        lease_name: String,
        /// This replica's lease identity (in a pod: the pod name via the downward API; default
        /// the host name).
        #[arg(long, env = "POD_NAME")]
        lease_identity: Option<String>,
        /// Seconds a lease lasts without renewal.
        #[arg(long, default_value_t = 15)]
        lease_duration_seconds: u64,
        /// Seconds before expiry the holder renews the lease.
        #[arg(long, default_value_t = 5)]
        lease_renew_grace_seconds: u64,
        /// The key the proxies' diagnostics tokens are derived from (any text; the chart fills
        /// it from a Secret). Unset: random per process, so every proxy's ConfigMap changes
        /// when the operator restarts.
        #[arg(long, env = "BERTH_DIAGNOSTICS_KEY", hide_env_values = true)]
        diagnostics_key: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Command::Crd => {
            print!(
                "{}",
                berth_crds::crd_yaml().context("failed to render the CRD")?
            );
            Ok(())
        }
        Command::Run {
            metrics_listen,
            proxy_image,
            cluster_domain,
            concurrency,
            resync_seconds,
            namespaces,
            leader_elect,
            lease_namespace,
            lease_name,
            lease_identity,
            lease_duration_seconds,
            lease_renew_grace_seconds,
            diagnostics_key,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info".into()),
                )
                .with_writer(std::io::stderr)
                .init();
            let client = kube::Client::try_default()
                .await
                .context("failed to build a Kubernetes client")?;
            let settings = berth_operator::Settings {
                proxy_image,
                metrics_listen: Some(metrics_listen),
                cluster_domain,
                concurrency,
                resync_interval: std::time::Duration::from_secs(resync_seconds.max(1)),
                // An empty variable or a trailing comma names no namespace.
                namespaces: namespaces.into_iter().filter(|n| !n.is_empty()).collect(),
                leader_election: leader_elect.then(|| berth_operator::LeaderElection {
                    namespace: lease_namespace,
                    lease_name,
                    identity: lease_identity.unwrap_or_else(host_name),
                    lease_duration_seconds,
                    renew_grace_seconds: lease_renew_grace_seconds,
                }),
                diagnostics_key: match diagnostics_key.as_deref() {
                    Some(text) if !text.is_empty() => {
                        berth_operator::diagnostics::DiagnosticsKey::from_text(text)
                    }
                    _ => {
                        tracing::warn!(
                            "BERTH_DIAGNOSTICS_KEY is not set: proxies' diagnostics tokens change when the operator restarts"
                        );
                        berth_operator::diagnostics::DiagnosticsKey::default()
                    }
                },
            };
            berth_operator::run(client, settings, shutdown_signal())
                .await
                .context("operator failed")
        }
    }
}

/// The host name (a pod's name in Kubernetes), or `berth-operator-<pid>` when unknown.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| format!("berth-operator-{}", std::process::id()))
}

/// Completes on SIGINT or SIGTERM (the kubelet stops pods with SIGTERM).
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutdown requested");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespaces(args: &[&str]) -> Vec<String> {
        let parsed = Args::try_parse_from(args).expect("arguments parse");
        match parsed.command {
            Command::Run { namespaces, .. } => namespaces,
            Command::Crd => panic!("not run"),
        }
    }

    #[test]
    fn watch_namespaces_flag_as_the_chart_renders_it_lists_each_namespace() {
        assert_eq!(
            namespaces(&["berth-operator", "run", "--watch-namespaces=team-a,team-b"]),
            ["team-a", "team-b"]
        );
        assert_eq!(
            namespaces(&["berth-operator", "run", "--namespace", "team-a"]),
            ["team-a"],
            "the older single-namespace flag still works"
        );
        assert!(
            namespaces(&["berth-operator", "run"]).is_empty(),
            "all namespaces"
        );
    }
}
