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
/// Example: `{minAvailable: 1}` or `{maxUnavailable: 25%}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.minAvailable) != has(self.maxUnavailable)").message("spec.podDisruptionBudget needs exactly one of minAvailable or maxUnavailable"))]
pub struct PodDisruptionBudgetSpec {
    /// Pods that must stay available, a number (`1`) or a percentage of `replicas` (`50%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    /// Pods that may be unavailable at once, a number (`1`) or a percentage (`25%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}
