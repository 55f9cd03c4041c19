//! One reconcile of one `McpUpstream`: validate -> build -> apply -> update status.
//!
//! Responsible for: running the pipeline under a deadline, turning an invalid spec into
//! `Ready=False`/`InvalidSpec` plus a Warning Event without a hot loop, recording metrics, and
//! the per-object capped exponential backoff used when a reconcile fails transiently.
//! Not responsible for: the shape of objects ([`crate::build`]), watching ([`crate::controller`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use berth_crds::{McpUpstream, McpUpstreamStatus};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

// Defined below this module (issue 17: no cycles); still reachable under their old paths.
pub use crate::error::Error;
pub use crate::settings::RESYNC_INTERVAL;
pub use crate::status::events::EVENT_ACTION;

use crate::FIELD_MANAGER;
use crate::apply::{Applied, apply};
use crate::build::{build, pod_disruption_budget};
use crate::metrics::{Metrics, RESULT_INVALID_SPEC, RESULT_OK, WRITE_EVENT};
use crate::report;
use crate::settings::Settings;
use crate::status::conditions::{
    self, CONDITION_READY, REASON_PROXY_REPORT_FAILED, REASON_PROXY_REPORT_TIMEOUT,
};
use crate::status::{self, Observation, events};
use crate::validate::validate;

/// Longest one reconcile may take before it is abandoned and retried with backoff, so a stuck
/// API call never holds a worker (field case BR-19).
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// First retry delay after a failed reconcile; doubles with each consecutive failure.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry delay after failed reconciles.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// `kind` label of `berth_operator_reconcile_errors_total` for a reconcile whose proxy did not
/// answer (`Ready=False`, reason `ProxyReportTimeout` or `ProxyReportFailed`).
pub const KIND_PROXY_UNANSWERED: &str = "proxy_unanswered";
/// `kind` label of `berth_operator_reconcile_errors_total` for a reconcile stopped by a child
/// name taken by a foreign object (`Ready=False`, reason `NameConflict`).
pub const KIND_NAME_CONFLICT: &str = "name_conflict";
/// Event reason of a Warning for a reconcile that failed transiently.
pub const REASON_RECONCILE_FAILED: &str = "ReconcileFailed";

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    /// Client for applies, status patches and Events.
    pub client: Client,
    /// Publishes Events about McpUpstreams.
    pub recorder: Recorder,
    /// Operator metrics.
    pub metrics: Arc<Metrics>,
    /// Proxy image, cluster domain.
    pub settings: Settings,
    /// What was last applied to each child, so steady state writes nothing.
    pub applied: Applied,
    /// Client for the proxies' admin endpoints ([`report::http_client`]).
    pub http: reqwest::Client,
    backoff: Backoff,
}

impl Context {
    /// A context reporting Events as [`FIELD_MANAGER`] from this host.
    ///
    /// # Errors
    /// When the HTTP client for the proxies cannot be built ([`report::http_client`]).
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self {
            recorder: Recorder::new(client.clone(), Reporter::from(FIELD_MANAGER)),
            client,
            metrics,
            settings,
            applied: Applied::default(),
            http: report::http_client()?,
            backoff: Backoff::default(),
        })
    }
}

/// What a successful reconcile did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Children applied, status written.
    Applied,
    /// The spec cannot be served; status says so.
    InvalidSpec,
    /// Children applied and status written, but the proxy did not answer the operator; retried
    /// with the per-object backoff.
    ProxyUnanswered,
    /// A child's name is taken by an object this McpUpstream does not own; nothing written
    /// but status, retried with the per-object backoff until the conflict is gone.
    NameConflict,
}

