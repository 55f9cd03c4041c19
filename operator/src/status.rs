//! Step 4 of a reconcile: what the McpUpstream's `status` says, and writing it.
//!
//! Responsible for: the conditions `Ready`, `Progressing`, `Degraded`, `UpstreamReady` and
//! `ToolsDiscovered` ([`conditions`]; types and reasons are wire vocabulary), `observedGeneration`,
//! `endpoint`, `upstream` (pinned image vs. running image ID) and `tools`, keeping
//! `lastTransitionTime` when a condition's status does not change, the server-side apply of the
//! status subresource, and the Events of condition transitions ([`events`]). Only the condition
//! types in [`CONDITION_TYPES`] are owned here; conditions of other types written by other field
//! managers are left alone (the list is a map keyed by `type`).

pub mod conditions;
pub mod events;

use berth_crds::{MCP_PATH, McpUpstream, McpUpstreamStatus, ToolsStatus, UpstreamStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::metrics::{Metrics, WRITE_MCP_UPSTREAM_STATUS};
use crate::report::{self, ProxyReport, Report};

// Readiness, its reasons and `current_condition` live in `conditions`, which `events` and
// `metrics` use too (issue 17); still reachable under their old paths.
pub use conditions::{
    CONDITION_READY, CONDITION_TYPES, REASON_DEPLOYMENT_AVAILABLE, REASON_DEPLOYMENT_UNAVAILABLE,
    REASON_INVALID_SPEC, REASON_PROGRESSING, Readiness, Verdict, current_condition,
};

/// In-cluster URL of the proxy of the McpUpstream `name` in `namespace` whose Service serves
/// `port` (`spec.proxy.port`), e.g. `http://weather.team-a.svc.cluster.local:8080/mcp`.
pub fn endpoint(name: &str, namespace: &str, cluster_domain: &str, port: i32) -> String {
    format!("http://{name}.{namespace}.svc.{cluster_domain}:{port}{MCP_PATH}")
}

/// Everything the status reports besides `observedGeneration`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// The conditions to write ([`conditions::observed`], [`conditions::invalid`] or
    /// [`conditions::apply_failed`]). Owned condition types left out keep their current value.
    pub verdicts: Vec<Verdict>,
    /// `status.endpoint`.
    pub endpoint: Option<String>,
    /// `status.upstream`.
    pub upstream: Option<UpstreamStatus>,
    /// `status.tools`.
    pub tools: Option<ToolsStatus>,
}

/// `status.upstream` of `upstream` from its pods: the pinned image, the running image ID and
/// whether their digests match; `None` when no pod reports an image ID.
pub fn upstream_status(upstream: &McpUpstream, report: &Report) -> Option<UpstreamStatus> {
    let image_id = report::upstream_image_id(&report.pods)?;
    let image = &upstream.spec.upstream.image;
    let digest_matches = match (report::digest(image), report::digest(image_id)) {
        (Some(pinned), Some(running)) => Some(pinned == running),
        _ => None,
    };
    Some(UpstreamStatus {
        image: Some(image.clone()),
        image_id: Some(image_id.to_owned()),
        digest_matches,
    })
}

/// `status.tools` from what the proxy answered, once it listed the tools (it is ready) or
/// found allowed tools missing; `None` otherwise.
pub fn tools_status(report: &Report) -> Option<ToolsStatus> {
    match &report.proxy {
        ProxyReport::Answered {
            tools, not_ready, ..
        } if not_ready.is_none() || !tools.missing.is_empty() => Some(ToolsStatus {
            count: tools.count,
            fingerprint: tools.fingerprint.clone(),
            missing: tools.missing.clone(),
        }),
        _ => None,
    }
}

/// The status to write for `upstream`: its current generation as `observedGeneration` (also on
/// each condition) and `observation`.
///
/// A condition's `lastTransitionTime` is kept when its status is unchanged, otherwise set to
/// `now`. Owned condition types `observation` leaves out are copied from the current status.
pub fn desired(
    upstream: &McpUpstream,
    observation: Observation,
    now: Timestamp,
) -> McpUpstreamStatus {
    let generation = upstream.metadata.generation;
    let mut conditions: Vec<Condition> = observation
        .verdicts
        .iter()
        .map(|verdict| {
            let last_transition_time = current_condition(upstream, verdict.type_)
                .filter(|c| c.status == verdict.status)
                .map_or(Time(now), |c| c.last_transition_time.clone());
            Condition {
                type_: verdict.type_.to_owned(),
                status: verdict.status.to_owned(),
                reason: verdict.reason.to_owned(),
                message: verdict.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect();
    for type_ in CONDITION_TYPES {
        if conditions.iter().all(|c| c.type_ != type_)
            && let Some(current) = current_condition(upstream, type_)
        {
            conditions.push(current.clone());
        }
    }
    McpUpstreamStatus {
        observed_generation: generation,
        conditions,
        endpoint: observation.endpoint,
        upstream: observation.upstream,
        tools: observation.tools,
        // Written once, by its own merge patch right after the Secret is created
        // (`crate::apply`), never by this apply: a stale copy of the McpUpstream must not
        // remove it.
        session_key_secret_uid: None,
    }
}

/// The `Ready` condition `upstream` carries now, if any.
pub fn current_ready(upstream: &McpUpstream) -> Option<&Condition> {
    current_condition(upstream, CONDITION_READY)
}

/// Whether `upstream` already carries every field of `status` the operator owns:
/// `observedGeneration`, `endpoint`, `upstream`, `tools` and the conditions of
/// [`CONDITION_TYPES`] (conditions of other types are not the operator's).
pub fn is_current(upstream: &McpUpstream, status: &McpUpstreamStatus) -> bool {
    let Some(current) = upstream.status.as_ref() else {
        return false;
    };
    let desired = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    current.observed_generation == status.observed_generation
        && current.endpoint == status.endpoint
        && current.upstream == status.upstream
        && current.tools == status.tools
        && CONDITION_TYPES
            .iter()
            .all(|type_| current_condition(upstream, type_) == desired(type_))
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
