//! Harness for tests on the local cluster with a real node (`tests/controlplane/up.sh` with
//! `BERTH_CP_NODE=1`): a kubelet and containerd run the pods, kube-proxy serves the Services.
//!
//! The test runner starts that cluster, exports `KUBECONFIG` (its admin kubeconfig),
//! `BERTH_NODE_STATE` (its state directory: the image digests in `images`, the `env` file) and
//! `BERTH_HELM` (the helm binary), and imports Berth's images and the test images
//! (`images/build.sh`, `tests/images/build.sh`) into the node's containerd. This machine routes
//! the pod and Service ranges into the cluster's network namespace, so tests reach pod IPs and
//! ClusterIPs directly.
//!
//! Not responsible for: starting the cluster or building images.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use berth_crds::McpUpstream;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::OnceCell;

use crate::cluster::TestNamespace;
use crate::wait_for;

/// Namespace the chart is installed into, as the README's quick start does.
pub const RELEASE_NAMESPACE: &str = "berth-system";
/// Helm release name.
pub const RELEASE: &str = "berth";

/// The cluster's state directory (`BERTH_NODE_STATE`).
///
/// # Panics
/// When `BERTH_NODE_STATE` is not set: these tests need `make test`'s node stage.
pub fn state_dir() -> PathBuf {
    std::env::var_os("BERTH_NODE_STATE").map_or_else(
        || {
            panic!(
                "node tests need the one-node cluster: run `make test`, or start \
                 tests/controlplane/up.sh DIR with BERTH_CP_NODE=1 and export \
                 BERTH_NODE_STATE=DIR KUBECONFIG=DIR/kubeconfig BERTH_HELM=<helm>"
            )
        },
        PathBuf::from,
    )
}

/// The reference `name@sha256:…` of the imported image `name:tag`, with the digest containerd
/// reported for it on import (`STATE_DIR/images`, one `NAME:TAG sha256:…` per line).
///
/// # Panics
/// When the image was not imported.
pub fn pinned(image: &str) -> String {
    let path = state_dir().join("images");
    let list = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("failed to read {}: {err}", path.display()));
    let digest = list
        .lines()
        .find_map(|line| line.strip_prefix(image)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{image} is not among the imported images:\n{list}"));
    let name = image.rsplit_once(':').map_or(image, |(name, _)| name);
    format!("{name}@{}", digest.trim())
}

/// Runs `helm upgrade --install` of `charts/berth` once per test binary, with the images the node holds:
/// the operator as a pod from its image (leader election on, the chart's default) and the
/// proxy pinned by digest. Later calls return at once.
///
/// # Panics
/// When helm fails.
pub async fn chart_installed() {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let proxy = pinned(&format!("ghcr.io/berth-dev/berth-proxy:{}", app_version()));
            let digest = proxy.rsplit_once('@').map(|(_, d)| d.to_owned());
            let chart = crate::repo_root().join("charts/berth");
            let mut helm = Command::new(helm_bin());
            helm.args(["upgrade", "--install", RELEASE])
                .arg(&chart)
                .args(["-n", RELEASE_NAMESPACE, "--create-namespace"])
                .args([
                    "--set",
                    &format!("operator.proxyImage.digest={}", digest.unwrap_or_default()),
                ])
                .args(["--wait", "--timeout", "5m"]);
            run(helm, "helm install").await;
        })
        .await;
}