/// Reconciles `upstream`: the controller's reconcile callback.
///
/// Returns [`Action::requeue`] after [`Settings::resync_interval`] (default
/// [`RESYNC_INTERVAL`]) when applied, and
/// [`Action::await_change`] for an invalid spec (nothing changes until the user edits it) and for
/// an McpUpstream being deleted (nothing is applied or written: the garbage collector removes
/// the children).
///
/// # Errors
/// [`Error`] for transient failures; [`error_policy`] schedules the retry.
///
/// # Cancellation
/// Safe to drop: every step is an idempotent server-side apply.
pub async fn reconcile(upstream: Arc<McpUpstream>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let name = upstream.name_any();
    let namespace = upstream.namespace().unwrap_or_default();
    if upstream.metadata.deletion_timestamp.is_some() {
        // Being deleted: a foreground deletion keeps the object until the garbage collector
        // has removed its children, and applying them again would fight the collector forever.
        debug!(%name, %namespace, "being deleted, nothing to apply");
        return Ok(Action::await_change());
    }
    let result = tokio::time::timeout(RECONCILE_TIMEOUT, pipeline(&upstream, &ctx))
        .await
        .unwrap_or_else(|_| {
            Err(Error::Timeout {
                name: name.clone(),
                after: RECONCILE_TIMEOUT,
            })
        });
    let elapsed = started.elapsed();
    let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(outcome) => {
            if !matches!(outcome, Outcome::ProxyUnanswered | Outcome::NameConflict) {
                ctx.backoff.reset(&ObjectRef::from_obj(upstream.as_ref()));
            }
            match outcome {
                Outcome::Applied => {
                    ctx.metrics.observe(RESULT_OK, elapsed);
                    debug!(%name, %namespace, elapsed_ms, "reconciled");
                    Ok(Action::requeue(ctx.settings.resync_interval))
                }
                Outcome::InvalidSpec => {
                    ctx.metrics.observe(RESULT_INVALID_SPEC, elapsed);
                    info!(%name, %namespace, elapsed_ms, "spec is invalid, awaiting change");
                    Ok(Action::await_change())
                }
                Outcome::ProxyUnanswered | Outcome::NameConflict => {
                    let (kind, what) = if outcome == Outcome::ProxyUnanswered {
                        (KIND_PROXY_UNANSWERED, "the proxy did not answer")
                    } else {
                        (
                            KIND_NAME_CONFLICT,
                            "a child's name is taken by a foreign object",
                        )
                    };
                    let delay = ctx.backoff.next(ObjectRef::from_obj(upstream.as_ref()));
                    ctx.metrics.observe_error(kind, elapsed);
                    info!(
                        %name, %namespace, elapsed_ms, why = what,
                        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "reconcile incomplete, retrying with backoff"
                    );
                    Ok(Action::requeue(delay))
                }
            }
        }
        Err(err) => {
            ctx.metrics.observe_error(err.kind(), elapsed);
            Err(err)
        }
    }
}

/// The pipeline proper: validate -> build -> apply -> read the pods' report -> update status.
async fn pipeline(upstream: &McpUpstream, ctx: &Context) -> Result<Outcome, Error> {
    let current = upstream.status.clone().unwrap_or_default();
    let config = match validate(upstream) {
        Ok(mut config) => {
            let token = ctx.settings.diagnostics_key.token_sha256(
                &upstream.namespace().unwrap_or_default(),
                &upstream.name_any(),
            );
            config.diagnostics_token_sha256 = Some(token);
            config
        }
        Err(invalid) => {
            // Children already running from an earlier valid spec are left as they are, and so
            // is what the status says about them.
            let observation = Observation {
                verdicts: conditions::invalid(&invalid),
                endpoint: None,
                upstream: current.upstream,
                tools: current.tools,
            };
            write_status(upstream, ctx, observation).await?;
            return Ok(Outcome::InvalidSpec);
        }
    };
    let children = build(upstream, &ctx.settings.proxy_image, &config)?;
    let deployment = match apply(&ctx.client, &ctx.applied, &ctx.metrics, upstream, &children).await
    {
        Ok(deployment) => deployment,
        Err(Error::NameConflict { kind, name }) => {
            // The foreign object is not ours to describe: no endpoint, and what the status
            // said about pods of earlier reconciles stays.
            let observation = Observation {
                verdicts: conditions::name_conflict(kind, &name),
                endpoint: None,
                upstream: current.upstream,
                tools: current.tools,
            };
            write_status(upstream, ctx, observation).await?;
            return Ok(Outcome::NameConflict);
        }
        Err(err) => {
            report_apply_failure(upstream, ctx, &err, current).await;
            return Err(err);
        }
    };
    let endpoint = status::endpoint(
        &upstream.name_any(),
        &upstream.namespace().unwrap_or_default(),
        &ctx.settings.cluster_domain,
        upstream.spec.proxy.port,
    );
    let report = report::read(
        &ctx.client,
        &ctx.http,
        upstream,
        &deployment,
        &ctx.settings.diagnostics_key,
    )
    .await?;
    let mut verdicts = conditions::observed(&deployment, &report);
    if let Some(message) = pod_disruption_budget::blocks_drain(&upstream.spec) {
        conditions::flag_blocked_drain(&mut verdicts, message);
    }
    let unverified = verdicts.iter().any(|v| {
        v.type_ == CONDITION_READY
            && [REASON_PROXY_REPORT_TIMEOUT, REASON_PROXY_REPORT_FAILED].contains(&v.reason)
    });
    let observation = Observation {
        verdicts,
        endpoint: Some(endpoint),
        upstream: status::upstream_status(upstream, &report),
        tools: status::tools_status(&report),
    };
    write_status(upstream, ctx, observation).await?;
    Ok(if unverified {
        Outcome::ProxyUnanswered
    } else {
        Outcome::Applied
    })
}

