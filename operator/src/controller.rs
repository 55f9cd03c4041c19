//! The long-running operator: watches McpUpstreams and the objects they own, runs
//! [`reconcile`] for each change, and serves the admin endpoints.
//!
//! With [`Settings::leader_election`] only the holder of a `coordination.k8s.io/v1` Lease runs
//! the controller (`kube-lease-manager`); a replica that loses the lease stops reconciling and
//! [`run`] returns [`RunError::LostLease`], so the process exits and the pod restarts.
//!
//! Not responsible for: what a reconcile does ([`crate::reconcile`]) or installing the CRD.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use berth_crds::McpUpstream;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

// Defined below this module and `reconcile` (issue 17); still reachable under their old paths.
pub use crate::settings::{DEFAULT_CONCURRENCY, DEFAULT_LEASE_NAME, LeaderElection, Settings};

use crate::metrics::Metrics;
use crate::reconcile::{Context, error_policy, reconcile};
use crate::{admin, labels};

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
    /// The HTTP client for the proxies' admin endpoints could not be built.
    #[error("failed to build the http client for proxy reports")]
    HttpClient(#[source] reqwest::Error),
    /// The admin server stopped with an error.
    #[error("admin server failed")]
    ServeAdmin(#[source] std::io::Error),
    /// The leader-election settings are unusable (the grace must be shorter than the duration).
    #[error(
        "lease duration {duration}s must exceed the renew grace {grace}s, which must be at least 1s"
    )]
    InvalidLease {
        /// [`LeaderElection::lease_duration_seconds`].
        duration: u64,
        /// [`LeaderElection::renew_grace_seconds`].
        grace: u64,
    },
    /// The Lease could not be read or created.
    #[error("failed to set up lease {namespace}/{name}")]
    SetUpLease {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// The lease manager's error.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// Another replica took the lease (or it could not be renewed): this one stopped
    /// reconciling and must exit.
    #[error("lost lease {namespace}/{name}")]
    LostLease {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
    },
}

impl RunError {
    /// Bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RegisterMetrics(_) => "register_metrics",
            Self::BindAdmin { .. } => "bind_admin",
            Self::ServeAdmin(_) => "serve_admin",
            Self::HttpClient(_) => "http_client",
            Self::InvalidLease { .. } => "invalid_lease",
            Self::SetUpLease { .. } => "set_up_lease",
            Self::LostLease { .. } => "lost_lease",
        }
    }
}

/// Runs the operator until `shutdown` completes: reconciles every McpUpstream in the cluster
/// (or in [`Settings::namespaces`]) and re-reconciles when one of its Deployments, Services or
/// ConfigMaps changes or disappears. Same as [`run_with_metrics`] with fresh metrics.
///
/// # Errors
/// See [`run_with_metrics`].
///
/// # Cancellation
/// See [`run_with_metrics`].
pub async fn run(
    client: Client,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new().map_err(RunError::RegisterMetrics)?);
    run_with_metrics(client, settings, metrics, shutdown).await
}

/// [`run`], recording into `metrics` (which the caller can read, e.g. in tests).
///
/// The admin server runs from the start. With [`Settings::leader_election`] the controller
/// starts only once this replica holds the Lease; on `shutdown` the Lease is released.
///
/// On `shutdown` no new reconcile starts, running ones finish, and the admin server stops.
///
/// # Errors
/// [`RunError`] when metrics cannot be registered, the admin address cannot be bound or the
/// Lease cannot be set up (before anything is watched), when the admin server fails, or
/// [`RunError::LostLease`] after this replica lost the Lease and stopped reconciling.
///
/// # Cancellation
/// Dropping the future stops the controller abruptly; prefer completing `shutdown`.
pub async fn run_with_metrics(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
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

    let outcome = match settings.leader_election.clone() {
        None => run_controller(client, settings, metrics, stop.clone()).await,
        Some(election) => run_as_leader(client, settings, metrics, &election, &stop).await,
    };
    stop.cancel();
    let served = match admin {
        Some(handle) => handle.await.unwrap_or_else(|err| {
            warn!(error = %err, "admin server task failed");
            Ok(())
        }),
        None => Ok(()),
    };
    outcome.and(served)
}

