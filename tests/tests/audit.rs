//! Audit events (issue 15, `docs/audit.md`): the `berth-proxy` binary, as a pod runs it, with
//! OAuth against a real ORY Hydra and per-tool grants, writes one JSON line on stdout per
//! `tools/call` and per refused request. The test reads the process's real stdout and checks
//! every documented field, and that neither the arguments nor the token appear in it.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use berth_crds::ToolsPolicySpec;
use berth_crds::proxy_config::audit::AuditLog;
use berth_tests::fault::FaultUpstream;
use berth_tests::fault::restart::RestartableUpstream;
use berth_tests::hydra::Hydra;
use berth_tests::proxy::{call, config, open_session, post_with};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The audience the proxy accepts: any URI naming this resource will do (RFC 8707).
const AUDIENCE: &str = "https://audit.berth.test/mcp";
const CLIENT: (&str, &str) = ("audit-agent", "audit-secret-0123456789");
const INTRUDER: (&str, &str) = ("audit-intruder", "intruder-secret-0123456789");

/// `sha256:<hex>` of the canonical JSON (keys sorted) of `value`, as documented.
fn digest(value: &Value) -> String {
    // serde_json's map is ordered by key (no `preserve_order` here), so `to_string` is canonical.
    let canonical: Value = serde_json::from_str(&value.to_string()).expect("json");
    let hash = Sha256::digest(canonical.to_string().as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[tokio::test]
async fn audit_events_name_the_caller_tool_digest_and_outcome_and_never_the_arguments() {
    berth_proxy::install_crypto_provider();
    let upstream = FaultUpstream::start().await;
    let hydra = Hydra::start().await;
    hydra
        .create_client(CLIENT.0, CLIENT.1, "mcp:tools", &[AUDIENCE])
        .await;
    let token = hydra.token(CLIENT.0, CLIENT.1, "mcp:tools", AUDIENCE).await;
    hydra
        .create_client(INTRUDER.0, INTRUDER.1, "mcp:tools", &[AUDIENCE])
        .await;
    let intruder = hydra
        .token(INTRUDER.0, INTRUDER.1, "mcp:tools", AUDIENCE)
        .await;

    let mut cfg = config(&upstream.url, "30s");
    cfg.audit = AuditLog::Stdout;
    cfg.tools = serde_yaml::from_str::<ToolsPolicySpec>(
        "{grants: [{tools: [echo, bad], subjects: [audit-agent]}]}",
    )
    .expect("grants");
    cfg.downstream_auth = Some(hydra.downstream_auth(AUDIENCE));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.yaml");
    std::fs::write(&path, cfg.to_yaml().expect("yaml")).expect("write config");
    let args: Vec<OsString> = vec!["--config".into(), path.into()];
    let client = reqwest::Client::new();
    let mut proxy = ProxyProcess::start_with_stdout(
        &proxy_bin(None, false).expect("the proxy binary"),
        &args,
        &[("BERTH_MCPUPSTREAM", "team-a/weather")],
        Stdio::piped(),
        Stdio::inherit(),
        &client,
    )
    .await
    .expect("proxy starts");
    let mut stdout = BufReader::new(proxy.take_stdout().expect("piped stdout")).lines();

    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "audit-test", "version": "0"}}});
    let opened = post_with(&proxy.mcp_url, None, &auth, &init.to_string()).await;
    let session = opened.session.clone().expect("a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_with(
        &proxy.mcp_url,
        Some(&session),
        &auth,
        &initialized.to_string(),
    )
    .await;

    let secret = json!({"message": "the launch code is 0000", "extra": {"z": 1, "a": [2, 3]}});
    let calls = [
        (json!(11), "echo", secret.clone()),
        (json!("twelve"), "bad", json!({})),
        (json!(13), "slow", json!({"ms": 1})),
    ];
    for (id, tool, arguments) in &calls {
        let reply = post_with(
            &proxy.mcp_url,
            Some(&session),
            &auth,
            &call(id.clone(), tool, arguments.clone()),
        )
        .await;
        assert_eq!(reply.last()["id"], *id, "{}", reply.text);
    }
    // Another identity's call on this session: 404, as for an unknown session, and audited.
    let theirs = format!("Bearer {intruder}");
    let hijack = post_with(
        &proxy.mcp_url,
        Some(&session),
        &[("authorization", theirs.as_str())],
        &call(json!(14), "echo", json!({"message": "mine now"})),
    )
    .await;
    assert_eq!(hijack.status, 404, "{}", hijack.text);
    // A request without a token: refused before its body is read.
    let refused = post_with(&proxy.mcp_url, None, &[], &init.to_string()).await;
    assert_eq!(refused.status, 401, "{}", refused.text);

    let mut lines = Vec::new();
    while lines.len() < 5 {
        let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
            .await
            .expect("an audit line within 10 s")
            .expect("read stdout")
            .expect("stdout open");
        lines.push(line);
    }
    let text = lines.join("\n");
    assert!(
        !text.contains("launch code"),
        "arguments never logged: {text}"
    );
    assert!(!text.contains(&token), "the token is never logged");
    assert!(!text.contains("mine now"), "arguments never logged: {text}");
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();

    let expected = [
        (json!(11), "echo", "allow", "ok"),
        (json!("twelve"), "bad", "allow", "tool_error"),
        (json!(13), "slow", "deny", "denied"),
    ];
    for (event, ((id, tool, decision, outcome), (_, _, arguments))) in
        events.iter().zip(expected.iter().zip(&calls))
    {
        assert_eq!(event["event"], "tools/call", "{event}");
        assert_eq!(event["mcpupstream"], "team-a/weather", "{event}");
        assert_eq!(event["session_id"], json!(session), "{event}");
        assert_eq!(event["request_id"], *id, "{event}");
        assert_eq!(event["subject"], CLIENT.0, "{event}");
        assert_eq!(event["client_id"], CLIENT.0, "{event}");
        assert_eq!(event["tool"], *tool, "{event}");
        assert_eq!(event["arguments_sha256"], digest(arguments), "{event}");
        assert_eq!(event["decision"], *decision, "{event}");
        assert_eq!(event["outcome"], *outcome, "{event}");
        let ts = event["ts"].as_str().expect("ts");
        assert!(
            humantime::parse_rfc3339(ts).is_ok() && ts.ends_with('Z'),
            "ts is RFC 3339 UTC: {ts}"
        );
        let duration = event["duration_ms"].as_f64().expect("duration_ms");
        assert!((0.0..10_000.0).contains(&duration), "{event}");
    }
    let hijack = &events[3];
    assert_eq!(hijack["event"], "tools/call", "{hijack}");
    assert_eq!(hijack["subject"], INTRUDER.0, "{hijack}");
    assert_eq!(hijack["session_id"], json!(session), "{hijack}");
    assert_eq!(hijack["request_id"], 14, "{hijack}");
    assert_eq!(hijack["decision"], "deny", "{hijack}");
    assert_eq!(hijack["outcome"], "rejected", "{hijack}");
    let refusal = &events[4];
    assert_eq!(refusal["event"], "request", "{refusal}");
    assert_eq!(refusal["decision"], "deny", "{refusal}");
    assert_eq!(refusal["outcome"], "unauthorized", "{refusal}");
    assert_eq!(refusal["subject"], Value::Null, "{refusal}");
    assert_eq!(refusal["tool"], Value::Null, "{refusal}");
    assert_eq!(refusal["mcpupstream"], "team-a/weather", "{refusal}");
}

