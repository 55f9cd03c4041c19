//! The verdict of each condition type, from what the cluster and the proxies report. Pure.
//!
//! Condition types and reasons are wire vocabulary (PascalCase constants below); every reason
//! in [`WARNING_REASONS`] is a fault and its Events are `Warning`s.

use berth_crds::McpUpstream;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use crate::report::{Blocked, ProxyReport, REPORT_TIMEOUT, Report};
use crate::validate::InvalidSpec;

/// Condition type: the MCP endpoint is served by at least one ready pod.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: a rollout of the proxy Deployment is under way.
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Condition type: the McpUpstream runs (or tries to) with a fault that needs attention.
pub const CONDITION_DEGRADED: &str = "Degraded";
/// Condition type: at least one pod is ready, that is its proxy's `/readyz` (upstream session
/// initialized, tool list obtained) passes.
pub const CONDITION_UPSTREAM_READY: &str = "UpstreamReady";
/// Condition type: a proxy listed the upstream's tools (count and fingerprint in
/// `status.tools`).
pub const CONDITION_TOOLS_DISCOVERED: &str = "ToolsDiscovered";
/// Condition type: the upstream's port answers on the pod IP as well as on loopback, so any
/// pod that can reach the pod IP can call the server past the proxy (a warning; issue 40,
/// item 3). `Ready` does not depend on it.
pub const CONDITION_UPSTREAM_EXPOSED: &str = "UpstreamExposed";
/// Every condition type the operator owns, in the order it writes them.
pub const CONDITION_TYPES: [&str; 6] = [
    CONDITION_READY,
    CONDITION_PROGRESSING,
    CONDITION_DEGRADED,
    CONDITION_UPSTREAM_READY,
    CONDITION_TOOLS_DISCOVERED,
    CONDITION_UPSTREAM_EXPOSED,
];

/// `Ready=True`: the Deployment reports `Available=True`.
pub const REASON_DEPLOYMENT_AVAILABLE: &str = "DeploymentAvailable";
/// `Ready=False`: a rollout is under way and within its progress deadline (or the deployment
/// controller has not reported yet).
pub const REASON_PROGRESSING: &str = "Progressing";
/// `Ready=False`: the Deployment is not available and no rollout is making progress.
pub const REASON_DEPLOYMENT_UNAVAILABLE: &str = "DeploymentUnavailable";
/// `Ready=False`: the spec cannot be served; the message names the field.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

