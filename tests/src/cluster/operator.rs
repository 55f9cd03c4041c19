//! Operators of a test's own, and playing the kubelet.
//!
//! [`Operator`] runs `berth_operator::run_with_metrics` on a thread with its own runtime (so it
//! outlives nothing but itself), scoped by its [`Settings`], with its [`Metrics`] readable by the
//! test, stoppable gracefully or abruptly; [`operator_bin`] finds the real binary for tests that
//! run it as a process. [`play_kubelet`] writes a Pod's status the way a
//! kubelet would, since the local control plane runs none.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_operator::Settings;
use berth_operator::metrics::Metrics;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Client, Config, ResourceExt};
use tokio::sync::oneshot;

use super::TestNamespace;
use crate::wait_for;

/// One operator on a thread with its own runtime, stoppable gracefully or abruptly.
pub struct Operator {
    /// The operator's metrics, as its `/metrics` would serve them.
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    crash: Option<oneshot::Sender<()>>,
    finished: std::sync::mpsc::Receiver<Result<(), String>>,
}

impl Operator {
    /// Starts the operator with `settings` against `KUBECONFIG`.
    pub fn start(name: &str, settings: Settings) -> Self {
        Self::start_with(name, settings, None)
    }

    /// Starts the operator with `settings` against `config` (`None`: `KUBECONFIG`).
    ///
    /// # Panics
    /// When the thread or its runtime cannot start.
    pub fn start_with(name: &str, settings: Settings, config: Option<Config>) -> Self {
        let metrics = Arc::new(Metrics::new().expect("metrics register"));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (crash_tx, crash_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let thread_metrics = metrics.clone();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("operator runtime");
                let result = runtime.block_on(async move {
                    let config = match config {
                        Some(config) => config,
                        None => Config::infer().await.map_err(|err| err.to_string())?,
                    };
                    let client = Client::try_from(config).map_err(|err| err.to_string())?;
                    // A dropped sender is no request to stop.
                    let shutdown = async move {
                        if stop_rx.await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    };
                    let run = berth_operator::run_with_metrics(
                        client,
                        settings,
                        thread_metrics,
                        shutdown,
                    );
                    tokio::select! {
                        result = run => result.map_err(|err| format!("{} ({})", err, err.kind())),
                        Ok(()) = crash_rx => Err("crashed".to_owned()),
                    }
                });
                // Dropping the runtime here kills every task, as a crash would.
                drop(runtime);
                let _ = done_tx.send(result);
            })
            .expect("operator thread");
        Self {
            metrics,
            stop: Some(stop_tx),
            crash: Some(crash_tx),
            finished: done_rx,
        }
    }

    /// Completes the operator's shutdown future and returns what `run` returned.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wait(Duration::from_secs(60)).await
    }

    /// Kills the operator without any cleanup (a Lease it holds is not released).
    pub async fn crash(mut self) {
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
        let _ = self.wait(Duration::from_secs(60)).await;
    }

    /// Waits (without stopping it) until the operator returns on its own.
    pub async fn wait_with_deadline(self, deadline: Duration) -> Result<(), String> {
        let finished = self.finished;
        let _keep_running = (self.stop, self.crash);
        tokio::task::spawn_blocking(move || {
            finished
                .recv_timeout(deadline)
                .unwrap_or_else(|err| Err(format!("operator still running: {err}")))
        })
        .await
        .expect("wait task")
    }

    async fn wait(self, deadline: Duration) -> Result<(), String> {
        let finished = self.finished;
        tokio::task::spawn_blocking(move || {
            finished
                .recv_timeout(deadline)
                .unwrap_or_else(|err| Err(format!("operator did not stop: {err}")))
        })
        .await
        .expect("wait task")
    }

    /// Reconcile durations observed so far that exceeded `bound`, read from the
    /// `berth_operator_reconcile_duration_seconds` histogram as `/metrics` renders it: the
    /// count minus the largest bucket whose boundary is at most `bound`.
    pub fn reconciles_slower_than(&self, bound: Duration) -> u64 {
        let text = self.metrics.render();
        let value = |line: &str| {
            line.rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
        };
        let mut total = 0.0;
        let mut within = 0.0_f64;
        for line in text.lines() {
            if line.starts_with("berth_operator_reconcile_duration_seconds_count") {
                total = value(line).unwrap_or(0.0);
            } else if let Some(rest) =
                line.strip_prefix("berth_operator_reconcile_duration_seconds_bucket{le=\"")
            {
                let le = rest.split('"').next().and_then(|le| le.parse::<f64>().ok());
                if le.is_some_and(|le| le <= bound.as_secs_f64()) {
                    within = within.max(value(line).unwrap_or(0.0));
                }
            }
        }
        // Counts are integers well below 2^53.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let slower = (total - within) as u64;
        slower
    }
}

