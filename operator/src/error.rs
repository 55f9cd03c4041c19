//! The error of a reconcile that failed for a reason worth retrying, below every step that
//! returns it: [`crate::apply`], [`crate::status`] and [`crate::reconcile`] return it,
//! [`crate::controller`] retries on it and [`crate::metrics`] counts it by [`Error::kind`].
//!
//! Responsible for: the variants (one per failed operation) and their bounded kinds, and the
//! errors of the steps it wraps ([`BuildError`] of [`crate::build`], [`ListPodsError`] of
//! [`crate::report`]), so the error sits below every step and uses nothing of the crate. Not
//! responsible for: what to do about one ([`crate::reconcile::error_policy`]); an invalid spec is
//! not an error (it becomes a condition, see [`crate::validate`]).

mod build;
mod report;

pub use build::BuildError;
pub use report::ListPodsError;

use std::time::Duration;

/// A reconcile that failed for a reason worth retrying.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The children could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The API server refused the server-side apply of a child.
    #[error("failed to apply {kind} {name}")]
    Apply {
        /// Kind of the child, e.g. `Deployment`.
        kind: &'static str,
        /// Name of the child.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The name of a child is taken by an object this McpUpstream does not control (issue 40):
    /// nothing was written; the reconcile reports `Ready=False`/`NameConflict` and retries
    /// with backoff.
    #[error("{kind} {name} exists and is not owned by this McpUpstream")]
    NameConflict {
        /// Kind of the child, e.g. `Service`.
        kind: &'static str,
        /// Name of the child.
        name: String,
    },
    /// The API server refused the status update.
    #[error("failed to patch status of {name}")]
    PatchStatus {
        /// Name of the McpUpstream.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused to list the McpUpstream's pods.
    #[error(transparent)]
    ListPods(#[from] ListPodsError),
    /// The reconcile did not finish within
    /// [`RECONCILE_TIMEOUT`](crate::reconcile::RECONCILE_TIMEOUT).
    #[error("reconcile of {name} did not finish within {after:?}")]
    Timeout {
        /// Name of the McpUpstream.
        name: String,
        /// The deadline that passed.
        after: Duration,
    },
}

impl Error {
    /// Bounded label for metrics and Event notes; never derived from error text.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Build(err) => err.kind(),
            Self::Apply { .. } => "apply",
            Self::NameConflict { .. } => "name_conflict",
            Self::PatchStatus { .. } => "patch_status",
            Self::ListPods(_) => "list_pods",
            Self::Timeout { .. } => "timeout",
        }
    }
}
