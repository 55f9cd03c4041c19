//! Who is calling: the identity a validated access token carries (RFC 9068 section 2.2), as the
//! front hands it to what runs behind it (per-tool authorization and audit events, issue 15).

use serde::Deserialize;

/// The caller of one request, from its access token's claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Principal {
    /// `sub`: the resource owner, or the client itself under the client-credentials grant.
    pub subject: Option<String>,
    /// `client_id` (RFC 9068), else `azp` (OpenID Connect): the OAuth client that asked for the
    /// token.
    pub client_id: Option<String>,
    /// The granted scopes, from `scope` (a space-separated string, RFC 9068 section 2.2.3) or
    /// `scp` (an array, or a string, as some authorization servers, Hydra among them, write it).
    pub scopes: Vec<String>,
    /// `groups` (RFC 9068 section 2.2.3.1, SCIM groups): an array of names, or one name.
    pub groups: Vec<String>,
}

impl Principal {
    /// Who the caller is, as one key: `sub` and the client id. Tokens refreshed by the same
    /// client for the same subject share it; scopes and groups may differ between them.
    pub fn identity(&self) -> String {
        format!(
            "{}\u{1f}{}",
            self.subject.as_deref().unwrap_or_default(),
            self.client_id.as_deref().unwrap_or_default()
        )
    }

    /// [`Self::identity`] as 32 hex digits (the first 16 bytes of its SHA-256): what a session
    /// records and a signed session id carries as its owner, so the id names no subject.
    pub fn owner_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.identity().as_bytes());
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether every scope in `required` was granted; the missing ones otherwise.
    pub fn missing_scopes<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        required
            .iter()
            .filter(|s| !self.scopes.contains(s))
            .map(String::as_str)
            .collect()
    }
}

/// The claims the proxy reads; the signature and the registered claims `iss`, `aud`, `exp`,
/// `nbf` are checked by `jsonwebtoken` before these are used.
#[derive(Debug, Deserialize)]
pub(super) struct Claims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
    #[serde(default)]
    scope: Option<Words>,
    #[serde(default)]
    scp: Option<Words>,
    #[serde(default)]
    groups: Option<Words>,
}

/// A claim written either as one space-separated string or as an array of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Words {
    One(String),
    Many(Vec<String>),
}

impl Words {
    /// Scopes: a string is a space-separated list (RFC 8693 section 4.2).
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(text) => text.split_ascii_whitespace().map(str::to_owned).collect(),
            Self::Many(words) => words,
        }
    }

    /// Groups: a string is one group name, whatever it contains ("Domain Admins" is not the
    /// group "Admins").
    fn into_names(self) -> Vec<String> {
        match self {
            Self::One(name) => vec![name],
            Self::Many(names) => names,
        }
    }
}

impl From<Claims> for Principal {
    fn from(claims: Claims) -> Self {
        let mut scopes: Vec<String> = claims.scope.map(Words::into_vec).unwrap_or_default();
        for scope in claims.scp.map(Words::into_vec).unwrap_or_default() {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        Self {
            subject: claims.sub,
            client_id: claims.client_id.or(claims.azp),
            scopes,
            groups: claims.groups.map(Words::into_names).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(claims: serde_json::Value) -> Principal {
        serde_json::from_value::<Claims>(claims)
            .expect("claims parse")
            .into()
    }

    #[test]
    fn scopes_come_from_scope_strings_and_scp_arrays() {
        let p = principal(serde_json::json!({
            "sub": "agent", "client_id": "weather-agent",
            "scope": "mcp:tools  mcp:read", "scp": ["mcp:read", "mcp:admin"], "groups": "ops"
        }));
        assert_eq!(p.subject.as_deref(), Some("agent"));
        assert_eq!(p.client_id.as_deref(), Some("weather-agent"));
        assert_eq!(p.scopes, ["mcp:tools", "mcp:read", "mcp:admin"]);
        assert_eq!(p.groups, ["ops"]);
        let required = vec!["mcp:tools".to_owned(), "mcp:write".to_owned()];
        assert_eq!(p.missing_scopes(&required), ["mcp:write"]);
    }

    #[test]
    fn a_groups_string_is_one_group_even_with_spaces() {
        let p = principal(serde_json::json!({ "sub": "u", "groups": "Domain Admins" }));
        assert_eq!(p.groups, ["Domain Admins"]);
        let p = principal(serde_json::json!({ "sub": "u", "groups": ["Domain Admins", "ops"] }));
        assert_eq!(p.groups, ["Domain Admins", "ops"]);
    }

    #[test]
    fn azp_names_the_client_when_client_id_is_absent() {
        let p = principal(serde_json::json!({ "azp": "spa", "scp": "a b" }));
        assert_eq!(p.client_id.as_deref(), Some("spa"));
        assert_eq!(p.scopes, ["a", "b"]);
        assert!(p.subject.is_none());
    }
}
