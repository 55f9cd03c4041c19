//! Which browser origins and `Host` names may reach the proxy's MCP endpoint: the DNS
//! rebinding protection MCP requires of Streamable HTTP servers (2025-11-25 and 2026-07-28,
//! "Streamable HTTP", "Security": validate `Origin`, answer 403 when it is invalid), in the
//! CRD as `spec.proxy.requestOrigin` and in the proxy's config as `requestOrigin`.
//!
//! Not responsible for: checking requests (the proxy's front does, see
//! [`RequestOriginSpec::allows_origin`] and [`RequestOriginSpec::allows_host`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Browser origins and `Host` names the MCP endpoint accepts. The defaults keep the proxy
/// working behind a Service name, a pod IP, an ingress or a reverse proxy, and for kubelet probes
/// (the admin port is never checked), while a web page a user visits cannot drive it through DNS
/// rebinding: browsers send `Origin` with every POST, other clients send none.
///
/// Example: `{allowedOrigins: ["https://inspector.example.com"], allowedHosts: ["mcp.example.com"]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestOriginSpec {
    /// Browser origins (`scheme://host[:port]`, as in the `Origin` header) allowed to call the
    /// MCP endpoint, for example `https://inspector.example.com`; `*` allows any. Loopback
    /// origins (`http://localhost`, `http://127.0.0.1`, `http://[::1]`, any port, for a local
    /// client through `kubectl port-forward`) are always allowed, and requests without `Origin`
    /// (clients that are not browsers) are not affected. Any other `Origin` gets HTTP 403 with a
    /// JSON-RPC error. Default: none besides loopback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 253)))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(o, o == '*' || o.matches('^https?://[^/?#*\\\\s]+$'))", "message": "spec.proxy.requestOrigin.allowedOrigins entries must be * or scheme://host[:port] with no path, for example https://inspector.example.com"}]))]
    pub allowed_origins: Vec<String>,
    /// When set, the `Host` header of every MCP request must be one of these, else HTTP 403:
    /// `name` (any port), `name:port`, or `*.suffix` (any name under `suffix`, any port), for
    /// example `mcp.example.com` or `*.svc.cluster.local`; loopback names and IP addresses are
    /// always allowed. Default: empty, any `Host` (the `Origin` check alone stops DNS
    /// rebinding from browsers; set this to pin the names an ingress or reverse proxy sends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 253)))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(h, h.matches('^(\\\\*\\\\.)?[A-Za-z0-9.-]+(:[0-9]{1,5})?$'))", "message": "spec.proxy.requestOrigin.allowedHosts entries must be name, name:port or *.suffix, for example mcp.example.com"}]))]
    pub allowed_hosts: Vec<String>,
}

impl RequestOriginSpec {
    /// Whether a request with `Origin: origin` may be served: loopback, `*`, or listed
    /// (compared without case, a default port written or not).
    pub fn allows_origin(&self, origin: &str) -> bool {
        let origin = origin.trim().to_ascii_lowercase();
        let Some((scheme, authority)) = origin.split_once("://") else {
            return self.allowed_origins.iter().any(|o| o == "*");
        };
        if is_loopback(host_of(authority)) {
            return true;
        }
        let normalized = normalize_origin(scheme, authority);
        self.allowed_origins.iter().any(|allowed| {
            allowed == "*"
                || allowed
                    .to_ascii_lowercase()
                    .split_once("://")
                    .is_some_and(|(s, a)| normalize_origin(s, a) == normalized)
        })
    }

    /// Whether a request with `Host: host` may be served: no list, loopback or an IP address,
    /// or matching an entry.
    pub fn allows_host(&self, host: &str) -> bool {
        if self.allowed_hosts.is_empty() {
            return true;
        }
        let host = host.trim().to_ascii_lowercase();
        let name = host_of(&host);
        if is_loopback(name)
            || name
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok()
        {
            return true;
        }
        self.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            if let Some(suffix) = allowed.strip_prefix("*.") {
                name.ends_with(&format!(".{suffix}"))
            } else if allowed.contains(':') {
                allowed == host
            } else {
                allowed == name
            }
        })
    }
}

/// The host of `authority` (`host[:port]`, `[v6]:port`), without the port.
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1")
}

/// `scheme://host[:port]` without a default port.
fn normalize_origin(scheme: &str, authority: &str) -> String {
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => "",
    };
    let authority = authority.trim_end_matches('/');
    let authority = if default_port.is_empty() {
        authority
    } else {
        authority.strip_suffix(default_port).unwrap_or(authority)
    };
    format!("{scheme}://{authority}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_listed_origins_are_allowed_others_refused() {
        let spec = RequestOriginSpec {
            allowed_origins: vec!["https://Inspector.example.com".into()],
            ..RequestOriginSpec::default()
        };
        for ok in [
            "http://localhost:6274",
            "http://127.0.0.1",
            "http://[::1]:3000",
            "https://inspector.example.com",
            "https://inspector.example.com:443",
        ] {
            assert!(spec.allows_origin(ok), "{ok}");
        }
        for refused in [
            "http://evil.example",
            "http://localhost.evil.example",
            "https://inspector.example.com:8443",
            "null",
        ] {
            assert!(!spec.allows_origin(refused), "{refused}");
        }
        let any = RequestOriginSpec {
            allowed_origins: vec!["*".into()],
            ..RequestOriginSpec::default()
        };
        assert!(any.allows_origin("http://evil.example") && any.allows_origin("null"));
    }

    #[test]
    fn hosts_are_unchecked_by_default_and_matched_by_name_port_or_suffix_when_listed() {
        assert!(RequestOriginSpec::default().allows_host("anything.example:1"));
        let spec = RequestOriginSpec {
            allowed_hosts: vec![
                "mcp.example.com".into(),
                "edge:8443".into(),
                "*.svc.cluster.local".into(),
            ],
            ..RequestOriginSpec::default()
        };
        for ok in [
            "mcp.example.com",
            "MCP.example.com:8080",
            "edge:8443",
            "weather.tools.svc.cluster.local:8080",
            "localhost:8080",
            "10.244.0.7:8080",
            "[fd00::7]:8080",
        ] {
            assert!(spec.allows_host(ok), "{ok}");
        }
        for refused in ["evil.example", "edge:80", "svc.cluster.local.evil.example"] {
            assert!(!spec.allows_host(refused), "{refused}");
        }
    }
}
