//! The proxy config an McpUpstream's spec renders to, and the names that config shares with
//! the pod that runs it.
//!
//! Responsible for: [`proxy_config`], the one pure mapping from spec to [`ProxyConfig`], so
//! [`crate::validate`] checks exactly the config [`crate::build`] stores; and the names the
//! config refers to and the pod must provide: the environment variables the kubelet fills
//! ([`SESSION_KEY_ENV`], [`DOWNSTREAM_TOKEN_ENV`], [`header_env_var`]) and the stdio host's
//! socket ([`STDIO_SOCKET`]). Uses nothing of the crate.
//! Not responsible for: checking the config ([`ProxyConfig::check`], called by
//! [`crate::validate`]), storing it (the ConfigMap of [`crate::build::config_map`]), or the pod
//! that fills those variables and opens that socket ([`crate::build::deployment`],
//! [`crate::build::secret`], [`crate::build::stdio`]).

use berth_crds::{
    DownstreamAuth, HeaderSource, McpUpstreamSpec, ProxyConfig, Transport, UpstreamEndpoint,
};

/// Proxy environment variable holding the session key (the rendered config's `sessionKeyEnv`).
pub const SESSION_KEY_ENV: &str = "BERTH_SESSION_KEY";

/// Proxy environment variable holding the bearer token clients must present, filled by the
/// kubelet from `spec.proxy.auth.bearerTokenSecretRef`.
pub const DOWNSTREAM_TOKEN_ENV: &str = "BERTH_DOWNSTREAM_TOKEN";

/// Unix socket of the stdio host: an abstract socket in the pod's network namespace (no file a
/// server's process could replace; issue 40, item 7).
pub const STDIO_SOCKET: &str = "@berth-stdio-host";

/// The proxy config for `spec`: MCP on `0.0.0.0:<proxy.port>`, admin on
/// `0.0.0.0:<proxy.adminPort>`; the upstream either the HTTP sidecar on the pod's loopback at
/// `http://127.0.0.1:<port><path>` or, for `Stdio`, the stdio host's socket [`STDIO_SOCKET`];
/// the session strategy resolved for the transport ([`berth_crds::SessionSettings::resolve`]);
/// tools-probe, timeout and tool-policy settings copied unchanged; client auth through
/// [`DOWNSTREAM_TOKEN_ENV`] when `spec.proxy.auth` is set; and session ids always signed with
/// the key in [`SESSION_KEY_ENV`] (field case BR-35).
///
/// Pure and unchecked; [`crate::validate::validate`] calls [`ProxyConfig::check`] on it.
pub fn proxy_config(spec: &McpUpstreamSpec) -> ProxyConfig {
    let transport = spec.upstream.transport;
    let (url, socket) = match transport {
        Transport::StreamableHttp => (
            Some(format!(
                "http://127.0.0.1:{}{}",
                spec.upstream.port, spec.upstream.path
            )),
            None,
        ),
        Transport::Stdio => (None, Some(STDIO_SOCKET.to_owned())),
    };
    ProxyConfig {
        listen: format!("0.0.0.0:{}", spec.proxy.port),
        admin_listen: format!("0.0.0.0:{}", spec.proxy.admin_port),
        upstream: UpstreamEndpoint {
            command: Vec::new(),
            socket,
            max_line_bytes: None,
            transport,
            url,
            headers: spec
                .upstream
                .headers
                .iter()
                .enumerate()
                .map(|(index, header)| HeaderSource {
                    name: header.name.clone(),
                    value: header.value.clone(),
                    value_env: header.value_from.as_ref().map(|_| header_env_var(index)),
                })
                .collect(),
        },
        session: spec.session.resolve(transport),
        tools_probe: spec.tools_probe.clone(),
        timeouts: spec.timeouts.clone(),
        tools: spec.tools.clone(),
        downstream_auth: spec.proxy.auth.as_ref().map(|auth| DownstreamAuth {
            bearer_token_env: auth
                .bearer_token_secret_ref
                .as_ref()
                .map(|_| DOWNSTREAM_TOKEN_ENV.to_owned()),
            oauth: auth.oauth.clone(),
        }),
        session_key_env: Some(SESSION_KEY_ENV.to_owned()),
        request_origin: spec.proxy.request_origin.clone(),
        audit: spec.proxy.audit,
        limits: spec.proxy.limits.clone(),
        diagnostics_token_sha256: None,
    }
}

/// The proxy environment variable that carries the Secret value of upstream header `index`
/// (`BERTH_UPSTREAM_HEADER_<index>`): the value reaches the proxy through the kubelet, never
/// through the ConfigMap or a command line.
pub fn header_env_var(index: usize) -> String {
    format!("BERTH_UPSTREAM_HEADER_{index}")
}