/// Waits for the Lease, runs the controller while holding it, and releases it on `stop`.
async fn run_as_leader(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    election: &LeaderElection,
    stop: &CancellationToken,
) -> Result<(), RunError> {
    let (duration, grace) = (
        election.lease_duration_seconds,
        election.renew_grace_seconds,
    );
    if grace == 0 || grace >= duration {
        return Err(RunError::InvalidLease { duration, grace });
    }
    let lost_lease = || RunError::LostLease {
        namespace: election.namespace.clone(),
        name: election.lease_name.clone(),
    };
    let manager = tokio::select! {
        () = stop.cancelled() => return Ok(()),
        built = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &election.lease_name)
            .with_namespace(&election.namespace)
            .with_identity(&election.identity)
            .with_duration(duration)
            .with_grace(grace)
            .build() => built.map_err(|source| RunError::SetUpLease {
                namespace: election.namespace.clone(),
                name: election.lease_name.clone(),
                source,
            })?,
    };
    let (mut leading, lease_task) = manager.watch().await;
    info!(lease = %election.lease_name, identity = %election.identity, "waiting for the lease");
    let acquired = tokio::select! {
        () = stop.cancelled() => Ok(false),
        // An error: the lease manager stopped (it logged why) before this replica led.
        result = leading.wait_for(|leader| *leader) => {
            result.map(|_| true).map_err(|_| lost_lease())
        }
    };
    let (mut outcome, acquired) = match acquired {
        Ok(acquired) => (Ok(()), acquired),
        Err(err) => (Err(err), false),
    };
    if acquired {
        info!(identity = %election.identity, "acquired the lease");
        // Stops the controller when the lease is lost (or its manager gave up) or on `stop`.
        let controller_stop = stop.child_token();
        let watch_stop = controller_stop.clone();
        let mut watch = leading.clone();
        let lost = tokio::spawn(async move {
            let lost = tokio::select! {
                () = watch_stop.cancelled() => false,
                _ = watch.wait_for(|leader| !*leader) => true,
            };
            watch_stop.cancel();
            lost
        });
        let ran = run_controller(client, settings, metrics.clone(), controller_stop.clone()).await;
        controller_stop.cancel();
        if lost.await.unwrap_or(true) {
            warn!(identity = %election.identity, "lost the lease, stopping");
            outcome = Err(lost_lease());
        } else if let Err(err) = ran {
            outcome = Err(err);
        }
    }
    metrics.leader.set(0);
    // Dropping every receiver makes the lease manager release the lease and finish.
    drop(leading);
    let release = Duration::from_secs(duration);
    match tokio::time::timeout(release, lease_task).await {
        Ok(Ok(Ok(_))) => debug!("lease released"),
        Ok(Ok(Err(err))) => warn!(error = %err, "failed to release the lease"),
        Ok(Err(err)) => warn!(error = %err, "lease task failed"),
        Err(_) => warn!("lease not released in time"),
    }
    outcome
}

/// How often `berth_operator_mcpupstreams` is recounted from the controller's cache.
pub const CONDITION_GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the controller until `stop` is cancelled: one controller per namespace of
/// [`Settings::namespaces`] (each with its own watches, so no cluster-wide list is made), or one
/// over all namespaces when it is empty. They share one [`Context`].
async fn run_controller(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let concurrency = settings.concurrency;
    let scopes: Vec<Option<String>> = if settings.namespaces.is_empty() {
        vec![None]
    } else {
        settings.namespaces.iter().cloned().map(Some).collect()
    };
    let context = Arc::new(
        Context::new(client.clone(), settings, metrics.clone()).map_err(RunError::HttpClient)?,
    );
    info!(
        concurrency,
        namespaces = %scopes.iter().map(|s| s.as_deref().unwrap_or("*")).collect::<Vec<_>>().join(","),
        "starting controller"
    );
    metrics.leader.set(1);
    let controllers: Vec<_> = scopes
        .iter()
        .map(|scope| controller_in(&client, scope.as_deref()))
        .collect();
    let stores = controllers.iter().map(Controller::store).collect();
    let gauge = tokio::spawn(count_conditions(stores, metrics.clone(), stop.clone()));
    futures::future::join_all(controllers.into_iter().map(|controller| {
        controller
            .with_config(controller::Config::default().concurrency(concurrency))
            .graceful_shutdown_on(stop.clone().cancelled_owned())
            .run(reconcile, error_policy, context.clone())
            .for_each(|result| async move { log_result(result) })
    }))
    .await;
    stop.cancel();
    let _ = gauge.await;
    metrics.leader.set(0);
    info!("controller stopped");
    Ok(())
}

/// A controller of the McpUpstreams in `namespace` (all namespaces for `None`) that also
/// watches their children there.
fn controller_in(client: &Client, namespace: Option<&str>) -> Controller<McpUpstream> {
    // Children are watched through the label every one of them carries, so the operator does not
    // cache every ConfigMap in the cluster.
    let owned = watcher::Config::default().labels(&labels::managed_selector());
    Controller::new(
        scoped::<McpUpstream>(client, namespace),
        watcher::Config::default(),
    )
    .owns(scoped::<Deployment>(client, namespace), owned.clone())
    .owns(scoped::<Service>(client, namespace), owned.clone())
    .owns(scoped::<ConfigMap>(client, namespace), owned.clone())
    .owns(scoped::<NetworkPolicy>(client, namespace), owned.clone())
    .owns(scoped::<PodDisruptionBudget>(client, namespace), owned)
}

/// Recounts `berth_operator_mcpupstreams` from `stores` (one per watched namespace, or one
/// for all) every [`CONDITION_GAUGE_INTERVAL`] until `stop`.
async fn count_conditions(
    stores: Vec<Store<McpUpstream>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(CONDITION_GAUGE_INTERVAL);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let upstreams: Vec<_> = stores.iter().flat_map(Store::state).collect();
        metrics.count_conditions(upstreams.iter().map(AsRef::as_ref));
    }
}

/// An API for `K` in `namespace`, or in all namespaces.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
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