/// The chart's `appVersion`, the tag `images/build.sh` gives Berth's images.
pub fn app_version() -> String {
    let chart = std::fs::read_to_string(crate::repo_root().join("charts/berth/Chart.yaml"))
        .expect("charts/berth/Chart.yaml");
    chart
        .lines()
        .find_map(|line| line.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("appVersion in Chart.yaml")
}

/// The helm binary: `BERTH_HELM`, else `helm` on the PATH.
pub fn helm_bin() -> PathBuf {
    std::env::var_os("BERTH_HELM").map_or_else(|| PathBuf::from("helm"), PathBuf::from)
}

/// Runs `command` to completion off the async runtime.
///
/// # Panics
/// When it cannot start or exits non-zero (with its output in the message).
pub async fn run(mut command: Command, what: &str) -> String {
    let what = what.to_owned();
    tokio::task::spawn_blocking(move || {
        let output = command
            .output()
            .unwrap_or_else(|err| panic!("{what}: failed to start: {err}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{what} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    })
    .await
    .expect("command task")
}

/// Kills (SIGKILL) the main process of `container` of `pod` from outside the pod, as a crash
/// would: the process containerd reports for the container's task.
///
/// # Panics
/// When the container has no running task.
pub async fn kill_container(pod: &Pod, container: &str) {
    let status = all_statuses(pod)
        .find(|s| s.name == container)
        .unwrap_or_else(|| panic!("pod has no container {container}"));
    let id = status
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("container {container} has no containerd id: {status:?}"))
        .to_owned();
    let tasks = run(ctr(&["tasks", "ls"]), "ctr tasks ls").await;
    let pid = tasks
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next() == Some(id.as_str())).then(|| fields.next())?
        })
        .unwrap_or_else(|| panic!("no task for container {id}:\n{tasks}"))
        .to_owned();
    let mut kill = Command::new("kill");
    kill.args(["-KILL", &pid]);
    run(kill, "kill the container's process").await;
}

/// The lines `container` of `pod` wrote on its standard output, as the kubelet logged them
/// (`STATE_DIR/node/kubelet/logs/<namespace>_<pod>_<uid>/<container>/<restart>.log`, CRI log
/// lines `<time> <stream> <F|P> <text>`); standard-error lines are left out, partial lines
/// (`P`) joined.
///
/// # Panics
/// When the pod has no log directory for the container.
pub fn container_stdout(pod: &Pod, container: &str) -> Vec<String> {
    let meta = &pod.metadata;
    let dir = state_dir().join("node/kubelet/logs").join(format!(
        "{}_{}_{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default()
    ));
    let dir = dir.join(container);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no log directory {}: {e}", dir.display()))
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    files.sort();
    let mut lines = Vec::new();
    let mut partial = String::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.lines() {
            let mut fields = line.splitn(4, ' ');
            let (_, stream, tag, body) =
                (fields.next(), fields.next(), fields.next(), fields.next());
            if stream != Some("stdout") {
                continue;
            }
            partial.push_str(body.unwrap_or_default());
            if tag == Some("F") {
                lines.push(std::mem::take(&mut partial));
            }
        }
    }
    lines
}

/// The value of `var` in `STATE_DIR/env`, the shell exports `up.sh` writes
/// (`export VAR='value'`).
///
/// # Panics
/// When the file or the variable is missing.
pub fn cluster_env(var: &str) -> String {
    let path = state_dir().join("env");
    let env = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("failed to read {}: {err}", path.display()));
    let prefix = format!("export {var}=");
    env.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{var} is not in {}", path.display()))
        .trim_matches('\'')
        .to_owned()
}

/// `ctr` against the node's containerd, in the kubelet's `k8s.io` namespace.
fn ctr(args: &[&str]) -> Command {
    let line = cluster_env("BERTH_CP_CTR");
    let mut words = line.split_whitespace();
    let mut command = Command::new(words.next().expect("ctr path"));
    command.args(words).args(args);
    command
}

/// Every container status of `pod`: init containers (the native sidecars) first.
pub fn all_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or_default()
        .iter()
        .chain(
            status
                .and_then(|s| s.container_statuses.as_deref())
                .unwrap_or_default(),
        )
}

/// `restartCount` of `container` in `pod` (0 when it has no status yet).
pub fn restarts(pod: &Pod, container: &str) -> i32 {
    all_statuses(pod)
        .find(|s| s.name == container)
        .map_or(0, |s| s.restart_count)
}

/// `GET http://<pod IP>:<port><path>` with a short budget; `None` on any failure.
pub async fn get_pod(pod: &Pod, port: i32, path: &str) -> Option<String> {
    let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .ok()?;
    let reply = client
        .get(format!("http://{ip}:{port}{path}"))
        .send()
        .await
        .ok()?;
    reply.text().await.ok()
}

/// The HTTP status of `GET http://<pod IP>:<port><path>` with `bearer` as the token, if any;
/// `None` on any failure to get an answer.
pub async fn pod_status_code(
    pod: &Pod,
    port: i32,
    path: &str,
    bearer: Option<&str>,
) -> Option<u16> {
    let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .ok()?;
    let mut request = client.get(format!("http://{ip}:{port}{path}"));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    Some(request.send().await.ok()?.status().as_u16())
}