/// Reports a child the API server refused to apply (an RBAC gap is the usual cause, field case
/// BR-32): `Ready=False` with reason `ApplyForbidden` (HTTP 403) or `ApplyFailed` and the API
/// server's message, plus the transition's Warning Event. Best effort: a status that cannot be
/// written either is logged, and the apply error is what the caller returns.
async fn report_apply_failure(
    upstream: &McpUpstream,
    ctx: &Context,
    err: &Error,
    current: McpUpstreamStatus,
) {
    let Error::Apply { kind, name, source } = err else {
        return;
    };
    let forbidden = matches!(source, kube::Error::Api(status) if status.code == 403);
    let detail = match source {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    let observation = Observation {
        verdicts: conditions::apply_failed(
            forbidden,
            &format!("failed to apply {kind} {name}: {detail}"),
        ),
        endpoint: current.endpoint,
        upstream: current.upstream,
        tools: current.tools,
    };
    if let Err(status_err) = write_status(upstream, ctx, observation).await {
        warn!(
            name = %upstream.name_any(),
            error = %error_chain(&status_err),
            "failed to report the apply failure in status"
        );
    }
}

/// Writes the status `observation` describes (no write when it is already there) and then
/// publishes an Event per condition transition ([`events::transitions`]).
async fn write_status(
    upstream: &McpUpstream,
    ctx: &Context,
    observation: Observation,
) -> Result<(), Error> {
    let desired = status::desired(upstream, observation, Timestamp::now());
    let transitions = events::transitions(upstream, &desired);
    status::patch(&ctx.client, &ctx.metrics, upstream, &desired).await?;
    for event in transitions {
        publish(&ctx.recorder, &ctx.metrics, upstream, event).await;
    }
    Ok(())
}

/// Publishes `event` about `upstream`, counting the write; a failure is logged, never fatal.
async fn publish(recorder: &Recorder, metrics: &Metrics, upstream: &McpUpstream, event: Event) {
    metrics.count_write(WRITE_EVENT);
    if let Err(err) = recorder.publish(&event, &upstream.object_ref(&())).await {
        warn!(name = %upstream.name_any(), error = %err, "failed to publish event");
    }
}

/// The controller's error policy: retry `upstream` after a capped exponential backoff
/// ([`BACKOFF_INITIAL`] doubling to [`BACKOFF_MAX`]) counted per object, and publish a Warning
/// Event carrying the error.
pub fn error_policy(upstream: Arc<McpUpstream>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.next(ObjectRef::from_obj(upstream.as_ref()));
    warn!(
        name = %upstream.name_any(),
        namespace = %upstream.namespace().unwrap_or_default(),
        kind = error.kind(),
        error = %error_chain(error),
        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        "reconcile failed"
    );
    let event = Event {
        type_: EventType::Warning,
        reason: REASON_RECONCILE_FAILED.to_owned(),
        note: Some(format!("{} ({})", error_chain(error), error.kind())),
        action: EVENT_ACTION.to_owned(),
        secondary: None,
    };
    tokio::spawn(async move { publish(&ctx.recorder, &ctx.metrics, &upstream, event).await });
    Action::requeue(delay)
}

/// `error` and its sources, joined by `": "`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Consecutive failures per object, for [`error_policy`]'s delay.
#[derive(Debug, Default)]
struct Backoff {
    failures: Mutex<HashMap<ObjectRef<McpUpstream>, u32>>,
}

impl Backoff {
    /// Counts one more failure of `key` and returns how long to wait before retrying it.
    fn next(&self, key: ObjectRef<McpUpstream>) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        backoff_delay(*count)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    fn reset(&self, key: &ObjectRef<McpUpstream>) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// Delay before the retry that follows `failures` consecutive failures (at least 1).
fn backoff_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    BACKOFF_INITIAL
        .saturating_mul(1_u32 << doublings)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests;