/// The audit lines `berth-proxy --upstream-url U [extra]` writes on stdout for one
/// `tools/call`, read to the end after a graceful stop (SIGTERM), so a line still queued for
/// the writer thread is counted.
async fn audit_lines_of_one_call(extra: &[&str]) -> Vec<String> {
    berth_proxy::install_crypto_provider();
    let upstream = FaultUpstream::start().await;
    let mut args: Vec<OsString> = vec!["--upstream-url".into(), upstream.url.clone().into()];
    args.extend(extra.iter().map(OsString::from));
    let client = reqwest::Client::new();
    let mut proxy = ProxyProcess::start_with_stdout(
        &proxy_bin(None, false).expect("the proxy binary"),
        &args,
        &[],
        Stdio::piped(),
        Stdio::inherit(),
        &client,
    )
    .await
    .expect("proxy starts");
    let stdout = proxy.take_stdout().expect("piped stdout");
    let session = open_session(&proxy.mcp_url).await;
    let reply = post_with(
        &proxy.mcp_url,
        Some(&session),
        &[],
        &call(json!(7), "echo", json!({"message": "hi"})),
    )
    .await;
    assert_eq!(reply.last()["id"], 7, "{}", reply.text);
    let pid = proxy.pid().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "SIGTERM sent");
    let mut lines = Vec::new();
    let mut reader = BufReader::new(stdout).lines();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(20), reader.next_line())
        .await
        .expect("stdout closes within 20 s of SIGTERM")
        .expect("read stdout")
    {
        lines.push(line);
    }
    lines
}

