//! MCP tasks (revision 2025-11-25, "Tasks") over a shared upstream session.
//!
//! A task belongs to the requestor that created it, and `tasks/list`, `tasks/get`,
//! `tasks/result` and `tasks/cancel` reach every task of the session they arrive on. With the
//! `Shared` strategy every client speaks through the one upstream session, so the upstream sees
//! one requestor: forwarded as they are, client B could list, read and cancel client A's tasks.
//! Until the proxy scopes task ids per client, a shared session does not offer tasks: the
//! `tasks` capability is removed from the `initialize` result clients get, `tasks/*` requests
//! get -32601 and task-augmented requests (`params.task`) get -32602, all with outcome
//! `rejected` and never forwarded. `PerClient` sessions are the client's own and pass tasks
//! through unchanged.

use serde_json::Value;

use crate::wire::jsonrpc::{self, WireMessage};

/// Removes the `tasks` server capability from an upstream `InitializeResult` before a client
/// of a shared session sees it.
pub fn hide_capability(result: &mut Value) {
    if let Some(capabilities) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        capabilities.remove("tasks");
    }
}

/// Why a request on a shared session is refused: `(JSON-RPC code, message)`, or `None` when it
/// does not involve tasks.
pub fn refusal(method: &str, body: &WireMessage) -> Option<(i64, &'static str)> {
    if method.starts_with("tasks/") {
        return Some((
            jsonrpc::METHOD_NOT_FOUND,
            "tasks are not served over a shared upstream session (session.strategy Shared); use PerClient",
        ));
    }
    body.member_text(&["params", "task"]).map(|_| {
            (
                jsonrpc::INVALID_PARAMS,
                "task-augmented requests are not served over a shared upstream session (session.strategy Shared); send the request without params.task, or use PerClient",
            )
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(value: Value) -> WireMessage {
        value.into()
    }

    #[test]
    fn tasks_methods_and_task_augmented_requests_are_refused_others_pass() {
        let plain = body(json!({"params": {"name": "echo"}}));
        assert_eq!(refusal("tools/call", &plain), None);
        assert_eq!(
            refusal("tasks/list", &plain).map(|r| r.0),
            Some(jsonrpc::METHOD_NOT_FOUND)
        );
        let augmented = body(json!({"params": {"name": "echo", "task": {"ttl": 1000}}}));
        assert_eq!(
            refusal("tools/call", &augmented).map(|r| r.0),
            Some(jsonrpc::INVALID_PARAMS)
        );
    }

    #[test]
    fn hide_capability_removes_only_tasks() {
        let mut result = json!({"capabilities": {"tools": {}, "tasks": {"list": {}}}});
        hide_capability(&mut result);
        assert_eq!(result, json!({"capabilities": {"tools": {}}}));
    }
}
