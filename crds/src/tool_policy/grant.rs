//! Per-caller tool grants (`tools.grants`, issue 15): which callers, told apart by the claims
//! of their OAuth access tokens, may see and call which tools. A narrowing of `tools.allow` and
//! `tools.readOnly`, never a widening: a tool those hide stays hidden for everyone.
//!
//! Not responsible for: matching a caller at run time (the proxy's `access::auth::grants` does,
//! with the same glob syntax this module checks).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One grant: a caller whose access token matches any of `subjects`, `clientIds`, `groups` or
/// `scopes` may see and call the tools `tools` names. A caller no grant matches sees no tools,
/// and a call gets a JSON-RPC error (outcome `denied`) that never reaches the upstream.
///
/// Example: `{tools: ["search", "docs_*"], readOnly: true, groups: [support]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.subjects) || has(self.clientIds) || has(self.groups) || has(self.scopes)", "message": "spec.tools.grants: each grant needs at least one of subjects, clientIds, groups or scopes (who it is for)"}]))]
pub struct ToolGrant {
    /// Tool names or glob patterns: `*` matches any run of characters, `?` one character,
    /// `[abc]` one of a set and `{a,b}` either alternative, for example
    /// `["search", "github_*"]`; `["*"]` is every tool.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 256)))]
    pub tools: Vec<String>,
    /// Grant only the tools the upstream annotates `readOnlyHint: true` (a tool without the
    /// annotation counts as not read-only). Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Token subjects (`sub` claim) the grant is for, for example a user id or, for the
    /// client-credentials grant, the client id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    pub subjects: Vec<String>,
    /// OAuth client ids (`client_id` claim, RFC 9068, or `azp`) the grant is for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    pub client_ids: Vec<String>,
    /// Groups (`groups` claim, a list of strings) the grant is for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    pub groups: Vec<String>,
    /// Scopes (`scope` or `scp` claim) the grant is for: a token carrying any of them matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 128)))]
    pub scopes: Vec<String>,
}

impl ToolGrant {
    /// Whether the grant names no caller at all (refused: it would be for nobody, or read as
    /// for everybody).
    pub fn names_no_caller(&self) -> bool {
        self.subjects.is_empty()
            && self.client_ids.is_empty()
            && self.groups.is_empty()
            && self.scopes.is_empty()
    }

    /// The first entry of `tools` that is not a valid pattern, with why.
    pub fn bad_pattern(&self) -> Option<(String, String)> {
        bad_pattern(&self.tools)
    }
}

/// `patterns` compiled into one matcher of tool names (the syntax `grants` and `rateLimits`
/// document), for the proxy.
///
/// # Errors
/// The first pattern that is not a glob, with globset's reason.
pub fn tool_globs(patterns: &[String]) -> Result<globset::GlobSet, String> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        set.add(globset::Glob::new(pattern).map_err(|e| format!("{pattern:?}: {e}"))?);
    }
    set.build().map_err(|e| e.to_string())
}

/// The first of `patterns` that is not a valid tool glob, with why (shared by `grants` and
/// `rateLimits`).
pub(crate) fn bad_pattern(patterns: &[String]) -> Option<(String, String)> {
    patterns.iter().find_map(|pattern| {
        if pattern.trim().is_empty() {
            return Some((pattern.clone(), "is empty".to_owned()));
        }
        globset::Glob::new(pattern)
            .err()
            .map(|err| (pattern.clone(), err.kind().to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_parses_with_defaults_and_reports_bad_patterns() {
        let grant: ToolGrant =
            serde_yaml::from_str("{tools: ['docs_*', 'a{b,c}'], groups: [support]}")
                .expect("parses");
        assert!(!grant.read_only);
        assert!(!grant.names_no_caller());
        assert_eq!(grant.bad_pattern(), None);
        let bad: ToolGrant =
            serde_yaml::from_str("{tools: [ok, 'x[ab'], scopes: [s]}").expect("parses");
        let (pattern, why) = bad.bad_pattern().expect("an unclosed class is refused");
        assert_eq!(pattern, "x[ab");
        assert!(why.contains("unclosed"), "{why}");
        let nobody: ToolGrant = serde_yaml::from_str("{tools: ['*']}").expect("parses");
        assert!(nobody.names_no_caller());
    }
}
