//! Why the children of an McpUpstream could not be built: [`BuildError`], the one error of
//! [`crate::build`] and its steps.
//!
//! Not responsible for: specs that cannot be served (that is [`crate::validate::InvalidSpec`]).

/// An McpUpstream whose children cannot be built. Never caused by the spec itself (that is
/// [`crate::validate::InvalidSpec`]); only by an object that did not come from the API server.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The object lacks metadata the API server always sets (namespace, uid).
    #[error("mcpupstream {name} has no metadata.{field}")]
    MissingMetadata {
        /// The object's name, possibly empty.
        name: String,
        /// The absent field.
        field: &'static str,
    },
    /// The proxy config did not serialize to YAML.
    #[error("failed to render proxy config of {name}")]
    RenderConfig {
        /// The McpUpstream's name.
        name: String,
        /// The serializer's error.
        #[source]
        source: serde_yaml::Error,
    },
    /// No random bytes for a new session key.
    #[error("failed to generate the session key of {name}")]
    GenerateSessionKey {
        /// Name of the Secret.
        name: String,
        /// The random source's error.
        #[source]
        source: getrandom::Error,
    },
}

impl BuildError {
    /// Bounded label for metrics and Event reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingMetadata { .. } => "missing_metadata",
            Self::RenderConfig { .. } => "render_config",
            Self::GenerateSessionKey { .. } => "generate_session_key",
        }
    }
}
