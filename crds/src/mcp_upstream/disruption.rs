//! `spec.podDisruptionBudget`: an opt-in PodDisruptionBudget for the generated pods (issue 5
//! "API").
//!
//! Not responsible for: rendering it (the operator's `build::pod_disruption_budget`).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// How many of the McpUpstream's pods voluntary disruptions (node drains) must leave running.
/// Exactly one of `minAvailable` and `maxUnavailable`. Present means enabled: the operator
/// creates the PodDisruptionBudget `<name>`; removing the field deletes it.
///
/// The budget must allow at least one disruption at `spec.replicas`, or every `kubectl drain`
/// of a node running one of the pods blocks until someone intervenes. The API server refuses
/// `minAvailable` >= `spec.replicas` (so `{minAvailable: 1}` needs `replicas: 2` or more),
/// `minAvailable: 100%` and `maxUnavailable: 0` (or `0%`). A percentage of `minAvailable`
/// is rounded up to whole pods (`50%` of 1 replica is 1), which the operator reports as
/// `Degraded=True` with reason `DisruptionBudgetBlocksDrain` when it allows no disruption.
///
/// Example: `{minAvailable: 1}` with `replicas: 2`, or `{maxUnavailable: 25%}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.minAvailable) != has(self.maxUnavailable)").message("spec.podDisruptionBudget needs exactly one of minAvailable or maxUnavailable"))]
#[x_kube(validation = Rule::new("!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? self.maxUnavailable > 0 : !self.maxUnavailable.matches('^0+%$'))").message("spec.podDisruptionBudget.maxUnavailable must be above 0 (or 0%): a budget that lets no pod be unavailable never allows a disruption, so node drains block"))]
#[x_kube(validation = Rule::new("!has(self.minAvailable) || type(self.minAvailable) == int || !self.minAvailable.matches('^[0-9]+%$') || int(self.minAvailable.substring(0, size(self.minAvailable) - 1)) < 100").message("spec.podDisruptionBudget.minAvailable must be below 100%: a budget that keeps every pod available never allows a disruption, so node drains block"))]
pub struct PodDisruptionBudgetSpec {
    /// Pods that must stay available, a number (`1`) or a percentage of `replicas` (`50%`,
    /// rounded up to whole pods). A number must be below `spec.replicas` and a percentage below
    /// `100%`, so that a node drain can evict at least one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    /// Pods that may be unavailable at once, a number (`1`) or a percentage of `replicas`
    /// (`25%`, rounded up to whole pods). Must be above `0` (and `0%`), so that a node drain
    /// can evict at least one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}
