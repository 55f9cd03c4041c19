//! Client authentication on the MCP endpoint: `Authorization: Bearer <token>` (RFC 6750) with the
//! token from the environment variable `downstreamAuth.bearerTokenEnv` names (issue 5, issue 7).
//!
//! The comparison is constant-time. What a refused request gets is the front's business
//! (`front::mcp::auth`).

use axum::http::HeaderValue;
use subtle::ConstantTimeEq;

/// The token clients must present. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct BearerToken(Vec<u8>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl BearerToken {
    /// The expected token; `None` when `token` is empty or only whitespace (a configuration
    /// error the caller reports: an empty token would let anyone in).
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| Self(token.as_bytes().to_vec()))
    }

    /// Whether `authorization` (the header's value) is `Bearer <this token>`; the scheme is
    /// case-insensitive (RFC 7235 section 2.1).
    pub fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.map(HeaderValue::as_bytes) else {
            return false;
        };
        let Some((scheme, presented)) = split_scheme(value) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer") && bool::from(presented.ct_eq(&self.0))
    }
}

fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    Some((scheme, rest.trim_ascii()))
}

/// The token of an `Authorization` header value (`Bearer <token>`, scheme without case);
/// `None` for another scheme or no token.
pub fn bearer_token(authorization: &HeaderValue) -> Option<&str> {
    let (scheme, token) = split_scheme(authorization.as_bytes())?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return None;
    }
    std::str::from_utf8(token).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_token_admits_only_the_exact_token() {
        let token = BearerToken::new("s3cret-token").expect("non-empty");
        let header = |v: &str| HeaderValue::from_str(v).expect("valid header");
        assert!(token.admits(Some(&header("Bearer s3cret-token"))));
        assert!(token.admits(Some(&header("bearer s3cret-token"))));
        assert!(!token.admits(None));
        assert!(!token.admits(Some(&header("Bearer s3cret-toke"))));
        assert!(!token.admits(Some(&header("Bearer s3cret-token-longer"))));
        assert!(!token.admits(Some(&header("Basic s3cret-token"))));
        assert!(!token.admits(Some(&header("s3cret-token"))));
        assert!(!token.admits(Some(&header("Bearer"))));
        assert!(BearerToken::new("  ").is_none());
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
        assert_eq!(bearer_token(&header("bEaReR abc.def")), Some("abc.def"));
        assert_eq!(bearer_token(&header("Basic abc")), None);
        assert_eq!(bearer_token(&header("Bearer ")), None);
    }
}