/// The `berth-operator` binary of this workspace: `$BERTH_OPERATOR_BIN`, else the one cargo
/// builds beside the calling test or program (`target/<profile>/berth-operator`), built with
/// cargo in the same profile when missing.
///
/// # Panics
/// When it cannot be found or built.
pub fn operator_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("BERTH_OPERATOR_BIN") {
        return PathBuf::from(bin);
    }
    let me = std::env::current_exe().expect("current exe");
    let mut dir = me.parent().expect("exe has a directory");
    // Test binaries live in target/<profile>/deps, programs in target/<profile>.
    if dir.ends_with("deps") {
        dir = dir.parent().expect("deps has a parent");
    }
    let bin = dir.join("berth-operator");
    // `make test` builds it before the tests (tests/run.sh), so it is current there.
    if bin.exists() {
        return bin;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "-p", "berth-operator", "--bin", "berth-operator"])
        .current_dir(crate::repo_root());
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    eprintln!("building berth-operator ({})", bin.display());
    let status = build.status().expect("run cargo build");
    assert!(
        status.success() && bin.exists(),
        "cargo build -p berth-operator failed; set BERTH_OPERATOR_BIN"
    );
    bin
}

/// Settings of a test's own operator: [`super::PROXY_IMAGE`], no metrics listener, only
/// `namespace`, re-reconciling every `resync`.
pub fn settings(namespace: &str, resync: Duration) -> Settings {
    Settings {
        proxy_image: super::PROXY_IMAGE.to_owned(),
        metrics_listen: None,
        resync_interval: resync,
        namespaces: vec![namespace.to_owned()],
        ..Settings::default()
    }
}

/// Waits until the Deployment of McpUpstream `name` in `ns` has a pod that is not being deleted
/// (a real kubelet keeps a rolled pod a while) and returns it.
pub async fn eventually_pod(ns: &TestNamespace, name: &str, deadline: Duration) -> Pod {
    let pods = ns.api::<Pod>();
    let selector = format!("app.kubernetes.io/instance={name}");
    wait_for(&format!("a pod of {name}"), deadline, || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|pod| pod.metadata.deletion_timestamp.is_none())
        }
    })
    .await
}

/// Writes `pod`'s status the way a kubelet running it would: phase `Running`, pod IP
/// `127.0.0.1` (where the test's proxy listens), the `Ready` condition `ready`, and the
/// upstream sidecar's and the proxy's container statuses with `upstream_image_id`.
///
/// # Panics
/// When the API server refuses the patch.
pub async fn play_kubelet(ns: &TestNamespace, pod: &Pod, ready: bool, upstream_image_id: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ready = if ready { "True" } else { "False" };
    let condition = |type_: &str, status: &str| serde_json::json!({"type": type_, "status": status, "lastTransitionTime": now});
    let container = |name: &str, image_id: &str| {
        serde_json::json!({
            "name": name, "image": name, "imageID": image_id, "ready": ready == "True",
            "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": now}},
        })
    };
    let status = serde_json::json!({"status": {
        "phase": "Running",
        "startTime": now,
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "hostIP": "127.0.0.1",
        "conditions": [
            condition("PodScheduled", "True"), condition("Initialized", "True"),
            condition("ContainersReady", ready), condition("Ready", ready),
        ],
        "initContainerStatuses": [container("upstream", upstream_image_id)],
        "containerStatuses": [container("proxy", "registry.example/berth/berth-proxy@sha256:00")],
    }});
    ns.api::<Pod>()
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("pod status patched");
}
