//! Step 1 of a reconcile: decide whether an `McpUpstream` can be served, without touching the
//! cluster.
//!
//! Responsible for: rules the CRD schema cannot express or that an older installed CRD may
//! lack (names that must fit a Service, a stdio upstream's command), and re-checking
//! the rendered proxy config with [`ProxyConfig::check`] so a pod never starts with a config the
//! proxy would refuse. Not responsible for: rules the API server already enforces through the
//! CRD schema (digest-pinned image, port range); those never reach the operator.

use berth_crds::{McpUpstream, PolicyFinding, ProxyConfig, ProxyConfigError, Transport};
use kube::ResourceExt;

use crate::render::proxy_config;

/// Longest name an McpUpstream can have: its Service is named after it, and Service names are
/// DNS-1035 labels (RFC 1035), at most 63 characters.
pub const MAX_NAME_LEN: usize = 63;

/// Why an McpUpstream cannot be served, in words for its user.
///
/// `message` names the offending field (`spec.upstream.transport`, ...) so it can go verbatim
/// into the `Ready` condition and the Warning Event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidSpec {
    /// Dotted path of the offending field, e.g. `spec.session.strategy`.
    pub field: String,
    /// A sentence for the user that starts with the field path.
    pub message: String,
}

impl InvalidSpec {
    fn new(field: &str, problem: impl std::fmt::Display) -> Self {
        Self {
            field: field.to_owned(),
            message: format!("{field}: {problem}"),
        }
    }
}

/// Checks that `upstream` can be served and renders its proxy config.
///
/// Pure: reads only the object. Returns the [`ProxyConfig`] the proxy will run with, already
/// checked with [`ProxyConfig::check`].
///
/// # Errors
/// [`InvalidSpec`] for the first rule broken, naming the field: a name that is not a DNS-1035
/// label, a `Stdio` upstream without a non-empty `spec.upstream.command` (the CRD's CEL rules
/// already refuse it; re-checked in case an older CRD is installed), or a duration that does not
/// parse.
pub fn validate(upstream: &McpUpstream) -> Result<ProxyConfig, InvalidSpec> {
    let name = upstream.name_any();
    if !is_dns1035_label(&name) {
        return Err(InvalidSpec::new(
            "metadata.name",
            format!(
                "{name:?} must be a DNS-1035 label (lowercase letters, digits and '-', starting \
                 with a letter, at most {MAX_NAME_LEN} characters) because the Service is named after it"
            ),
        ));
    }
    let spec = &upstream.spec;
    let program = spec.upstream.command.as_deref().and_then(<[String]>::first);
    if spec.upstream.transport == Transport::Stdio && program.is_none_or(String::is_empty) {
        return Err(InvalidSpec::new(
            "spec.upstream.command",
            "is required and must not be empty when spec.upstream.transport is Stdio",
        ));
    }
    let config = proxy_config(spec);
    config.check().map_err(from_config_error)?;
    Ok(config)
}

/// Maps a proxy-config rule failure onto the spec field the user wrote.
fn from_config_error(err: ProxyConfigError) -> InvalidSpec {
    match err {
        ProxyConfigError::Duration { field, source } => {
            InvalidSpec::new(&format!("spec.{field}"), source)
        }
        ProxyConfigError::UnsupportedTransport(_) | ProxyConfigError::Missing { .. } => {
            InvalidSpec::new("spec.upstream.transport", err)
        }
        ProxyConfigError::Parse(_) | ProxyConfigError::UnknownField(_) => {
            InvalidSpec::new("spec", err)
        }
        ProxyConfigError::OutOfRange { field, .. } => {
            InvalidSpec::new(&format!("spec.{field}"), err)
        }
        ProxyConfigError::Header(_) => InvalidSpec::new("spec.upstream.headers", err),
        ProxyConfigError::Tools(
            PolicyFinding::GrantWithoutCaller(_) | PolicyFinding::BadGrantPattern { .. },
        ) => InvalidSpec::new("spec.tools.grants", err),
        ProxyConfigError::Tools(
            PolicyFinding::BadRateLimitPattern { .. } | PolicyFinding::BadRateLimitWindow { .. },
        ) => InvalidSpec::new("spec.tools.rateLimits", err),
        ProxyConfigError::Tools(_) => InvalidSpec::new("spec.tools.allow", err),
        ProxyConfigError::DownstreamAuth(_) => InvalidSpec::new("spec.proxy.auth", err),
        ProxyConfigError::GrantsNeedOAuth => InvalidSpec::new("spec.tools.grants", err),
        ProxyConfigError::ReadOnlyNeedsProbe => InvalidSpec::new("spec.toolsProbe.policy", err),
        // Set by the operator, never by the user.
        ProxyConfigError::DiagnosticsToken => InvalidSpec::new("spec", err),
    }
}

