//! The optional PodDisruptionBudget `<name>` (`spec.podDisruptionBudget`).
//!
//! Also judges whether a budget can ever allow a disruption ([`blocks_drain`]).
//!
//! Not responsible for: deleting it when removed from the spec ([`crate::apply`] does that).

use berth_crds::McpUpstreamSpec;
use berth_crds::PodDisruptionBudgetSpec as PodDisruptionBudgetSpecOf;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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

/// Disruptions the budget of `spec` allows while all `spec.replicas` pods are healthy, counted
/// as the disruption controller does (a percentage is of `replicas`, rounded up to whole pods);
/// `None` without a budget or with a value that is not a number or `<digits>%`.
pub fn disruptions_allowed(spec: &McpUpstreamSpec) -> Option<i64> {
    let budget = spec.pod_disruption_budget.as_ref()?;
    let replicas = i64::from(spec.replicas);
    let pods = |value: &IntOrString| match value {
        IntOrString::Int(n) => Some(i64::from(*n)),
        IntOrString::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            // Rounded up, as `GetScaledValueFromIntOrPercent(.., roundUp: true)`.
            Some((replicas.saturating_mul(percent) + 99) / 100)
        }
    };
    match (&budget.min_available, &budget.max_unavailable) {
        (Some(min), _) => Some(replicas - pods(min)?),
        (None, Some(max)) => pods(max),
        (None, None) => None,
    }
}

/// `Some(message)` when the budget of `spec` never allows a disruption at `spec.replicas`, so
/// every node drain would block. The API server refuses the plain cases (CEL on the CRD); this
/// catches a percentage that rounds up to every replica, e.g. `minAvailable: 50%` of 1.
pub fn blocks_drain(spec: &McpUpstreamSpec) -> Option<String> {
    let allowed = disruptions_allowed(spec)?;
    if allowed > 0 {
        return None;
    }
    let (field, value) = match spec.pod_disruption_budget.as_ref()? {
        PodDisruptionBudgetSpecOf {
            min_available: Some(min),
            ..
        } => ("minAvailable", min),
        PodDisruptionBudgetSpecOf {
            max_unavailable: Some(max),
            ..
        } => ("maxUnavailable", max),
        _ => return None,
    };
    let value = match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(text) => text.clone(),
    };
    Some(format!(
        "spec.podDisruptionBudget.{field} {value} with {} replicas never allows a disruption, \
         so node drains block; lower {field} or raise spec.replicas",
        spec.replicas
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(replicas: i32, budget: &str) -> McpUpstreamSpec {
        let mut spec: McpUpstreamSpec = serde_yaml::from_str(
            "upstream: {image: 'r.example/s@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'}",
        )
        .expect("spec");
        spec.replicas = replicas;
        spec.pod_disruption_budget = Some(serde_yaml::from_str(budget).expect("budget"));
        spec
    }

    #[test]
    fn disruptions_allowed_rounds_percentages_up_like_the_disruption_controller() {
        let cases = [
            (1, "{minAvailable: 50%}", 0),
            (3, "{minAvailable: 50%}", 1),
            (2, "{minAvailable: 1}", 1),
            (1, "{minAvailable: 1}", 0),
            (4, "{maxUnavailable: 10%}", 1),
            (4, "{maxUnavailable: 0%}", 0),
            (4, "{maxUnavailable: 2}", 2),
        ];
        for (replicas, budget, allowed) in cases {
            assert_eq!(
                disruptions_allowed(&spec(replicas, budget)),
                Some(allowed),
                "{replicas} replicas, {budget}"
            );
        }
    }

    #[test]
    fn blocks_drain_percentage_of_one_replica_names_the_field() {
        assert_eq!(
            blocks_drain(&spec(1, "{minAvailable: 50%}")).as_deref(),
            Some(
                "spec.podDisruptionBudget.minAvailable 50% with 1 replicas never allows a \
                 disruption, so node drains block; lower minAvailable or raise spec.replicas"
            )
        );
        assert_eq!(blocks_drain(&spec(3, "{minAvailable: 50%}")), None);
    }
}
