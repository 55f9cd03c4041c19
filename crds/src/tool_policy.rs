//! The tool surface a proxy exposes (`tools` in the McpUpstream spec and the proxy config):
//! which upstream tools clients may see and call, for everyone (`allow`, `readOnly`) and per
//! caller ([`grant`]), and how often each caller may call them ([`rate_limit`]).

pub mod grant;
pub mod rate_limit;

use std::collections::BTreeSet;

pub use grant::ToolGrant;
pub use rate_limit::ToolRateLimit;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which upstream tools the proxy exposes. Both rules hold together: a tool is exposed when it
/// is in `allow` (if given) and, with `readOnly`, annotated `readOnlyHint: true`. Hidden tools
/// are absent from `tools/list`, and a call to one gets a JSON-RPC error (outcome `rejected`),
/// even though the upstream has it. Schemas, titles, annotations and results of exposed tools
/// are the upstream's own, unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolsPolicySpec {
    /// Upstream tool names to expose, e.g. `["search", "fetch"]`. Omitted: every tool. An empty
    /// list, an empty name or a duplicate is rejected. A listed name the upstream does not have
    /// keeps the proxy not ready (reason on `/readyz`, metric `berth_proxy_tools_missing`), so a
    /// reviewed tool can never silently go missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024), extend("x-kubernetes-list-type" = "set"), inner(length(min = 1, max = 256)))]
    pub allow: Option<Vec<String>>,
    /// Expose only tools the upstream annotates `readOnlyHint: true`; a tool without the
    /// annotation counts as not read-only. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Per-caller grants on the claims of OAuth access tokens (needs
    /// `spec.proxy.auth.oauth`): when set, each caller sees and may call only the tools a
    /// grant matching it names, among those `allow` and `readOnly` expose. Default: none
    /// (every caller gets every exposed tool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub grants: Vec<ToolGrant>,
    /// Rate limits on `tools/call`, per caller and per tool (token buckets, counted in each
    /// proxy replica), for example `[{tools: ["search*"], calls: 60, per: 1m, burst: 10}]`.
    /// Over a limit: HTTP 429 with `Retry-After`, a JSON-RPC error, outcome `rate_limited`.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub rate_limits: Vec<ToolRateLimit>,
}

/// A rule of a tool policy that is broken, or a fact about the upstream that breaks it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFinding {
    /// `allow` is an empty list (it would expose nothing).
    #[error("tools.allow is empty: omit it to expose every tool")]
    EmptyAllowList,
    /// `allow` holds an empty name.
    #[error("tools.allow[{0}] is an empty name")]
    EmptyName(usize),
    /// `allow` names a tool twice.
    #[error("tools.allow names {0:?} more than once")]
    Duplicate(String),
    /// An allowed tool the upstream does not list.
    #[error("allowed tool {0:?} is not offered by the upstream")]
    Missing(String),
    /// An allowed tool that is not annotated read-only while `readOnly` is set.
    #[error("allowed tool {0:?} is not annotated readOnlyHint: true, so readOnly hides it")]
    NotReadOnly(String),
    /// A grant that names no caller.
    #[error("tools.grants[{0}] names no caller: set subjects, clientIds, groups or scopes")]
    GrantWithoutCaller(usize),
    /// A grant's tool pattern that is not a valid glob.
    #[error("tools.grants[{index}].tools entry {pattern:?} {why}")]
    BadGrantPattern {
        /// Index of the grant.
        index: usize,
        /// The pattern as written.
        pattern: String,
        /// Why it is refused.
        why: String,
    },
    /// A rate limit's tool pattern that is not a valid glob.
    #[error("tools.rateLimits[{index}].tools entry {pattern:?} {why}")]
    BadRateLimitPattern {
        /// Index of the rate limit.
        index: usize,
        /// The pattern as written.
        pattern: String,
        /// Why it is refused.
        why: String,
    },
    /// A rate limit whose window cannot be used.
    #[error("tools.rateLimits[{index}]: {why}")]
    BadRateLimitWindow {
        /// Index of the rate limit.
        index: usize,
        /// Why it is refused.
        why: String,
    },
}