/// `Ready=False`: the Deployment is available but its proxy did not answer the operator within
/// [`REPORT_TIMEOUT`] (field case BR-19).
pub const REASON_PROXY_REPORT_TIMEOUT: &str = "ProxyReportTimeout";
/// `Ready=False`: the proxy's admin endpoint refused the connection or answered nonsense.
pub const REASON_PROXY_REPORT_FAILED: &str = "ProxyReportFailed";
/// `Ready=False`, `Degraded=True`: the API server refused to apply a child with HTTP 403; the
/// message carries the API server's message (field case BR-32).
pub const REASON_APPLY_FORBIDDEN: &str = "ApplyForbidden";
/// `Ready=False`, `Degraded=True`: the API server refused to apply a child for another reason.
pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
/// `Ready=False`, `Degraded=True`: a child's name is taken by an object this McpUpstream does
/// not own; the message names its kind and name (issue 40). Nothing was written.
pub const REASON_NAME_CONFLICT: &str = "NameConflict";
/// `Degraded=True`: `spec.podDisruptionBudget` never allows a disruption at `spec.replicas`
/// (a percentage rounded up to every replica), so node drains block; the message names the
/// field (issue 40).
pub const REASON_DISRUPTION_BUDGET_BLOCKS_DRAIN: &str = "DisruptionBudgetBlocksDrain";
/// `Ready=False`, `Degraded=True`: the Deployment is not available and a pod's container image
/// cannot be pulled; the message names the container, the image and the kubelet's reason.
pub const REASON_IMAGE_PULL_FAILED: &str = "ImagePullFailed";
/// `Ready=False`, `Degraded=True`: the Deployment is not available and a pod's container is in
/// `CrashLoopBackOff`; the message names the container, its last exit code and restarts.
pub const REASON_CONTAINER_CRASH_LOOPING: &str = "ContainerCrashLooping";
/// `Ready=False`, `Degraded=True`: the Deployment is not available and a pod cannot be
/// scheduled; the message carries the scheduler's.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// Reasons of `Ready=False` taken from what keeps a pod from running ([`Blocked`]).
const POD_BLOCKED_REASONS: [&str; 3] = [
    REASON_IMAGE_PULL_FAILED,
    REASON_CONTAINER_CRASH_LOOPING,
    REASON_UNSCHEDULABLE,
];
/// `Progressing=True`: the Deployment's rollout is under way.
pub const REASON_ROLLING_OUT: &str = "RollingOut";
/// `Progressing=False`: the latest pod template is rolled out.
pub const REASON_ROLLOUT_COMPLETE: &str = "RolloutComplete";
/// `Progressing=False`, `Degraded=True`: the rollout passed its progress deadline.
pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// `Degraded=True`: the Deployment is available but reports unavailable replicas.
pub const REASON_REPLICAS_UNAVAILABLE: &str = "ReplicasUnavailable";
/// `Degraded=False`: nothing is wrong.
pub const REASON_AS_EXPECTED: &str = "AsExpected";
/// `UpstreamReady=True`: at least one pod is ready.
pub const REASON_PODS_READY: &str = "PodsReady";
/// `UpstreamReady=False`: pods exist, none is ready; the message carries the proxy's
/// `/readyz` reason when one answered.
pub const REASON_PODS_NOT_READY: &str = "PodsNotReady";
/// `UpstreamReady=False`: no pod exists (yet).
pub const REASON_NO_PODS: &str = "NoPods";
/// `ToolsDiscovered=True`: a ready proxy listed the tools.
pub const REASON_TOOLS_LISTED: &str = "ToolsListed";
/// `ToolsDiscovered=False`, `Degraded=True`: `spec.tools.allow` names tools the upstream
/// lacks (issue 7); the message names them.
pub const REASON_ALLOWED_TOOL_MISSING: &str = "AllowedToolMissing";
/// `ToolsDiscovered=Unknown`: no pod runs, so no proxy can be asked.
pub const REASON_NO_POD_RUNNING: &str = "NoPodRunning";
/// `ToolsDiscovered=Unknown`: the proxy answered but has not listed the tools yet.
pub const REASON_PROXY_NOT_READY: &str = "ProxyNotReady";
/// `Ready=False`, `UpstreamReady=False`, `Degraded=True`: no pod is ready and the proxy reports
/// its stdio child exiting and being restarted; the message carries the restart count and the
/// proxy's last error (how the child ended, its last stderr lines, redacted) (field case BR-34).
pub const REASON_UPSTREAM_CRASH_LOOPING: &str = "UpstreamCrashLooping";
/// `UpstreamExposed=True`: the proxy's check connected to the upstream's port on the pod IP;
/// the message says how to bind the server to loopback.
pub const REASON_UPSTREAM_PORT_EXPOSED: &str = "UpstreamPortExposed";
/// `UpstreamExposed=False`: the upstream's port answers on loopback only.
pub const REASON_LOOPBACK_ONLY: &str = "LoopbackOnly";
/// `UpstreamExposed=False`: a stdio upstream, which has no port (the proxy reaches it through
/// a Unix socket or its own child processes).
pub const REASON_NO_UPSTREAM_PORT: &str = "NoUpstreamPort";
/// `UpstreamExposed=Unknown`: no proxy reported the check (no pod runs, the proxy did not
/// answer, the upstream is not on loopback or does not listen yet).
pub const REASON_EXPOSURE_NOT_CHECKED: &str = "ExposureNotChecked";