/// `--audit-log` (standalone mode, as for a config file's `audit`): the default writes the
/// call's audit line, `Off` writes nothing on stdout.
#[tokio::test]
async fn audit_log_flag_chooses_stdout_or_off() {
    let default = audit_lines_of_one_call(&[]).await;
    assert_eq!(default.len(), 1, "one audit line by default: {default:?}");
    let event: Value = serde_json::from_str(&default[0]).expect("a JSON line");
    assert_eq!(event["tool"], "echo", "{event}");
    assert_eq!(event["request_id"], 7, "{event}");
    let off = audit_lines_of_one_call(&["--audit-log", "Off"]).await;
    assert!(
        off.is_empty(),
        "no audit line with --audit-log Off: {off:?}"
    );
}

/// A call no grant names for its caller is `denied` (audited `deny`) whatever the upstream's
/// state: with the upstream down it is not `upstream_unavailable` / `allow` (issue 39).
#[tokio::test]
async fn audit_ungranted_call_with_the_upstream_down_is_denied() {
    berth_proxy::install_crypto_provider();
    let mut upstream = RestartableUpstream::start(FaultUpstream::builder()).await;
    let hydra = Hydra::start().await;
    hydra
        .create_client(CLIENT.0, CLIENT.1, "mcp:tools", &[AUDIENCE])
        .await;
    let token = hydra.token(CLIENT.0, CLIENT.1, "mcp:tools", AUDIENCE).await;
    let mut cfg = config(&upstream.url, "30s");
    cfg.audit = AuditLog::Stdout;
    cfg.timeouts.connect = berth_crds::DurationString::new("2s");
    cfg.tools = serde_yaml::from_str::<ToolsPolicySpec>(
        "{grants: [{tools: [echo], subjects: [audit-agent]}]}",
    )
    .expect("grants");
    cfg.downstream_auth = Some(hydra.downstream_auth(AUDIENCE));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.yaml");
    std::fs::write(&path, cfg.to_yaml().expect("yaml")).expect("write config");
    let args: Vec<OsString> = vec!["--config".into(), path.into()];
    let client = reqwest::Client::new();
    let mut proxy = ProxyProcess::start_with_stdout(
        &proxy_bin(None, false).expect("the proxy binary"),
        &args,
        &[],
        Stdio::piped(),
        Stdio::inherit(),
        &client,
    )
    .await
    .expect("proxy starts");
    let mut stdout = BufReader::new(proxy.take_stdout().expect("piped stdout")).lines();
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "audit-test", "version": "0"}}});
    let opened = post_with(&proxy.mcp_url, None, &auth, &init.to_string()).await;
    let session = opened.session.clone().expect("a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_with(
        &proxy.mcp_url,
        Some(&session),
        &auth,
        &initialized.to_string(),
    )
    .await;

    upstream.kill();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while proxy.ready(&client).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy sees the upstream down within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reply = post_with(
        &proxy.mcp_url,
        Some(&session),
        &auth,
        &call(json!(21), "slow", json!({"ms": 1})),
    )
    .await;
    assert_eq!(
        reply.last()["error"]["data"]["outcome"],
        "denied",
        "{}",
        reply.text
    );
    let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("an audit line within 10 s")
        .expect("read stdout")
        .expect("stdout open");
    let event: Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(event["tool"], "slow", "{event}");
    assert_eq!(event["decision"], "deny", "{event}");
    assert_eq!(event["outcome"], "denied", "{event}");
}
