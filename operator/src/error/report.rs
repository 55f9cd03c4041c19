//! Why the pods of an McpUpstream could not be read: [`ListPodsError`], the one error of
//! [`crate::report::read`].
//!
//! Not responsible for: a proxy that does not answer (no error: a
//! [`ProxyReport`](crate::report::ProxyReport) that says so).

/// Reading the pods failed.
#[derive(Debug, thiserror::Error)]
#[error("failed to list pods of {name}")]
pub struct ListPodsError {
    /// Name of the McpUpstream.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}
