//! The long-running operator: watches McpUpstreams and the objects they own, runs
//! [`reconcile`] for each change, and serves the admin endpoints.
//!
//! Not responsible for: what a reconcile does ([`crate::reconcile`]), installing the CRD, or
//! leader election.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use berth_crds::McpUpstream;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::reconcile::{Context, error_policy, reconcile};
use crate::{DEFAULT_PROXY_IMAGE, admin, labels};

/// How the operator runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Image of the berth proxy container in every pod. Default [`DEFAULT_PROXY_IMAGE`].
    pub proxy_image: String,
    /// Where to serve `/metrics` and `/healthz`; `None` serves nothing (tests).
    /// Default `127.0.0.1:8081`.
    pub metrics_listen: Option<SocketAddr>,
    /// DNS domain of the cluster, used in `status.endpoint`. Default `cluster.local`.
    pub cluster_domain: String,
    /// Most reconciles running at once (never two for the same object). Default 4.
    pub concurrency: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            proxy_image: DEFAULT_PROXY_IMAGE.to_owned(),
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8081))),
            cluster_domain: "cluster.local".to_owned(),
            concurrency: 4,
        }
    }
}

/// The operator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics registry refused a metric.
    #[error("failed to register metrics")]
    RegisterMetrics(#[source] prometheus::Error),
    /// The admin listener could not be bound.
    #[error("failed to bind admin listener on {addr}")]
    BindAdmin {
        /// The configured address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The admin server stopped with an error.
    #[error("admin server failed")]
    ServeAdmin(#[source] std::io::Error),
}

impl RunError {
    /// Bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RegisterMetrics(_) => "register_metrics",
            Self::BindAdmin { .. } => "bind_admin",
            Self::ServeAdmin(_) => "serve_admin",
        }
    }
}

/// Runs the operator until `shutdown` completes: reconciles every McpUpstream in the cluster
/// and re-reconciles when one of its Deployments, Services or ConfigMaps changes or disappears.
///
/// On `shutdown` no new reconcile starts, running ones finish, and the admin server stops.
///
/// # Errors
/// [`RunError`] when metrics cannot be registered or the admin address cannot be bound (before
/// anything is watched), or when the admin server fails.
///
/// # Cancellation
/// Dropping the future stops the controller abruptly; prefer completing `shutdown`.
pub async fn run(
    client: Client,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new().map_err(RunError::RegisterMetrics)?);
    let stop = CancellationToken::new();
    let admin = match settings.metrics_listen {
        Some(addr) => Some(serve_admin(addr, metrics.clone(), stop.clone()).await?),
        None => None,
    };
    let trigger = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });

    let concurrency = settings.concurrency;
    let context = Arc::new(Context::new(client.clone(), settings, metrics));
    // Children are watched through the label every one of them carries, so the operator does not
    // cache every ConfigMap in the cluster.
    let owned = watcher::Config::default().labels(&labels::managed_selector());
    info!(concurrency, "starting controller");
    Controller::new(
        Api::<McpUpstream>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Deployment>::all(client.clone()), owned.clone())
    .owns(Api::<Service>::all(client.clone()), owned.clone())
    .owns(Api::<ConfigMap>::all(client), owned)
    .with_config(controller::Config::default().concurrency(concurrency))
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(reconcile, error_policy, context)
    .for_each(|result| async move { log_result(result) })
    .await;
    info!("controller stopped");
    stop.cancel();
    match admin {
        Some(handle) => handle.await.unwrap_or_else(|err| {
            warn!(error = %err, "admin server task failed");
            Ok(())
        }),
        None => Ok(()),
    }
}

type AdminHandle = tokio::task::JoinHandle<Result<(), RunError>>;

/// Binds `addr` and serves the admin routes until `stop` is cancelled.
async fn serve_admin(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Result<AdminHandle, RunError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::BindAdmin { addr, source })?;
    let addr = listener.local_addr().unwrap_or(addr);
    info!(%addr, "serving /metrics and /healthz");
    Ok(tokio::spawn(async move {
        axum::serve(listener, admin::router(metrics))
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .map_err(RunError::ServeAdmin)
    }))
}

type ControllerResult = Result<
    (
        kube::runtime::reflector::ObjectRef<McpUpstream>,
        kube::runtime::controller::Action,
    ),
    controller::Error<crate::reconcile::Error, watcher::Error>,
>;

/// Logs what the controller stream reports. Reconcile failures are already logged by
/// [`error_policy`], so they are debug here.
fn log_result(result: ControllerResult) {
    match result {
        Ok((object, _)) => debug!(object = %object, "reconcile finished"),
        Err(controller::Error::ReconcilerFailed(err, object)) => {
            debug!(object = %object, kind = err.kind(), "reconcile failed");
        }
        Err(controller::Error::ObjectNotFound(object)) => {
            debug!(object = %object, "object gone before reconcile");
        }
        Err(err) => warn!(error = %err, "controller error"),
    }
}