/// Reasons that are faults: their Events are `Warning`s, and a change of message alone is a
/// new Event.
pub const WARNING_REASONS: [&str; 16] = [
    REASON_UPSTREAM_PORT_EXPOSED,
    REASON_IMAGE_PULL_FAILED,
    REASON_CONTAINER_CRASH_LOOPING,
    REASON_UNSCHEDULABLE,
    REASON_NAME_CONFLICT,
    REASON_DISRUPTION_BUDGET_BLOCKS_DRAIN,
    REASON_UPSTREAM_CRASH_LOOPING,
    REASON_INVALID_SPEC,
    REASON_DEPLOYMENT_UNAVAILABLE,
    REASON_PROXY_REPORT_TIMEOUT,
    REASON_PROXY_REPORT_FAILED,
    REASON_APPLY_FORBIDDEN,
    REASON_APPLY_FAILED,
    REASON_PROGRESS_DEADLINE_EXCEEDED,
    REASON_REPLICAS_UNAVAILABLE,
    REASON_ALLOWED_TOOL_MISSING,
];

/// The `Ready` verdict before it becomes a [`Condition`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Whether the condition is `True`.
    pub ready: bool,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// A sentence for `kubectl describe`.
    pub message: String,
}

impl Readiness {
    /// Readiness from the Deployment as the API server returned it: `True` exactly when its
    /// `Available` condition is `True`.
    pub fn of_deployment(deployment: &Deployment) -> Self {
        let name = deployment.name_any();
        let conditions = deployment
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let find = |type_: &str| {
            conditions
                .iter()
                .find(|c| c.type_.as_deref() == Some(type_))
        };
        let is_true = |c: &k8s_openapi::api::apps::v1::DeploymentCondition| {
            c.status.as_deref() == Some("True")
        };
        let available = find("Available");
        let detail = available
            .and_then(|c| c.message.clone())
            .unwrap_or_else(|| "no Available condition reported yet".to_owned());
        if available.is_some_and(is_true) {
            return Self {
                ready: true,
                reason: REASON_DEPLOYMENT_AVAILABLE,
                message: format!("deployment {name} is available: {detail}"),
            };
        }
        // Progressing=True with reason NewReplicaSetAvailable means the rollout finished; any
        // other Progressing=True means it is still within its deadline.
        let rolling_out = find("Progressing")
            .is_none_or(|c| is_true(c) && c.reason.as_deref() != Some("NewReplicaSetAvailable"));
        let reason = if rolling_out {
            REASON_PROGRESSING
        } else {
            REASON_DEPLOYMENT_UNAVAILABLE
        };
        Self {
            ready: false,
            reason,
            message: format!("deployment {name} is not available: {detail}"),
        }
    }
}

/// One condition before it becomes a `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// One of [`CONDITION_TYPES`].
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// A sentence for `kubectl describe`.
    pub message: String,
}

