//! [`ProxyConfigError`], the one error of the proxy configuration, and reading a duration field
//! into it (naming the field).
//!
//! Not responsible for: which rule a config breaks (each settings module checks its own fields,
//! [`crate::ProxyConfig::check`] the rules across them).

use std::time::Duration;

use crate::duration::{DurationError, DurationString};
use crate::transport::Transport;

/// A [`ProxyConfig`](crate::ProxyConfig) that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    /// The text is not valid YAML for [`ProxyConfig`](crate::ProxyConfig).
    #[error("failed to parse proxy config")]
    Parse(#[source] serde_yaml::Error),
    /// A key the format does not have, at any depth (a typo would otherwise silently fall back to
    /// a default).
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// A duration field does not parse.
    #[error("invalid {field}")]
    Duration {
        /// Dotted path of the field, e.g. `timeouts.call`.
        field: &'static str,
        /// What was wrong with it.
        #[source]
        source: DurationError,
    },
    /// The transport needs a field that is absent.
    #[error("{field} is required when upstream.transport is {transport:?}")]
    Missing {
        /// Dotted path of the missing field.
        field: &'static str,
        /// The configured transport.
        transport: Transport,
    },
    /// An upstream header has no value (neither or both of `value`/`valueEnv`, or the variable
    /// is unset).
    #[error(
        "upstream header {0:?} needs exactly one of value or valueEnv, and valueEnv must be set"
    )]
    Header(String),
    /// A number outside its range.
    #[error("{field} must be {min}-{max}, got {value}")]
    OutOfRange {
        /// Dotted path of the field, e.g. `session.maxSessions`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// The tool policy is malformed.
    #[error("invalid tools policy: {0}")]
    Tools(crate::tool_policy::PolicyFinding),
    /// `downstreamAuth` sets both or neither of `bearerTokenEnv` and `oauth`, or an `oauth`
    /// field is unusable.
    #[error("invalid downstreamAuth: {0}")]
    DownstreamAuth(String),
    /// `tools.grants` without `downstreamAuth.oauth`: there are no claims to match.
    #[error(
        "tools.grants needs downstreamAuth.oauth: grants match the claims of OAuth access tokens"
    )]
    GrantsNeedOAuth,
    /// `tools.readOnly` or a read-only grant with `toolsProbe.policy: Never`: whether a tool is
    /// read-only is learned from the proxy's own listing, which `Never` never makes.
    #[error(
        "toolsProbe.policy Never cannot serve tools.readOnly or a readOnly grant: readOnlyHint comes from the proxy's own tool listing"
    )]
    ReadOnlyNeedsProbe,
    /// `diagnosticsTokenSha256` is not 64 lowercase hex digits.
    #[error("diagnosticsTokenSha256 must be 64 lowercase hex digits (a SHA-256)")]
    DiagnosticsToken,
    /// The transport is declared in the API but this proxy build does not serve it yet.
    #[error("upstream.transport {0:?} is not supported by this proxy version")]
    UnsupportedTransport(Transport),
}

/// [`parse_field`], and more than zero: a zero connect budget never completes a handshake, a
/// zero idle timeout ends every session at once, and a zero probe interval lists tools in a hot
/// loop.
pub(super) fn parse_positive(
    field: &'static str,
    value: &DurationString,
) -> Result<Duration, ProxyConfigError> {
    let parsed = parse_field(field, value)?;
    if parsed.is_zero() {
        return Err(ProxyConfigError::Duration {
            field,
            source: DurationError {
                value: value.0.clone(),
                reason: "must be more than 0s",
            },
        });
    }
    Ok(parsed)
}

pub(super) fn parse_field(
    field: &'static str,
    value: &DurationString,
) -> Result<Duration, ProxyConfigError> {
    value
        .to_duration()
        .map_err(|source| ProxyConfigError::Duration { field, source })
}