/// RFC 1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_dns1035_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= MAX_NAME_LEN
        && first.is_ascii_lowercase()
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str =
        "r.example/s@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// An McpUpstream from YAML: `upstream` is the inline map after `image`, `rest` more spec keys.
    fn fixture(name: &str, upstream: &str, rest: &str) -> McpUpstream {
        serde_yaml::from_str(&format!(
            "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\n\
             metadata: {{name: '{name}', namespace: ns, uid: u-1}}\n\
             spec:\n  upstream: {{image: '{IMAGE}'{upstream}}}\n{rest}"
        ))
        .expect("fixture parses")
    }

    #[test]
    fn validate_minimal_spec_renders_checked_config() {
        let config = validate(&fixture("weather", "", "")).expect("valid");
        assert_eq!(
            config.upstream.url.as_deref(),
            Some("http://127.0.0.1:3000/mcp")
        );
    }

    #[test]
    fn validate_rate_limits_with_a_bad_pattern_or_window_name_spec_tools_rate_limits() {
        for (limits, says) in [
            (
                "[{tools: ['x[ab'], calls: 5}]",
                "tools.rateLimits[0].tools entry \"x[ab\"",
            ),
            (
                "[{calls: 5, per: 0ms}]",
                "tools.rateLimits[0]: per \"0ms\" is too short",
            ),
        ] {
            let spec = format!("  tools: {{rateLimits: {limits}}}\n");
            let err = validate(&fixture("w", "", &spec)).expect_err(limits);
            assert_eq!(err.field, "spec.tools.rateLimits", "{limits}");
            assert!(err.message.contains(says), "{err}");
        }
        let config = validate(&fixture("w", "", "  tools: {rateLimits: [{calls: 5}]}\n"))
            .expect("a plain limit is valid");
        assert_eq!(config.tools.rate_limits.len(), 1);
    }

    #[test]
    fn validate_stdio_without_command_is_invalid_naming_the_field() {
        for upstream in [", transport: Stdio", ", transport: Stdio, command: []"] {
            let err = validate(&fixture("w", upstream, "")).expect_err("no command");
            assert_eq!(err.field, "spec.upstream.command", "{upstream}");
            assert!(err.message.starts_with("spec.upstream.command:"), "{err}");
        }
    }

    #[test]
    fn validate_stdio_renders_socket_config_with_per_client_default() {
        let config = validate(&fixture(
            "w",
            ", transport: Stdio, command: [mcp-server-time]",
            "",
        ))
        .expect("stdio with a command is served");
        assert_eq!(config.upstream.transport, Transport::Stdio);
        assert_eq!(config.upstream.socket.as_deref(), Some("@berth-stdio-host"));
        assert_eq!(config.upstream.url, None);
        assert_eq!(
            config.session.strategy,
            berth_crds::SessionStrategy::PerClient
        );
        let shared = validate(&fixture(
            "w",
            ", transport: Stdio, command: [x]",
            "  session: {strategy: Shared}\n",
        ))
        .expect("stdio shared is served");
        assert_eq!(shared.session.strategy, berth_crds::SessionStrategy::Shared);
    }

    #[test]
    fn validate_per_client_session_is_served() {
        let config = validate(&fixture(
            "w",
            "",
            "  session: {strategy: PerClient, maxSessions: 4}\n",
        ))
        .expect("per-client is served");
        assert_eq!(
            config.session.strategy,
            berth_crds::SessionStrategy::PerClient
        );
        assert_eq!(config.session.max_sessions, 4);
    }

    #[test]
    fn validate_bad_duration_is_invalid_naming_the_field() {
        let err = validate(&fixture("w", "", "  timeouts: {call: 5 seconds}\n"))
            .expect_err("bad duration");
        assert_eq!(err.field, "spec.timeouts.call");
        assert!(err.message.contains("5 seconds"), "{err}");
    }

    #[test]
    fn validate_name_unfit_for_a_service_is_invalid() {
        for bad in ["9lives", "a.b", "trailing-", "Upper", &"x".repeat(64)] {
            let err = validate(&fixture(bad, "", "")).expect_err(bad);
            assert_eq!(err.field, "metadata.name", "{bad}");
        }
        assert!(validate(&fixture(&"x".repeat(63), "", "")).is_ok());
    }
}
