//! How the operator runs: the [`Settings`] `main` fills from flags and [`crate::controller`]
//! and [`crate::reconcile`] read, with their defaults.
//!
//! Responsible for: the settings' shape and defaults only, below the modules that use them.
//! Not responsible for: parsing flags (`main.rs`) or checking the lease settings
//! ([`crate::controller::run_with_metrics`] does).

use std::net::SocketAddr;
use std::time::Duration;

use crate::DEFAULT_PROXY_IMAGE;
use crate::diagnostics::DiagnosticsKey;

/// Re-reconcile interval of a healthy object even without changes (drift safety net; changes
/// of owned objects trigger reconciles sooner).
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(300);

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
    /// Most reconciles running at once (never two for the same object). Default
    /// [`DEFAULT_CONCURRENCY`].
    pub concurrency: u16,
    /// Re-reconcile interval of a healthy McpUpstream without changes. Default
    /// [`RESYNC_INTERVAL`] (5 min).
    pub resync_interval: Duration,
    /// Only McpUpstreams (and children) in these namespaces, each watched on its own, so the
    /// operator needs rights in these namespaces only (the chart's `watchNamespaces`, issue 40,
    /// item 6). Empty (the default) watches every namespace, which needs cluster-wide rights.
    pub namespaces: Vec<String>,
    /// Run the controller only while holding a Lease; `None` (the default) always runs it.
    pub leader_election: Option<LeaderElection>,
    /// The key each proxy's diagnostics token is derived from (`BERTH_DIAGNOSTICS_KEY`;
    /// issue 39, item 10). Default: random for this process.
    pub diagnostics_key: DiagnosticsKey,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            proxy_image: DEFAULT_PROXY_IMAGE.to_owned(),
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8081))),
            cluster_domain: "cluster.local".to_owned(),
            concurrency: DEFAULT_CONCURRENCY,
            resync_interval: RESYNC_INTERVAL,
            namespaces: Vec::new(),
            leader_election: None,
            diagnostics_key: DiagnosticsKey::default(),
        }
    }
}

/// Which Lease decides the leader, and who this replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    /// Namespace of the Lease (the operator's own, from the downward API in a pod).
    pub namespace: String,
    /// Name of the Lease. Default [`DEFAULT_LEASE_NAME`].
    pub lease_name: String,
    /// This replica's `holderIdentity`, unique among replicas (the pod name in a pod).
    pub identity: String,
    /// How long a lease lasts without renewal: the longest a dead leader blocks takeover.
    /// Default 15; must exceed `renew_grace_seconds`.
    pub lease_duration_seconds: u64,
    /// How long before expiry the holder renews. Default 5; at least 1.
    pub renew_grace_seconds: u64,
}

/// Reconciles running at once unless configured. A reconcile waits on the API server most of
/// its time (a dozen requests), so workers are cheap; 32 applies 1,000 new McpUpstreams in under
/// a minute on two shared cores, where 4 took about four minutes (docs/benchmarks.md).
pub const DEFAULT_CONCURRENCY: u16 = 32;

/// Name of the Lease when none is configured.
pub const DEFAULT_LEASE_NAME: &str = "berth-operator";

impl LeaderElection {
    /// Lease `berth-operator` in `namespace` held as `identity`, 15 s, renewed 5 s before expiry.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: DEFAULT_LEASE_NAME.to_owned(),
            identity: identity.into(),
            lease_duration_seconds: 15,
            renew_grace_seconds: 5,
        }
    }
}