impl ToolsPolicySpec {
    /// Whether the policy exposes a tool with this name and `readOnlyHint`.
    pub fn exposes(&self, name: &str, read_only_hint: bool) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|a| a == name));
        allowed && (!self.read_only || read_only_hint)
    }

    /// Offline checks of the policy itself: empty list, empty names, duplicates, grants
    /// without a caller or with a pattern that is not a glob.
    pub fn check(&self) -> Vec<PolicyFinding> {
        let mut findings = self.check_allow();
        for (index, grant) in self.grants.iter().enumerate() {
            if grant.names_no_caller() {
                findings.push(PolicyFinding::GrantWithoutCaller(index));
            }
            if let Some((pattern, why)) = grant.bad_pattern() {
                findings.push(PolicyFinding::BadGrantPattern {
                    index,
                    pattern,
                    why,
                });
            }
        }
        for (index, limit) in self.rate_limits.iter().enumerate() {
            if let Some((pattern, why)) = grant::bad_pattern(&limit.tools) {
                findings.push(PolicyFinding::BadRateLimitPattern {
                    index,
                    pattern,
                    why,
                });
            }
            if let Err(why) = limit.refill() {
                findings.push(PolicyFinding::BadRateLimitWindow { index, why });
            }
        }
        findings
    }

    fn check_allow(&self) -> Vec<PolicyFinding> {
        let Some(allow) = &self.allow else {
            return Vec::new();
        };
        if allow.is_empty() {
            return vec![PolicyFinding::EmptyAllowList];
        }
        let mut findings = Vec::new();
        let mut seen = BTreeSet::new();
        for (index, name) in allow.iter().enumerate() {
            if name.trim().is_empty() {
                findings.push(PolicyFinding::EmptyName(index));
            } else if !seen.insert(name.as_str()) {
                findings.push(PolicyFinding::Duplicate(name.clone()));
            }
        }
        findings
    }

    /// Checks against an upstream's tools, given as `(name, readOnlyHint)`: allowed tools it
    /// lacks, and (with `readOnly`) allowed tools it does not annotate read-only.
    pub fn check_against<'a>(
        &self,
        tools: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Vec<PolicyFinding> {
        let Some(allow) = &self.allow else {
            return Vec::new();
        };
        let tools: Vec<(&str, bool)> = tools.into_iter().collect();
        let mut findings = Vec::new();
        for name in allow.iter().collect::<BTreeSet<_>>() {
            match tools.iter().find(|(tool, _)| tool == name) {
                None => findings.push(PolicyFinding::Missing(name.clone())),
                Some((_, false)) if self.read_only => {
                    findings.push(PolicyFinding::NotReadOnly(name.clone()));
                }
                Some(_) => {}
            }
        }
        findings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(names: &[&str]) -> ToolsPolicySpec {
        ToolsPolicySpec {
            allow: Some(names.iter().map(|n| (*n).to_owned()).collect()),
            ..ToolsPolicySpec::default()
        }
    }

    #[test]
    fn exposes_follows_allow_and_read_only_together() {
        let everything = ToolsPolicySpec::default();
        assert!(everything.exposes("x", false));
        let listed = allow(&["a"]);
        assert!(listed.exposes("a", false));
        assert!(!listed.exposes("b", true));
        let read_only = ToolsPolicySpec {
            read_only: true,
            ..allow(&["a", "b"])
        };
        assert!(read_only.exposes("a", true));
        assert!(
            !read_only.exposes("b", false),
            "unannotated is not read-only"
        );
    }

    #[test]
    fn check_finds_empty_list_empty_names_and_duplicates() {
        assert_eq!(allow(&[]).check(), [PolicyFinding::EmptyAllowList]);
        assert_eq!(
            allow(&["a", " ", "a"]).check(),
            [
                PolicyFinding::EmptyName(1),
                PolicyFinding::Duplicate("a".into())
            ]
        );
        assert!(ToolsPolicySpec::default().check().is_empty());
        let grants: ToolsPolicySpec = serde_yaml::from_str(
            "{grants: [{tools: [a], scopes: [s]}, {tools: ['*']}, {tools: ['b{'], subjects: [u]}]}",
        )
        .expect("parses");
        assert_eq!(
            grants.check(),
            [
                PolicyFinding::GrantWithoutCaller(1),
                PolicyFinding::BadGrantPattern {
                    index: 2,
                    pattern: "b{".into(),
                    why: "unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"
                        .into()
                }
            ]
        );
    }

    #[test]
    fn check_against_reports_missing_and_not_read_only() {
        let policy = ToolsPolicySpec {
            read_only: true,
            ..allow(&["echo", "write", "gone"])
        };
        let findings = policy.check_against([("echo", true), ("write", false)]);
        assert_eq!(
            findings,
            [
                PolicyFinding::Missing("gone".into()),
                PolicyFinding::NotReadOnly("write".into())
            ]
        );
    }
}
