//! What the running pods of an McpUpstream and their proxies report: pod readiness, the
//! upstream container's image ID, and the proxy's own view of its upstream.
//!
//! How the operator learns what the proxy knows (issue 5, "Status and events"): the operator
//! reads it from the proxy, the proxy tells the API server nothing. Each reconcile lists the
//! McpUpstream's pods (a read) and, from one pod that has an IP, GETs the proxy's admin
//! endpoints `http://<podIP>:<spec.proxy.adminPort>/tools` (count, fingerprint, missing allowed
//! tools) and `/readyz` (the reason text when not ready). So the proxy keeps zero privileges in
//! the cluster (no ServiceAccount token, no RBAC), and everything it reports is already served
//! to the kubelet and to Prometheus on the same port. Both requests together are bounded by
//! [`REPORT_TIMEOUT`]: a proxy that accepts TCP and never answers costs one reconcile at most
//! that long and never blocks other McpUpstreams (field case BR-19).
//!
//! Tenants' pods are not trusted (issue 40): a pod counts as the McpUpstream's only when its
//! controller is a ReplicaSet whose controller is the McpUpstream's Deployment (matched by uid;
//! labels only narrow the lists), every answer is read chunk by chunk and abandoned past
//! [`MAX_ANSWER_BYTES`], and text a proxy sends is cut to [`MAX_REPORTED_CHARS`] before it can
//! reach a condition message.
//!
//! Not responsible for: turning the report into conditions ([`crate::status`]).

use std::collections::HashSet;
use std::time::Duration;

use berth_crds::McpUpstream;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;

use crate::build::container::UPSTREAM_CONTAINER;
use crate::diagnostics::DiagnosticsKey;
use crate::labels;

// The error of `read` lives in `error`, below every step (issue 17); still reachable here.
pub use crate::error::ListPodsError;

/// Longest the operator waits for one proxy's admin endpoints (`/tools` and `/readyz`
/// together), connection included.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes the operator reads of one admin endpoint's answer (1 MiB); a longer answer is
/// abandoned and the proxy reported as failed.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// What one reconcile learned about the running pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Pods of the McpUpstream that are not being deleted, in name order.
    pub pods: Vec<PodState>,
    /// What the proxy of one of them reported.
    pub proxy: ProxyReport,
}

pub mod blocked;
pub mod bound;

pub use blocked::Blocked;
pub use bound::{MAX_REPORTED_CHARS, MAX_REPORTED_NAMES, truncate};

/// One pod, as its `status` (written by the kubelet) describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    /// The pod's name.
    pub name: String,
    /// Whether its `Ready` condition is `True` (the proxy's `/readyz` readiness probe passes).
    pub ready: bool,
    /// `status.podIP`, once the pod runs.
    pub ip: Option<String>,
    /// `imageID` the runtime reports for the upstream container (the native sidecar, so in
    /// `initContainerStatuses`).
    pub upstream_image_id: Option<String>,
    /// What keeps it from running, when its status says ([`blocked::of_pod`]).
    pub blocked: Option<Blocked>,
}

/// What the proxy of one pod answered on its admin port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ProxyReport {
    /// No pod has an IP yet: nobody to ask.
    #[default]
    NoPodRunning,
    /// The proxy answered both endpoints.
    Answered {
        /// The pod asked.
        pod: String,
        /// Its `/tools` body.
        tools: ToolsSummary,
        /// `None` when `/readyz` said ready, else its body (the proxy's reason).
        not_ready: Option<String>,
        /// Its `/upstream` body; `None` from a proxy that does not serve it.
        upstream: Option<UpstreamState>,
    },
    /// The proxy did not answer within [`REPORT_TIMEOUT`].
    Timeout {
        /// The pod asked.
        pod: String,
    },
    /// The request failed (refused connection, HTTP error, a body that is not the expected
    /// JSON).
    Failed {
        /// The pod asked.
        pod: String,
        /// What failed, for the condition message.
        error: String,
    },
}