impl Verdict {
    fn new(type_: &'static str, ok: Option<bool>, reason: &'static str, message: String) -> Self {
        let status = match ok {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        Self {
            type_,
            status,
            reason,
            message,
        }
    }
}

/// Every condition of a served McpUpstream, from its Deployment as the API server returned it
/// and the pods' [`Report`]: `Ready`, `Progressing`, `Degraded`, `UpstreamReady`,
/// `ToolsDiscovered`, `UpstreamExposed`.
pub fn observed(deployment: &Deployment, report: &Report) -> Vec<Verdict> {
    let readiness = Readiness::of_deployment(deployment);
    let ready = ready(&readiness, report);
    let progressing = progressing(deployment);
    let upstream_ready = upstream_ready(report);
    let tools = tools_discovered(&report.proxy);
    let degraded = degraded(deployment, &readiness, &ready, &progressing, &tools);
    let exposed = upstream_exposed(&report.proxy);
    vec![ready, progressing, degraded, upstream_ready, tools, exposed]
}

/// `UpstreamExposed` from the `exposed` field of the proxy's `/upstream` (issue 40, item 3).
pub fn upstream_exposed(proxy: &ProxyReport) -> Verdict {
    let verdict = |ok, reason, message: &str| {
        Verdict::new(CONDITION_UPSTREAM_EXPOSED, ok, reason, message.to_owned())
    };
    let ProxyReport::Answered {
        pod,
        upstream: Some(upstream),
        ..
    } = proxy
    else {
        return verdict(
            None,
            REASON_EXPOSURE_NOT_CHECKED,
            "no proxy reported whether the upstream's port answers on the pod IP",
        );
    };
    match (upstream.exposed, upstream.stdio.is_some()) {
        (Some(true), _) => verdict(
            Some(true),
            REASON_UPSTREAM_PORT_EXPOSED,
            &format!(
                "the upstream's port answers on the pod IP of pod {pod}, not only on 127.0.0.1, \
                 so other pods can call the server past the proxy's authentication, grants, \
                 rate limits and audit; make the server listen on 127.0.0.1 only (for example \
                 a --host 127.0.0.1 flag or HOST=127.0.0.1; see examples/README.md) and keep \
                 spec.networkPolicy.ingress on"
            ),
        ),
        (Some(false), _) => verdict(
            Some(false),
            REASON_LOOPBACK_ONLY,
            &format!("the proxy of pod {pod} reaches the upstream's port on 127.0.0.1 only"),
        ),
        (None, true) => verdict(
            Some(false),
            REASON_NO_UPSTREAM_PORT,
            "a stdio upstream has no port; the proxy reaches it through a Unix socket",
        ),
        (None, false) => verdict(
            None,
            REASON_EXPOSURE_NOT_CHECKED,
            &format!(
                "the proxy of pod {pod} has not checked the upstream's port: the upstream is \
                 not on loopback, or does not listen yet"
            ),
        ),
    }
}

/// Turns a `Degraded=False` verdict in `verdicts` into `Degraded=True` with reason
/// [`REASON_DISRUPTION_BUDGET_BLOCKS_DRAIN`] and `message`; a fault already reported there
/// stays (it is the more urgent one).
pub fn flag_blocked_drain(verdicts: &mut [Verdict], message: String) {
    for verdict in verdicts.iter_mut() {
        if verdict.type_ == CONDITION_DEGRADED && verdict.status == "False" {
            *verdict = Verdict::new(
                CONDITION_DEGRADED,
                Some(true),
                REASON_DISRUPTION_BUDGET_BLOCKS_DRAIN,
                message,
            );
            return;
        }
    }
}

/// `Ready`, `Progressing` and `Degraded` of a spec that cannot be served, all with reason
/// [`REASON_INVALID_SPEC`] and the validation message verbatim.
pub fn invalid(invalid: &InvalidSpec) -> Vec<Verdict> {
    failed(REASON_INVALID_SPEC, &invalid.message)
}

/// `Ready`, `Progressing` and `Degraded` when a child could not be applied: reason
/// [`REASON_APPLY_FORBIDDEN`] for HTTP 403, else [`REASON_APPLY_FAILED`]; `message` says which
/// child and carries the API server's message.
pub fn apply_failed(forbidden: bool, message: &str) -> Vec<Verdict> {
    let reason = if forbidden {
        REASON_APPLY_FORBIDDEN
    } else {
        REASON_APPLY_FAILED
    };
    failed(reason, message)
}

/// `Ready`, `Progressing` and `Degraded` when the child `kind`/`name` exists and is not owned by
/// this McpUpstream: reason [`REASON_NAME_CONFLICT`], a message naming the object and what to do.
pub fn name_conflict(kind: &str, name: &str) -> Vec<Verdict> {
    failed(
        REASON_NAME_CONFLICT,
        &format!(
            "{kind} {name} exists and is not owned by this McpUpstream; \
             rename the McpUpstream or remove the {kind}"
        ),
    )
}

fn failed(reason: &'static str, message: &str) -> Vec<Verdict> {
    vec![
        Verdict::new(CONDITION_READY, Some(false), reason, message.to_owned()),
        Verdict::new(
            CONDITION_PROGRESSING,
            Some(false),
            reason,
            message.to_owned(),
        ),
        Verdict::new(CONDITION_DEGRADED, Some(true), reason, message.to_owned()),
    ]
}

/// `Some(message)` when no pod is ready and the proxy reports a crash-looping stdio child.
fn crash_loop(report: &Report) -> Option<String> {
    if report.pods.iter().any(|pod| pod.ready) {
        return None;
    }
    let ProxyReport::Answered {
        pod,
        upstream: Some(upstream),
        ..
    } = &report.proxy
    else {
        return None;
    };
    let restarts = upstream.crash_loop_restarts()?;
    let last = upstream
        .last_error
        .as_deref()
        .unwrap_or("no error recorded");
    Some(format!(
        "the upstream child of pod {pod} keeps exiting ({restarts} restarts); last: {last}"
    ))
}

/// The reason and message of the first pod that is not ready and whose status says what keeps
/// it from running.
fn pod_blocked(report: &Report) -> Option<(&'static str, String)> {
    report.pods.iter().filter(|pod| !pod.ready).find_map(|pod| {
        let blocked = pod.blocked.as_ref()?;
        let reason = match blocked {
            Blocked::ImagePull { .. } => REASON_IMAGE_PULL_FAILED,
            Blocked::CrashLoop { .. } => REASON_CONTAINER_CRASH_LOOPING,
            Blocked::Unschedulable { .. } => REASON_UNSCHEDULABLE,
        };
        Some((reason, blocked.describe(&pod.name)))
    })
}

fn ready(readiness: &Readiness, report: &Report) -> Verdict {
    let verdict = |ok, reason, message| Verdict::new(CONDITION_READY, Some(ok), reason, message);
    if let Some(message) = crash_loop(report) {
        return verdict(false, REASON_UPSTREAM_CRASH_LOOPING, message);
    }
    if !readiness.ready {
        if let Some((reason, message)) = pod_blocked(report) {
            return verdict(false, reason, message);
        }
        return verdict(false, readiness.reason, readiness.message.clone());
    }
    let proxy = &report.proxy;
    match proxy {
        ProxyReport::Timeout { pod } => verdict(
            false,
            REASON_PROXY_REPORT_TIMEOUT,
            format!(
                "the proxy of pod {pod} did not answer on its admin port within {}s",
                REPORT_TIMEOUT.as_secs()
            ),
        ),
        ProxyReport::Failed { pod, error } => verdict(
            false,
            REASON_PROXY_REPORT_FAILED,
            format!("the proxy of pod {pod} could not be read on its admin port: {error}"),
        ),
        _ => verdict(true, readiness.reason, readiness.message.clone()),
    }
}

fn find<'a>(deployment: &'a Deployment, type_: &str) -> Option<&'a DeploymentCondition> {
    deployment
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
}

