//! Where an upstream's requests go: its URL as configured, the request target derived from it
//! once, and the headers every request carries.
//!
//! A user name and password in the URL (userinfo, RFC 3986 §3.2.1) are sent as a `Basic`
//! credential (RFC 7617) and never as part of the request target, as reqwest does for URLs it
//! is given: percent-decoded, `user:password`, and in place of a configured `Authorization`
//! header.

use http::Uri;
use http::header::{AUTHORIZATION, HOST, HeaderMap, HeaderName, HeaderValue};

use super::super::UpstreamError;

/// An upstream's URL, request target and headers.
pub struct Target {
    /// The URL as configured (userinfo included: only [`super::HttpUpstream::shown_url`] shows
    /// it, redacted).
    pub url: reqwest::Url,
    /// The request target: `url` without userinfo.
    pub uri: Uri,
    /// Sent on every request that does not set the same header itself. Every configured value
    /// is marked sensitive, so no log or debug output shows it; `Host` is made here once, as
    /// the HTTP client would make it on each request (issue 14), unless configured.
    pub headers: HeaderMap,
}

impl Target {
    /// Parses `url` (`http` or `https`) and the configured `headers` (name, value).
    ///
    /// # Errors
    /// [`UpstreamError::Config`] for a malformed URL or header (the message names the header,
    /// never its value).
    pub fn parse(url: &str, headers: &[(String, String)]) -> Result<Self, UpstreamError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| UpstreamError::Config(format!("invalid upstream url: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UpstreamError::Config(format!(
                "invalid upstream url {}: the scheme must be http or https",
                shown(&url)
            )));
        }
        let mut defaults = HeaderMap::new();
        for (name, value) in headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                UpstreamError::Config(format!("invalid upstream header name {name:?}"))
            })?;
            let mut header_value = HeaderValue::from_str(value).map_err(|_| {
                UpstreamError::Config(format!("invalid value for upstream header {name:?}"))
            })?;
            header_value.set_sensitive(true);
            defaults.insert(header_name, header_value);
        }
        let mut bare = url.clone();
        if let Some(credential) = take_userinfo(&mut bare) {
            defaults.insert(AUTHORIZATION, credential);
        }
        let uri: Uri = bare
            .as_str()
            .parse()
            .map_err(|e| UpstreamError::Config(format!("invalid upstream url: {e}")))?;
        if !defaults.contains_key(HOST)
            && let Some(host) = host_value(&uri)
        {
            defaults.insert(HOST, host);
        }
        Ok(Self {
            url,
            uri,
            headers: defaults,
        })
    }
}

/// `url` as logs may show it: userinfo replaced by `redacted`.
pub fn shown(url: &reqwest::Url) -> reqwest::Url {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        let _ = shown.set_password(None);
        let _ = shown.set_username("redacted");
    }
    shown
}

/// The `Host` header for requests to `uri` (RFC 9110 §7.2): the host, with the port unless it
/// is the scheme's default (80 for `http`, 443 for `https`), as hyper's client writes it.
fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let text = match uri.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&text).ok()
}

/// Removes the userinfo from `url` and returns it as a sensitive `Basic` credential; `None`
/// when there is none.
fn take_userinfo(url: &mut reqwest::Url) -> Option<HeaderValue> {
    use base64::Engine as _;
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let user = decode(url.username());
    let password = url.password().map(decode);
    if user.is_empty() && password.is_none() {
        return None;
    }
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let pair = format!("{user}:{}", password.unwrap_or_default());
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_becomes_a_basic_credential_and_leaves_the_request_target() {
        let target = Target::parse(
            "http://ad%20min:s3cr%3At@127.0.0.1:3001/mcp",
            &[("Authorization".into(), "Bearer configured".into())],
        )
        .expect("target");
        assert_eq!(target.uri.to_string(), "http://127.0.0.1:3001/mcp");
        let credential = target.headers.get(AUTHORIZATION).expect("a credential");
        // base64("ad min:s3cr:t")
        assert_eq!(credential, "Basic YWQgbWluOnMzY3I6dA==");
        assert!(credential.is_sensitive());
    }

    #[test]
    fn a_user_name_alone_is_sent_with_an_empty_password() {
        let target = Target::parse("http://token@127.0.0.1/mcp", &[]).expect("target");
        // base64("token:")
        assert_eq!(
            target.headers.get(AUTHORIZATION).expect("a credential"),
            "Basic dG9rZW46"
        );
    }

    #[test]
    fn without_userinfo_the_configured_headers_are_kept_as_they_are() {
        let target = Target::parse(
            "http://127.0.0.1/mcp",
            &[("Authorization".into(), "Bearer configured".into())],
        )
        .expect("target");
        assert_eq!(
            target.headers.get(AUTHORIZATION).expect("configured"),
            "Bearer configured"
        );
        assert_eq!(target.uri.to_string(), "http://127.0.0.1/mcp");
    }

    #[test]
    fn host_is_made_once_without_the_schemes_default_port() {
        let host = |url: &str| {
            let target = Target::parse(url, &[]).expect("target");
            target.headers.get(HOST).expect("a host").clone()
        };
        assert_eq!(host("http://127.0.0.1:3001/mcp"), "127.0.0.1:3001");
        assert_eq!(host("http://upstream.ns.svc:80/mcp"), "upstream.ns.svc");
        assert_eq!(host("http://upstream.ns.svc/mcp"), "upstream.ns.svc");
        assert_eq!(host("https://mcp.example.com:443/mcp"), "mcp.example.com");
        assert_eq!(
            host("https://mcp.example.com:8443/mcp"),
            "mcp.example.com:8443"
        );
        assert_eq!(host("http://[::1]:8080/mcp"), "[::1]:8080");
        assert_eq!(host("http://user:pw@127.0.0.1:3001/mcp"), "127.0.0.1:3001");
    }

    #[test]
    fn a_configured_host_header_is_kept() {
        let target = Target::parse(
            "http://127.0.0.1:3001/mcp",
            &[("Host".into(), "mcp.internal".into())],
        )
        .expect("target");
        assert_eq!(target.headers.get(HOST).expect("host"), "mcp.internal");
    }

    #[test]
    fn a_scheme_other_than_http_is_refused_without_showing_the_password() {
        let Err(UpstreamError::Config(message)) = Target::parse("ftp://u:pw0rd@h/mcp", &[]) else {
            panic!("accepted");
        };
        assert!(!message.contains("pw0rd"), "{message}");
    }
}