/// The JSON the proxy serves on `/tools` (proxy/src/transport/upstream/tools.rs, `Catalog::summary`):
/// `{"count": N, "fingerprint": "sha256:<hex>", "drifted": [..], "missing": [..]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ToolsSummary {
    /// Tools in the proxy's last listing, after `spec.tools` filtering.
    pub count: i64,
    /// `sha256:<hex>` over the listed tools' names and input schemas.
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// Tools whose schema drifted from the baseline.
    #[serde(default)]
    pub drifted: Vec<String>,
    /// Names in `tools.allow` the upstream lacks.
    #[serde(default)]
    pub missing: Vec<String>,
}

/// The JSON the proxy serves on `/upstream` (proxy/src/front/admin.rs):
/// `{"ready": bool, "lastError": "...", "exposed": bool|null, "stdio": {"children": N,
/// "restarts": N}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamState {
    /// Whether the proxy's upstream session is ready.
    #[serde(default)]
    pub ready: bool,
    /// The last upstream failure; for a stdio child how it ended and its last stderr lines
    /// (secret-like values redacted by the proxy).
    #[serde(default)]
    pub last_error: Option<String>,
    /// Whether the upstream's port answers on the pod IP as well as on loopback; `None` when
    /// the proxy did not check (stdio, an upstream elsewhere, not listening yet) or predates
    /// the check (issue 40, item 3).
    #[serde(default)]
    pub exposed: Option<bool>,
    /// Stdio upstreams only: live children and restarts so far.
    #[serde(default)]
    pub stdio: Option<StdioState>,
}

/// A stdio upstream's children as the proxy counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StdioState {
    /// Live children.
    #[serde(default)]
    pub children: i64,
    /// Children that exited and were respawned (`berth_proxy_stdio_restarts_total`).
    #[serde(default)]
    pub restarts: i64,
}

impl UpstreamState {
    /// Restarts of a stdio upstream that is not ready: `Some(n)` when the child keeps exiting
    /// (field case BR-34), `None` otherwise.
    pub fn crash_loop_restarts(&self) -> Option<i64> {
        let restarts = self.stdio?.restarts;
        (!self.ready && restarts > 0).then_some(restarts)
    }
}

/// Lists the pods of `upstream` that its `deployment` (as the API server returned it) controls
/// through a ReplicaSet, and asks one of their proxies (a ready one if any) for its report,
/// through `http` (whose timeouts do not matter: [`REPORT_TIMEOUT`] bounds the asking).
///
/// # Errors
/// [`ListPodsError`] when the API server refuses the ReplicaSet or pod list. A proxy that does
/// not answer is no error: it is [`ProxyReport::Timeout`] or [`ProxyReport::Failed`].
///
/// # Cancellation
/// Safe to drop: only reads.
pub async fn read(
    client: &Client,
    http: &reqwest::Client,
    upstream: &McpUpstream,
    deployment: &Deployment,
    diagnostics: &DiagnosticsKey,
) -> Result<Report, ListPodsError> {
    let name = upstream.name_any();
    let namespace = upstream.namespace().unwrap_or_default();
    let token = diagnostics.token(&namespace, &name);
    let selector = labels::selector(&name)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    let params = ListParams::default().labels(&selector);
    let failed = |source| ListPodsError {
        name: name.clone(),
        source,
    };
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace)
        .list(&params)
        .await
        .map_err(failed)?;
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace)
        .list(&params)
        .await
        .map_err(failed)?;
    let pods = owned_pods(deployment, &replica_sets.items, pods.items);
    let pods = pod_states(&pods);
    let proxy = match ask_whom(&pods) {
        Some((pod, ip)) => ask(http, pod, ip, upstream.spec.proxy.admin_port, &token).await,
        None => ProxyReport::NoPodRunning,
    };
    Ok(Report { pods, proxy })
}

/// The uid of the controller of `meta` when it is of `kind`.
fn controller_uid<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.uid.as_str())
}

/// The `pods` whose controller is one of `replica_sets` whose controller is `deployment`, by
/// uid: a pod that only carries the labels (any tenant can set them) is not the McpUpstream's.
pub fn owned_pods(
    deployment: &Deployment,
    replica_sets: &[ReplicaSet],
    pods: Vec<Pod>,
) -> Vec<Pod> {
    let Some(deployment_uid) = deployment.metadata.uid.as_deref() else {
        return Vec::new();
    };
    let sets: HashSet<&str> = replica_sets
        .iter()
        .filter(|set| controller_uid(&set.metadata, "Deployment") == Some(deployment_uid))
        .filter_map(|set| set.metadata.uid.as_deref())
        .collect();
    pods.into_iter()
        .filter(|pod| {
            controller_uid(&pod.metadata, "ReplicaSet").is_some_and(|uid| sets.contains(uid))
        })
        .collect()
}

