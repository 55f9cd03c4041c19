//! Harness for tests against the real local control plane (etcd, kube-apiserver,
//! kube-controller-manager from `tests/controlplane/up.sh`): a Kubernetes client from
//! `KUBECONFIG`, one operator shared by the whole test binary, and a fresh namespace per test.
//!
//! Not responsible for: starting the control plane (the test runner does, and exports
//! `KUBECONFIG`), or a kubelet (there is none: Pods are created but never run).

pub mod operator;
pub mod rbac;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_crds::McpUpstream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::crd::CustomResourceExt;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, Config};

/// Proxy image the shared operator puts into every pod; a value no default would produce, so
/// tests prove the setting reaches the Deployment.
pub const PROXY_IMAGE: &str = "registry.example/berth/berth-proxy:cluster-test";

/// Field manager the tests use for their own writes (never the operator's).
pub const TEST_MANAGER: &str = "berth-tests";

/// Longest the shared operator may take to install the CRD and start.
const OPERATOR_START_DEADLINE: Duration = Duration::from_secs(120);

/// Outcome of starting the shared operator, kept for every later caller.
static OPERATOR: OnceLock<Result<(), String>> = OnceLock::new();

/// A client for the cluster in `KUBECONFIG`, bound to the calling test's runtime.
///
/// # Panics
/// When `KUBECONFIG` is not set (the cluster tests need `make test`), or the kubeconfig does
/// not load.
pub async fn client() -> Client {
    let config = kube_config().await.unwrap_or_else(|err| panic!("{err}"));
    Client::try_from(config).expect("client from kubeconfig")
}

async fn kube_config() -> Result<Config, String> {
    if std::env::var_os("KUBECONFIG").is_none() {
        return Err(
            "cluster tests need the local control plane: run `make test` \
                    (or tests/controlplane/up.sh DIR and export KUBECONFIG=DIR/kubeconfig)"
                .to_owned(),
        );
    }
    Config::infer()
        .await
        .map_err(|err| format!("failed to load KUBECONFIG: {err}"))
}

/// Makes sure the shared operator runs: on first call applies the McpUpstream CRD, waits for it
/// to be `Established`, and starts `berth_operator::run` on a thread with its own Tokio runtime
/// (so it outlives any one test's runtime). Later calls return at once.
///
/// The operator runs with [`PROXY_IMAGE`] and no metrics listener. Set `RUST_LOG` to see its
/// logs on stderr.
///
/// # Panics
/// When `KUBECONFIG` is unset or the operator could not start within its deadline.
pub async fn shared_operator() {
    let started = tokio::task::spawn_blocking(|| OPERATOR.get_or_init(start_operator).clone())
        .await
        .expect("operator start task");
    if let Err(err) = started {
        panic!("shared operator did not start: {err}");
    }
}

fn start_operator() -> Result<(), String> {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("berth-operator".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("failed to build runtime: {err}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let client = match kube_config().await.and_then(|config| {
                    Client::try_from(config).map_err(|err| format!("failed to build client: {err}"))
                }) {
                    Ok(client) => client,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                if let Err(err) = install_crd(&client).await {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                let settings = berth_operator::Settings {
                    proxy_image: PROXY_IMAGE.to_owned(),
                    metrics_listen: None,
                    ..berth_operator::Settings::default()
                };
                if let Err(err) =
                    berth_operator::run(client, settings, std::future::pending()).await
                {
                    eprintln!("shared operator stopped: {err}");
                }
            });
        })
        .map_err(|err| format!("failed to spawn operator thread: {err}"))?;
    ready_rx
        .recv_timeout(OPERATOR_START_DEADLINE)
        .map_err(|err| format!("no start report within {OPERATOR_START_DEADLINE:?}: {err}"))?
}

/// Server-side applies the McpUpstream CRD and waits until the API server serves it, for tests
/// that run operators of their own instead of [`shared_operator`].
///
/// # Panics
/// When the CRD is refused or not served within two minutes.
pub async fn ensure_crd(client: &Client) {
    if let Err(err) = install_crd(client).await {
        panic!("{err}");
    }
}

