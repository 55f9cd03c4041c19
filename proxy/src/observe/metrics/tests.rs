use super::*;

#[test]
fn tool_label_unknown_tool_is_other() {
    let m = Metrics::new();
    m.set_tool_names(["echo"]);
    assert_eq!(m.tool_label("echo"), "echo");
    assert_eq!(m.tool_label("session-1234"), OTHER);
}

#[test]
fn tool_names_are_capped() {
    let m = Metrics::new();
    let names: Vec<String> = (0..MAX_TOOL_LABELS + 10).map(|i| format!("t{i}")).collect();
    m.set_tool_names(names.iter().map(String::as_str));
    assert_eq!(m.tools_discovered.get(), MAX_TOOL_LABELS as i64);
}

#[test]
fn record_tool_error_counts_once_under_tool_error() {
    let m = Metrics::new();
    m.set_tool_names(["echo"]);
    m.record(
        "tools/call",
        Some("echo"),
        Outcome::ToolError,
        Duration::from_millis(3),
        Era::Legacy,
    );
    let text = m.render();
    assert!(
        text.contains(r#"berth_proxy_tool_calls_total{outcome="tool_error",tool="echo"} 1"#),
        "{text}"
    );
    assert!(!text.contains(r#"outcome="ok""#), "{text}");
}

#[test]
fn record_unknown_method_is_other() {
    let m = Metrics::new();
    m.record(
        "x/secret-42",
        None,
        Outcome::Ok,
        Duration::ZERO,
        Era::Modern,
    );
    assert!(
        m.render()
            .contains(r#"berth_proxy_requests_total{era="modern",method="other",outcome="ok"} 1"#)
    );
}