/// Deadline for a new McpUpstream's pod to run and its proxy to report ready: images are
/// already on the node, but two cores start the Node server, the proxy and the probes.
pub const READY_DEADLINE: Duration = Duration::from_secs(180);
/// Deadline for the operator's status to follow a change in the pods.
pub const STATUS_DEADLINE: Duration = Duration::from_secs(90);

/// The status (`True`, `False`, `Unknown`) of condition `type_`, if reported.
pub fn condition_status(upstream: &McpUpstream, type_: &str) -> Option<String> {
    let status = upstream.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some(condition.status.clone())
}

/// Every condition as `Type=Status Reason message`, for failure messages.
pub fn conditions_text(upstream: &McpUpstream) -> String {
    upstream.status.as_ref().map_or_else(
        || "no status".to_owned(),
        |s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} {} {}", c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        },
    )
}

/// Waits until every condition in `wanted` has the given status, then returns the McpUpstream.
///
/// # Panics
/// When the deadline passes, with the conditions last seen.
pub async fn eventually_conditions(
    api: &Api<McpUpstream>,
    name: &str,
    wanted: &[(&str, &str)],
    deadline: Duration,
) -> McpUpstream {
    let end = Instant::now() + deadline;
    let mut last = String::new();
    loop {
        if let Ok(upstream) = api.get(name).await {
            if wanted
                .iter()
                .all(|(t, s)| condition_status(&upstream, t).as_deref() == Some(*s))
            {
                return upstream;
            }
            last = conditions_text(&upstream);
        }
        assert!(
            Instant::now() < end,
            "McpUpstream {name} did not reach {wanted:?} within {deadline:?}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `http://<ClusterIP>:<port>/mcp` of the McpUpstream's Service, once kube-proxy routes it: a
/// Service whose pods just became ready can take kube-proxy a moment (its next rule sync) to
/// reach, and until then a connection is refused.
///
/// # Panics
/// When the Service does not exist, has no ClusterIP, or does not accept a connection within
/// [`STATUS_DEADLINE`].
pub async fn cluster_ip_url(ns: &TestNamespace, name: &str) -> String {
    let service = ns.api::<Service>().get(name).await.expect("the Service");
    let spec = service.spec.expect("Service spec");
    let ip = spec.cluster_ip.expect("a ClusterIP");
    let port = spec.ports.expect("ports")[0].port;
    let addr = format!("{ip}:{port}");
    wait_for("kube-proxy to route the ClusterIP", STATUS_DEADLINE, || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ()) }
    })
    .await;
    format!("http://{addr}/mcp")
}

/// An McpUpstream `name` of the Node reference server from the locally built image, pinned by
/// the digest containerd reported (`examples/everything.yaml` with that image).
pub fn everything(name: &str) -> McpUpstream {
    serde_json::from_value(json!({
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "McpUpstream",
        "metadata": { "name": name },
        "spec": {
            "upstream": {
                "image": pinned("berth.local/everything:test"),
                "transport": "StreamableHttp",
                "args": ["streamableHttp"],
                "port": 3001,
                "path": "/mcp",
                "env": [{ "name": "PORT", "value": "3001" }],
            },
            "session": { "strategy": "Shared" },
            "toolsProbe": { "policy": "OnStart" },
            "timeouts": { "connect": "10s", "call": "60s" },
        },
    }))
    .expect("McpUpstream")
}

/// Creates `upstream` in `ns`.
///
/// # Panics
/// When the API server refuses it.
pub async fn create(ns: &TestNamespace, upstream: &McpUpstream) {
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), upstream)
        .await
        .expect("McpUpstream accepted");
}

/// Whether every container of `pod`, the native sidecars included, is running and ready.
pub fn all_running_and_ready(pod: &Pod) -> bool {
    let statuses: Vec<_> = all_statuses(pod)
        .filter(|s| s.name != "berth-install")
        .collect();
    !statuses.is_empty()
        && statuses
            .iter()
            .all(|s| s.ready && s.state.as_ref().is_some_and(|st| st.running.is_some()))
}

/// The proxy's `/metrics` on the pod IP (admin port 9090).
///
/// # Panics
/// When the scrape fails.
pub async fn metrics_of(pod: &Pod) -> String {
    get_pod(pod, 9090, "/metrics")
        .await
        .expect("the proxy's /metrics on the pod IP")
}