/// The state of each pod not being deleted, sorted by name.
pub fn pod_states(pods: &[Pod]) -> Vec<PodState> {
    let mut states: Vec<PodState> = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| {
            let status = pod.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
            let upstream = |list: Option<&Vec<ContainerStatus>>| {
                list.into_iter()
                    .flatten()
                    .find(|c| c.name == UPSTREAM_CONTAINER)
                    .map(|c| c.image_id.clone())
                    .filter(|id| !id.is_empty())
            };
            PodState {
                name: pod.name_any(),
                ready,
                ip: status
                    .and_then(|s| s.pod_ip.clone())
                    .filter(|ip| !ip.is_empty()),
                upstream_image_id: upstream(
                    status.and_then(|s| s.init_container_statuses.as_ref()),
                )
                .or_else(|| upstream(status.and_then(|s| s.container_statuses.as_ref()))),
                blocked: blocked::of_pod(pod),
            }
        })
        .collect();
    states.sort_by(|a, b| a.name.cmp(&b.name));
    states
}

/// The pod whose proxy to ask and its IP: the first ready pod with an IP, else the first pod
/// with an IP (a pod that is not ready still explains why on `/readyz`).
pub fn ask_whom(pods: &[PodState]) -> Option<(&str, &str)> {
    let with_ip = |pod: &&PodState| pod.ip.is_some();
    pods.iter()
        .filter(with_ip)
        .find(|pod| pod.ready)
        .or_else(|| pods.iter().find(with_ip))
        .and_then(|pod| Some((pod.name.as_str(), pod.ip.as_deref()?)))
}

/// GETs `/tools`, `/readyz` and `/upstream` of the proxy at `ip:port`, all within
/// [`REPORT_TIMEOUT`], reading at most [`MAX_ANSWER_BYTES`] of each answer; the text kept is
/// [`bounded`]. Every request carries `token`, the diagnostics token of the proxy's
/// `McpUpstream` ([`DiagnosticsKey::token`]; issue 39, item 10).
async fn ask(http: &reqwest::Client, pod: &str, ip: &str, port: i32, token: &str) -> ProxyReport {
    // An IPv6 pod IP needs brackets in a URL.
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let base = format!("http://{host}:{port}");
    let get = |path: &'static str| {
        let request = http.get(format!("{base}{path}")).bearer_auth(token);
        async move {
            let response = request.send().await.map_err(Unanswered::from)?;
            let status = response.status();
            let body = body_within(response, MAX_ANSWER_BYTES, path).await?;
            Ok::<_, Unanswered>((status, body))
        }
    };
    let tools = async {
        let (status, body) = get("/tools").await?;
        if !status.is_success() {
            return Err(Unanswered::failed(format!("/tools answered HTTP {status}")));
        }
        serde_json::from_slice::<ToolsSummary>(&body).map_err(|err| {
            Unanswered::failed(format!("/tools did not answer the expected JSON: {err}"))
        })
    };
    let readyz = async {
        let (status, body) = get("/readyz").await?;
        let reason = String::from_utf8_lossy(&body);
        Ok::<_, Unanswered>((!status.is_success()).then(|| reason.trim().to_owned()))
    };
    // Optional: a proxy without `/upstream` still reports through the other two.
    let upstream = async {
        let (status, body) = get("/upstream").await.ok()?;
        if !status.is_success() {
            return None;
        }
        serde_json::from_slice::<UpstreamState>(&body).ok()
    };
    let pod = pod.to_owned();
    let all = futures::future::join3(tools, readyz, upstream);
    let report = match tokio::time::timeout(REPORT_TIMEOUT, all).await {
        Err(_) => ProxyReport::Timeout { pod },
        Ok((Ok(tools), Ok(not_ready), upstream)) => ProxyReport::Answered {
            pod,
            tools,
            not_ready,
            upstream,
        },
        // The client's own per-request timeout can expire in the same timer tick as the overall
        // one and be seen first: it is the same timeout, not a different failure.
        Ok((tools, readyz, _)) => {
            // At least one of the two failed, or the arm above would have matched.
            let errors: Vec<Unanswered> =
                [tools.err(), readyz.err()].into_iter().flatten().collect();
            if errors.iter().any(|e| e.timed_out) {
                ProxyReport::Timeout { pod }
            } else {
                let error = errors
                    .into_iter()
                    .next()
                    .map(|e| e.error)
                    .unwrap_or_default();
                ProxyReport::Failed { pod, error }
            }
        }
    };
    bounded(report)
}