/// Server-side applies the McpUpstream CRD and waits until the API server serves it.
async fn install_crd(client: &Client) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = McpUpstream::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .map_err(|err| format!("failed to apply CRD {name}: {err}"))?;
    tokio::time::timeout(
        OPERATOR_START_DEADLINE,
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .map_err(|_| format!("CRD {name} not Established within {OPERATOR_START_DEADLINE:?}"))?
    .map_err(|err| format!("failed to watch CRD {name}: {err}"))?;
    // Discovery can lag a moment behind Established: wait until a list succeeds.
    let upstreams: Api<McpUpstream> = Api::all(client.clone());
    crate::wait_for("McpUpstreams to be served", OPERATOR_START_DEADLINE, || {
        let upstreams = upstreams.clone();
        async move { upstreams.list(&Default::default()).await.ok() }
    })
    .await;
    Ok(())
}

/// A namespace created for one test, labelled to enforce the "restricted" Pod Security Standard
/// (so the API server refuses pods that do not meet it).
pub struct TestNamespace {
    /// The namespace's name: `<prefix>-<unique suffix>`.
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates a fresh namespace whose name starts with `prefix` (at most 40 characters,
    /// lowercase letters, digits and `-`).
    ///
    /// # Panics
    /// When the API server refuses the namespace.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{prefix}-{:x}{:x}",
            nanos ^ std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": {
                    "berth.dev/test": prefix,
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        }))
        .expect("namespace object");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|err| panic!("failed to create namespace {name}: {err}"));
        Self {
            name,
            client: client.clone(),
        }
    }

    /// An API handle for namespaced objects of kind `K` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Deletes the namespace (and so everything in it) without waiting. Call it at the end of a
    /// passing test; a failing test leaves its namespace for inspection.
    pub async fn delete(self) {
        if let Err(err) = Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            eprintln!("failed to delete namespace {}: {err}", self.name);
        }
    }
}

/// Waits until `name` exists in `api` and returns it.
///
/// # Panics
/// When `deadline` passes first.
pub async fn eventually_get<K>(api: &Api<K>, name: &str, deadline: Duration) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to exist", std::any::type_name::<K>());
    crate::wait_for(&what, deadline, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move { api.get_opt(&name).await.ok().flatten() }
    })
    .await
}

/// Waits until `name` is gone from `api`.
///
/// # Panics
/// When `deadline` passes first.
pub async fn eventually_gone<K>(api: &Api<K>, name: &str, deadline: Duration)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to be deleted", std::any::type_name::<K>());
    crate::wait_for(&what, deadline, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move { matches!(api.get_opt(&name).await, Ok(None)).then_some(()) }
    })
    .await;
}

/// Waits until the ReplicaSet controller has created at least `count` Pods of the McpUpstream
/// `name` in `ns` (selected by `app.kubernetes.io/instance`) and returns them. A Pod exists only
/// if the API server admitted it, so in a [`TestNamespace`] this proves the template meets the
/// "restricted" Pod Security Standard.
///
/// # Panics
/// When `deadline` passes first.
pub async fn eventually_pods(
    ns: &TestNamespace,
    name: &str,
    count: usize,
    deadline: Duration,
) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
    let selector = format!("app.kubernetes.io/instance={name}");
    let what = format!("{count} pod(s) of {name} from the ReplicaSet controller");
    crate::wait_for(&what, deadline, || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .ok()?;
            (list.items.len() >= count).then_some(list.items)
        }
    })
    .await
}

/// Creates `upstream` in `ns` and asserts the API server rejects it (422) with a message that
/// names `field`.
///
/// # Panics
/// When the object is accepted or the error is another.
pub async fn rejected_naming(ns: &TestNamespace, upstream: &McpUpstream, field: &str) {
    let err = ns
        .api::<McpUpstream>()
        .create(&PostParams::default(), upstream)
        .await
        .expect_err("the API server must reject it");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains(field), "{field}: {status:?}");
        }
        other => panic!("expected an API error, got {other}"),
    }
}