fn progressing(deployment: &Deployment) -> Verdict {
    let name = deployment.name_any();
    let verdict =
        |ok, reason, message| Verdict::new(CONDITION_PROGRESSING, Some(ok), reason, message);
    let status = deployment.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation);
    let condition = find(deployment, "Progressing");
    let detail = condition
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "the deployment controller has not reported yet".to_owned());
    if condition.is_some_and(|c| c.status.as_deref() == Some("False")) {
        return verdict(
            false,
            REASON_PROGRESS_DEADLINE_EXCEEDED,
            format!("deployment {name}: {detail}"),
        );
    }
    let complete = observed.is_some()
        && observed >= deployment.metadata.generation
        && condition.is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
    if complete {
        verdict(
            false,
            REASON_ROLLOUT_COMPLETE,
            format!("deployment {name} is rolled out: {detail}"),
        )
    } else {
        verdict(
            true,
            REASON_ROLLING_OUT,
            format!("deployment {name} is rolling out: {detail}"),
        )
    }
}

fn degraded(
    deployment: &Deployment,
    readiness: &Readiness,
    ready: &Verdict,
    progressing: &Verdict,
    tools: &Verdict,
) -> Verdict {
    let verdict = |ok, reason, message| Verdict::new(CONDITION_DEGRADED, Some(ok), reason, message);
    if progressing.reason == REASON_PROGRESS_DEADLINE_EXCEEDED {
        return verdict(true, progressing.reason, progressing.message.clone());
    }
    if tools.reason == REASON_ALLOWED_TOOL_MISSING {
        return verdict(true, tools.reason, tools.message.clone());
    }
    if ready.reason == REASON_UPSTREAM_CRASH_LOOPING || POD_BLOCKED_REASONS.contains(&ready.reason)
    {
        return verdict(true, ready.reason, ready.message.clone());
    }
    if readiness.ready && ready.status != "True" {
        return verdict(true, ready.reason, ready.message.clone());
    }
    let status = deployment.status.as_ref();
    let wanted = deployment.spec.replicas.unwrap_or(1);
    let unavailable = status.and_then(|s| s.unavailable_replicas).unwrap_or(0);
    if readiness.ready && unavailable > 0 {
        return verdict(
            true,
            REASON_REPLICAS_UNAVAILABLE,
            format!("{unavailable} of {wanted} replicas unavailable"),
        );
    }
    verdict(false, REASON_AS_EXPECTED, "no fault observed".to_owned())
}