/// The body of `response`, read chunk by chunk and abandoned as soon as it would exceed `limit`
/// bytes (so an endless answer costs at most `limit` bytes of memory).
///
/// # Errors
/// [`Unanswered`] when the body is longer than `limit` or the read fails.
async fn body_within(
    mut response: reqwest::Response,
    limit: usize,
    path: &str,
) -> Result<Vec<u8>, Unanswered> {
    let too_long = || Unanswered::failed(format!("{path} answered more than {limit} bytes"));
    if response
        .content_length()
        .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
    {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Unanswered::from)? {
        if body.len().saturating_add(chunk.len()) > limit {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `report` with every text from the proxy cut to [`MAX_REPORTED_CHARS`] and the lists of tool
/// names to [`MAX_REPORTED_NAMES`], so no condition message grows with what a pod sends.
pub fn bounded(report: ProxyReport) -> ProxyReport {
    let names = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .take(MAX_REPORTED_NAMES)
            .map(|name| truncate(&name))
            .collect()
    };
    match report {
        ProxyReport::Answered {
            pod,
            tools,
            not_ready,
            upstream,
        } => ProxyReport::Answered {
            pod,
            tools: ToolsSummary {
                count: tools.count,
                fingerprint: tools.fingerprint.as_deref().map(truncate),
                drifted: names(tools.drifted),
                missing: names(tools.missing),
            },
            not_ready: not_ready.as_deref().map(truncate),
            upstream: upstream.map(|state| UpstreamState {
                last_error: state.last_error.as_deref().map(truncate),
                ..state
            }),
        },
        ProxyReport::Failed { pod, error } => ProxyReport::Failed {
            pod,
            error: truncate(&error),
        },
        other => other,
    }
}

/// Why one admin request got no usable answer.
struct Unanswered {
    /// The request ran out of time (connecting or waiting for the answer).
    timed_out: bool,
    /// What failed, for the condition message.
    error: String,
}

impl Unanswered {
    fn failed(error: String) -> Self {
        Self {
            timed_out: false,
            error,
        }
    }
}

impl From<reqwest::Error> for Unanswered {
    fn from(err: reqwest::Error) -> Self {
        Self {
            timed_out: err.is_timeout(),
            error: err.without_url().to_string(),
        }
    }
}

/// The upstream image ID to report: the first ready pod's, else the first reporting pod's.
pub fn upstream_image_id(pods: &[PodState]) -> Option<&str> {
    pods.iter()
        .filter(|pod| pod.upstream_image_id.is_some())
        .find(|pod| pod.ready)
        .or_else(|| pods.iter().find(|pod| pod.upstream_image_id.is_some()))
        .and_then(|pod| pod.upstream_image_id.as_deref())
}

/// The `sha256:<hex>` digest in an image reference or image ID (the part after the last `@`,
/// or the whole of a bare `sha256:` ID), if any.
pub fn digest(image: &str) -> Option<&str> {
    let digest = image.rsplit_once('@').map_or(image, |(_, digest)| digest);
    digest.starts_with("sha256:").then_some(digest)
}

/// An HTTP client for the proxies' admin endpoints: plain HTTP, no proxy from the environment,
/// and per-request limits no looser than [`REPORT_TIMEOUT`].
///
/// # Errors
/// When the client cannot be built (the TLS backend cannot initialise).
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    // reqwest's rustls backend needs a process-wide provider even for plain HTTP clients.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(REPORT_TIMEOUT)
        .timeout(REPORT_TIMEOUT)
        .pool_max_idle_per_host(0)
        .build()
}

#[cfg(test)]
mod tests;
