//! Label keys and values the operator puts on every object it owns, and the selector that ties a
//! Service and a Deployment to their pods.
//!
//! Not responsible for: annotations on the pod template (see [`crate::build`]).

use std::collections::BTreeMap;

/// `app.kubernetes.io/name`: always [`APP_NAME`].
pub const NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`: the McpUpstream's name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/managed-by`: always [`crate::FIELD_MANAGER`].
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `berth.dev/mcpupstream`: the McpUpstream's name.
pub const MCP_UPSTREAM: &str = "berth.dev/mcpupstream";

/// Value of [`NAME`] on every owned object.
pub const APP_NAME: &str = "berth-proxy";

/// Label selector (in `key=value` form) matching every object this operator manages; the
/// controller watches owned objects through it.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY}={}", crate::FIELD_MANAGER)
}

/// All labels of the objects owned by the McpUpstream named `name`.
pub fn labels(name: &str) -> BTreeMap<String, String> {
    let mut labels = selector(name);
    labels.insert(MANAGED_BY.to_owned(), crate::FIELD_MANAGER.to_owned());
    labels.insert(MCP_UPSTREAM.to_owned(), name.to_owned());
    labels
}

/// The labels that select the pods of the McpUpstream named `name` (Deployment selector and
/// Service selector). Kept minimal because a Deployment's selector is immutable.
pub fn selector(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME.to_owned(), APP_NAME.to_owned()),
        (INSTANCE.to_owned(), name.to_owned()),
    ])
}
