//! The optional PodDisruptionBudget `<name>` (`spec.podDisruptionBudget`).
//!
//! Not responsible for: deleting it when removed from the spec ([`crate::apply`] does that).

use berth_crds::McpUpstreamSpec;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::owner::Owner;
use crate::labels;

/// The PodDisruptionBudget of `owner` selecting its pods when `spec.podDisruptionBudget` is
/// set, else `None`.
pub(super) fn pod_disruption_budget(
    owner: &Owner,
    spec: &McpUpstreamSpec,
) -> Option<PodDisruptionBudget> {
    let budget = spec.pod_disruption_budget.as_ref()?;
    Some(PodDisruptionBudget {
        metadata: owner.child_metadata(owner.name.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: budget.min_available.clone(),
            max_unavailable: budget.max_unavailable.clone(),
            selector: Some(LabelSelector {
                match_labels: Some(labels::selector(&owner.name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}