fn upstream_ready(report: &Report) -> Verdict {
    let verdict =
        |ok, reason, message| Verdict::new(CONDITION_UPSTREAM_READY, Some(ok), reason, message);
    let total = report.pods.len();
    let ready = report.pods.iter().filter(|pod| pod.ready).count();
    if total == 0 {
        return verdict(false, REASON_NO_PODS, "no pod exists yet".to_owned());
    }
    if ready > 0 {
        return verdict(
            true,
            REASON_PODS_READY,
            format!("{ready} of {total} pods ready"),
        );
    }
    if let Some(message) = crash_loop(report) {
        return verdict(false, REASON_UPSTREAM_CRASH_LOOPING, message);
    }
    let why = match &report.proxy {
        ProxyReport::Answered {
            pod,
            not_ready: Some(reason),
            ..
        } => format!("; the proxy of pod {pod} says: {reason}"),
        _ => String::new(),
    };
    verdict(
        false,
        REASON_PODS_NOT_READY,
        format!("0 of {total} pods ready{why}"),
    )
}

fn tools_discovered(proxy: &ProxyReport) -> Verdict {
    let verdict =
        |ok, reason, message| Verdict::new(CONDITION_TOOLS_DISCOVERED, ok, reason, message);
    match proxy {
        ProxyReport::NoPodRunning => verdict(
            None,
            REASON_NO_POD_RUNNING,
            "no pod runs a proxy to ask yet".to_owned(),
        ),
        ProxyReport::Timeout { pod } => verdict(
            None,
            REASON_PROXY_REPORT_TIMEOUT,
            format!(
                "the proxy of pod {pod} did not answer on its admin port within {}s",
                REPORT_TIMEOUT.as_secs()
            ),
        ),
        ProxyReport::Failed { pod, error } => verdict(
            None,
            REASON_PROXY_REPORT_FAILED,
            format!("the proxy of pod {pod} could not be read on its admin port: {error}"),
        ),
        ProxyReport::Answered { tools, .. } if !tools.missing.is_empty() => verdict(
            Some(false),
            REASON_ALLOWED_TOOL_MISSING,
            format!(
                "spec.tools.allow names tools the upstream does not offer: {}",
                tools.missing.join(", ")
            ),
        ),
        ProxyReport::Answered {
            pod,
            not_ready: Some(reason),
            ..
        } => verdict(
            None,
            REASON_PROXY_NOT_READY,
            format!("the proxy of pod {pod} has not listed the tools: {reason}"),
        ),
        ProxyReport::Answered {
            pod,
            tools,
            not_ready: None,
            ..
        } => verdict(
            Some(true),
            REASON_TOOLS_LISTED,
            format!(
                "the proxy of pod {pod} lists {} tools, fingerprint {}",
                tools.count,
                tools.fingerprint.as_deref().unwrap_or("unknown")
            ),
        ),
    }
}

/// The condition of `type_` `upstream` carries now, if any.
pub fn current_condition<'a>(upstream: &'a McpUpstream, type_: &str) -> Option<&'a Condition> {
    upstream
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}
