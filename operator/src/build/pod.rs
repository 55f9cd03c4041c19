//! `spec.pod` merged into the pod template: scheduling fields and extra metadata.
//!
//! The operator's own labels (the selector the Deployment and Service use) and annotations
//! (the config hash) always win over the user's; the CRD already rejects those keys, so the
//! merge order here is a second guard, not the first. Not responsible for: containers
//! ([`super::deployment`]).

use std::collections::BTreeMap;

use berth_crds::PodOverrides;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Pod-template metadata: the user's `labels` and `annotations` overlaid with the operator's
/// `labels` and `annotations` (the operator's values win on a shared key).
pub(super) fn template_metadata(
    overrides: &PodOverrides,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    let overlay = |user: &BTreeMap<String, String>, own: BTreeMap<String, String>| {
        let mut merged = user.clone();
        merged.extend(own);
        merged
    };
    ObjectMeta {
        labels: Some(overlay(&overrides.labels, labels)),
        annotations: Some(overlay(&overrides.annotations, annotations)),
        ..ObjectMeta::default()
    }
}

/// `pod` with the scheduling overrides set: nodeSelector, tolerations, affinity,
/// priorityClassName, serviceAccountName and imagePullSecrets. Unset overrides leave the field
/// unset (the Kubernetes default).
pub(super) fn with_overrides(pod: PodSpec, overrides: &PodOverrides) -> PodSpec {
    PodSpec {
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        affinity: overrides.affinity.clone(),
        priority_class_name: overrides.priority_class_name.clone(),
        service_account_name: overrides.service_account_name.clone(),
        image_pull_secrets: (!overrides.image_pull_secrets.is_empty())
            .then(|| overrides.image_pull_secrets.clone()),
        ..pod
    }
}
