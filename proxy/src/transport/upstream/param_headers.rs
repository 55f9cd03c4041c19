//! Tool arguments a server asks clients to mirror in `Mcp-Param-{Name}` headers: the
//! `x-mcp-header` annotations of a tool's `inputSchema` (MCP 2026-07-28 "Streamable HTTP",
//! "Custom Headers", SEP-2243).
//!
//! The proxy learns them from the upstream's tool listing, so it can check a modern client's
//! headers against the body even when the upstream is legacy and would never look at them.

use serde_json::Value;

/// One annotated argument: where it sits in `arguments` and the header that mirrors it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The header, lower case: `mcp-param-` and the annotation's value (`Region` →
    /// `mcp-param-region`; header names are case-insensitive, RFC 9110 §5.1).
    pub header: String,
    /// Property names from `arguments` down to the annotated one (`["region"]`, or
    /// `["target", "region"]` for a property of a nested object).
    pub path: Vec<String>,
}

impl ParamHeader {
    /// The argument's value in a `tools/call` `arguments` object; `None` when absent.
    pub fn value<'a>(&self, arguments: Option<&'a Value>) -> Option<&'a Value> {
        self.path
            .iter()
            .try_fold(arguments?, |value, name| value.get(name))
    }
}

/// The annotated arguments of a tool's `inputSchema`: every property carrying `x-mcp-header`
/// (a string), reached through `properties` from the root, nested objects included. An
/// annotation elsewhere (inside `items`, `anyOf`, ...) names no single value and is ignored.
pub fn declared(schema: &Value) -> Vec<ParamHeader> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), &mut found);
    found
}

fn walk(schema: &Value, path: &mut Vec<String>, found: &mut Vec<ParamHeader>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        path.push(name.clone());
        if let Some(suffix) = property.get("x-mcp-header").and_then(Value::as_str) {
            found.push(ParamHeader {
                header: format!("mcp-param-{}", suffix.to_ascii_lowercase()),
                path: path.clone(),
            });
        }
        walk(property, path, found);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotated_properties_are_found_nested_ones_too_and_values_read_by_path() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"},
            "target": {"type": "object", "properties": {
                "tenant": {"type": "integer", "x-mcp-header": "Tenant-Id"}}},
            "tags": {"type": "array", "items": {"x-mcp-header": "Tag"}},
        }});
        let found = declared(&schema);
        let headers: Vec<_> = found.iter().map(|p| p.header.as_str()).collect();
        assert_eq!(headers, ["mcp-param-region", "mcp-param-tenant-id"]);
        let arguments = json!({"region": "eu-west1", "target": {"tenant": 7}});
        assert_eq!(found[0].value(Some(&arguments)), Some(&json!("eu-west1")));
        assert_eq!(found[1].value(Some(&arguments)), Some(&json!(7)));
        assert_eq!(found[1].value(Some(&json!({"target": 1}))), None);
        assert_eq!(found[0].value(None), None);
        assert!(declared(&json!({"type": "object"})).is_empty());
    }
}
