//! Who may reach the MCP endpoint: a static bearer token, or an OAuth 2.1 resource server that
//! validates JWT access tokens (issue 5, issue 15). The front (`front::mcp::auth`) asks this module
//! and turns its answer into HTTP; nothing here knows about routes.
//!
//! Module map: [`bearer`] (the static token), [`resource_server`] (token validation),
//! [`grants`] (which tools each caller may use),
//! [`jwks`] (the authorization server's keys, discovered and cached), [`principal`] (the
//! caller a token names). Its metrics are in `crate::observe::metrics::auth`.
//!
//! Not responsible for: upstream credentials (the proxy's own `upstream.headers`); the client's
//! token never goes upstream.

pub mod bearer;
pub mod grants;
pub mod jwks;
pub mod principal;
pub mod resource_server;

use std::sync::Arc;

use berth_crds::DownstreamAuth as AuthConfig;

pub use crate::observe::metrics::auth::AuthMetrics;
pub use bearer::BearerToken;
pub use principal::Principal;
pub use resource_server::{Rejection, ResourceServer};

/// How clients authenticate, as configured by `downstreamAuth`.
pub enum DownstreamAuth {
    /// Every request must carry this static token.
    Bearer(BearerToken),
    /// Every request must carry an access token this resource server accepts.
    OAuth(Arc<ResourceServer>),
}

/// A `downstreamAuth` the proxy cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// The variable `bearerTokenEnv` names is unset or blank.
    #[error("environment variable {0} (downstreamAuth.bearerTokenEnv) is unset or empty")]
    Token(String),
    /// The OAuth settings are unusable.
    #[error("{0}")]
    OAuth(String),
}

impl DownstreamAuth {
    /// The authentication `config` asks for, reading the static token through `env`; an
    /// OAuth resource server refuses tokens longer than `max_token_bytes` before parsing them
    /// (`limits.maxTokenBytes`, issue 39).
    ///
    /// # Errors
    /// [`AuthConfigError`] naming the field.
    pub fn from_config(
        config: &AuthConfig,
        env: &dyn Fn(&str) -> Option<String>,
        metrics: &AuthMetrics,
        max_token_bytes: usize,
    ) -> Result<Self, AuthConfigError> {
        if let Some(oauth) = &config.oauth {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| AuthConfigError::OAuth(format!("oauth: HTTP client: {e}")))?;
            let server = ResourceServer::new(oauth, client, metrics.clone())
                .map_err(AuthConfigError::OAuth)?
                .with_max_token_bytes(max_token_bytes);
            return Ok(Self::OAuth(Arc::new(server)));
        }
        let var = config.bearer_token_env.clone().unwrap_or_default();
        env(&var)
            .as_deref()
            .and_then(BearerToken::new)
            .map(Self::Bearer)
            .ok_or(AuthConfigError::Token(var))
    }
}

/// Fetches the authorization server's keys at start and every `jwksRefresh`, until `stop`
/// fires.
pub async fn refresh_keys(server: Arc<ResourceServer>, stop: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = server.refresh_keys() => {}
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(server.refresh_interval()) => {}
        }
    }
}
