//! Per-caller tool grants (`tools.grants`, issue 15) at run time: whether the [`Principal`] of a
//! request may see and call a tool. Checked after the policy for everyone (`tools.allow`,
//! `tools.readOnly`), so a grant only ever narrows what is exposed.
//!
//! Used by `forward` for `tools/list` (each caller gets only its tools) and `tools/call` (a call
//! to another tool ends `denied` before anything reaches the upstream).

use std::collections::BTreeSet;

use berth_crds::ToolGrant;
use berth_crds::tool_policy::grant::tool_globs;
use globset::GlobSet;

use super::Principal;

/// The compiled `tools.grants`.
pub struct Grants {
    rules: Vec<Rule>,
}

struct Rule {
    tools: GlobSet,
    read_only: bool,
    subjects: BTreeSet<String>,
    client_ids: BTreeSet<String>,
    groups: BTreeSet<String>,
    scopes: BTreeSet<String>,
}

impl Grants {
    /// Compiles `grants`; `None` when there are none (every caller gets every exposed tool).
    ///
    /// # Errors
    /// A message naming the grant and pattern that is not a glob (the config check refuses
    /// these first, so only a config that skipped it gets here).
    pub fn new(grants: &[ToolGrant]) -> Result<Option<Self>, String> {
        if grants.is_empty() {
            return Ok(None);
        }
        let mut rules = Vec::with_capacity(grants.len());
        for (index, grant) in grants.iter().enumerate() {
            let tools =
                tool_globs(&grant.tools).map_err(|e| format!("tools.grants[{index}].tools {e}"))?;
            let set = |values: &[String]| values.iter().cloned().collect();
            rules.push(Rule {
                tools,
                read_only: grant.read_only,
                subjects: set(&grant.subjects),
                client_ids: set(&grant.client_ids),
                groups: set(&grant.groups),
                scopes: set(&grant.scopes),
            });
        }
        Ok(Some(Self { rules }))
    }

    /// Whether `caller` may see and call `tool`, whose listing annotated it `readOnlyHint`
    /// as `read_only_hint`. No caller (no validated token) is granted nothing.
    pub fn allows(&self, caller: Option<&Principal>, tool: &str, read_only_hint: bool) -> bool {
        let Some(caller) = caller else {
            return false;
        };
        self.rules.iter().any(|rule| {
            rule.matches(caller) && (!rule.read_only || read_only_hint) && rule.tools.is_match(tool)
        })
    }
}

impl Rule {
    fn matches(&self, caller: &Principal) -> bool {
        let holds =
            |set: &BTreeSet<String>, value: Option<&String>| value.is_some_and(|v| set.contains(v));
        holds(&self.subjects, caller.subject.as_ref())
            || holds(&self.client_ids, caller.client_id.as_ref())
            || caller.groups.iter().any(|g| self.groups.contains(g))
            || caller.scopes.iter().any(|s| self.scopes.contains(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(yaml: &str) -> Grants {
        let grants: Vec<ToolGrant> = serde_yaml::from_str(yaml).expect("grants parse");
        Grants::new(&grants).expect("compile").expect("some")
    }

    fn caller(subject: &str, groups: &[&str], scopes: &[&str]) -> Principal {
        Principal {
            subject: Some(subject.into()),
            client_id: Some(format!("{subject}-client")),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            groups: groups.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_caller_gets_the_tools_of_every_grant_that_matches_it() {
        let grants = grants(
            "[{tools: [echo], subjects: [alice]},
              {tools: ['docs_*'], readOnly: true, groups: [support]},
              {tools: ['*'], scopes: ['mcp:admin']},
              {tools: [add], clientIds: [bob-client]}]",
        );
        let alice = caller("alice", &[], &["mcp:tools"]);
        assert!(grants.allows(Some(&alice), "echo", false));
        assert!(!grants.allows(Some(&alice), "add", false));
        let support = caller("carol", &["support"], &[]);
        assert!(grants.allows(Some(&support), "docs_search", true));
        assert!(
            !grants.allows(Some(&support), "docs_delete", false),
            "a read-only grant needs readOnlyHint"
        );
        assert!(!grants.allows(Some(&support), "echo", true));
        let admin = caller("dave", &[], &["mcp:admin"]);
        assert!(grants.allows(Some(&admin), "anything", false));
        let bob = caller("bob", &[], &[]);
        assert!(grants.allows(Some(&bob), "add", false), "by client id");
        assert!(!grants.allows(Some(&bob), "echo", false));
        assert!(!grants.allows(None, "echo", false), "no caller, no tools");
        assert!(
            !grants.allows(Some(&Principal::default()), "echo", false),
            "a token without claims matches no grant"
        );
    }

    #[test]
    fn no_grants_compile_to_none() {
        assert!(Grants::new(&[]).expect("empty").is_none());
    }
}
