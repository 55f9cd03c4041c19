//! Step 4 of a reconcile: what the McpUpstream's `status` says, and writing it.
//!
//! Responsible for: the `Ready` condition (its reasons are wire vocabulary, constants below),
//! `observedGeneration`, `endpoint`, keeping `lastTransitionTime` when the condition's status
//! does not change, and the server-side apply of the status subresource. Only the `Ready` entry
//! of `conditions` is owned here; conditions of other types written by other field managers are
//! left alone (the list is a map keyed by `type`).

use berth_crds::{MCP_PATH, McpUpstream, McpUpstreamStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::FIELD_MANAGER;
use crate::metrics::{Metrics, WRITE_MCP_UPSTREAM_STATUS};
use crate::reconcile::Error;
use crate::validate::InvalidSpec;

/// Condition type: the MCP endpoint is served by at least one ready pod.
pub const CONDITION_READY: &str = "Ready";
/// `Ready=True`: the Deployment reports `Available=True`.
pub const REASON_DEPLOYMENT_AVAILABLE: &str = "DeploymentAvailable";
/// `Ready=False`: a rollout is under way and within its progress deadline (or the deployment
/// controller has not reported yet).
pub const REASON_PROGRESSING: &str = "Progressing";
/// `Ready=False`: the Deployment is not available and no rollout is making progress.
pub const REASON_DEPLOYMENT_UNAVAILABLE: &str = "DeploymentUnavailable";
/// `Ready=False`: the spec cannot be served; the message names the field.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

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
    /// `Ready=False`, reason [`REASON_INVALID_SPEC`], the validation message verbatim.
    pub fn invalid(invalid: &InvalidSpec) -> Self {
        Self {
            ready: false,
            reason: REASON_INVALID_SPEC,
            message: invalid.message.clone(),
        }
    }

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

/// In-cluster URL of the proxy of the McpUpstream `name` in `namespace` whose Service serves
/// `port` (`spec.proxy.port`), e.g. `http://weather.team-a.svc.cluster.local:8080/mcp`.
pub fn endpoint(name: &str, namespace: &str, cluster_domain: &str, port: i32) -> String {
    format!("http://{name}.{namespace}.svc.{cluster_domain}:{port}{MCP_PATH}")
}

/// The status to write for `upstream`: its current generation as `observedGeneration`, the
/// `Ready` condition from `readiness`, and `endpoint`.
///
/// `lastTransitionTime` is kept from the current `Ready` condition when its status is unchanged,
/// otherwise set to `now`.
pub fn desired(
    upstream: &McpUpstream,
    readiness: &Readiness,
    endpoint: Option<String>,
    now: Timestamp,
) -> McpUpstreamStatus {
    let generation = upstream.metadata.generation;
    let status = if readiness.ready { "True" } else { "False" };
    let last_transition_time = current_ready(upstream)
        .filter(|c| c.status == status)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    McpUpstreamStatus {
        observed_generation: generation,
        conditions: vec![Condition {
            type_: CONDITION_READY.to_owned(),
            status: status.to_owned(),
            reason: readiness.reason.to_owned(),
            message: readiness.message.clone(),
            observed_generation: generation,
            last_transition_time,
        }],
        endpoint,
    }
}

/// The `Ready` condition `upstream` carries now, if any.
pub fn current_ready(upstream: &McpUpstream) -> Option<&Condition> {
    upstream
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
}

/// Whether `upstream` already carries every field of `status` the operator owns:
/// `observedGeneration`, `endpoint` and the `Ready` condition (conditions of other types are
/// not the operator's).
pub fn is_current(upstream: &McpUpstream, status: &McpUpstreamStatus) -> bool {
    let Some(current) = upstream.status.as_ref() else {
        return false;
    };
    let desired_ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY);
    current.observed_generation == status.observed_generation
        && current.endpoint == status.endpoint
        && current_ready(upstream) == desired_ready
}

/// Writes `status` to the status subresource of `upstream` by server-side apply (field manager
/// [`FIELD_MANAGER`], forced), counting the write in `metrics`. Writes nothing when `upstream`
/// already carries it ([`is_current`]), so a steady-state reconcile costs no write.
///
/// An McpUpstream deleted meanwhile (HTTP 404) is not an error: nothing is left to report on.
///
/// # Errors
/// [`Error::PatchStatus`] when the API server refuses the patch for any other reason.
pub async fn patch(
    client: &Client,
    metrics: &Metrics,
    upstream: &McpUpstream,
    status: &McpUpstreamStatus,
) -> Result<(), Error> {
    if is_current(upstream, status) {
        return Ok(());
    }
    let name = upstream.name_any();
    let api: Api<McpUpstream> = match upstream.namespace() {
        Some(namespace) => Api::namespaced(client.clone(), &namespace),
        None => Api::default_namespaced(client.clone()),
    };
    let body = serde_json::json!({
        "apiVersion": McpUpstream::api_version(&()),
        "kind": McpUpstream::kind(&()),
        "status": status,
    });
    metrics.count_write(WRITE_MCP_UPSTREAM_STATUS);
    match api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted while this reconcile ran: there is no status left to report.
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::debug!(%name, "mcpupstream gone before its status was written");
            Ok(())
        }
        Err(source) => Err(Error::PatchStatus { name, source }),
    }
}

#[cfg(test)]
mod tests;
