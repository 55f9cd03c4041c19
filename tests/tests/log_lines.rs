//! Log lines cannot be forged (issue 39, item 7): the `berth-proxy` binary, with OAuth against
//! a real ORY Hydra and per-tool grants, logs an ungranted `tools/call` whose tool name holds a
//! newline and an ANSI escape sequence on one line of its standard error, escaped.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use berth_crds::ToolsPolicySpec;
use berth_tests::fault::FaultUpstream;
use berth_tests::hydra::Hydra;
use berth_tests::proxy::{call, config, post_with};
use berth_tests::proxy_process::{ProxyProcess, proxy_bin};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const AUDIENCE: &str = "https://logs.berth.test/mcp";
const CLIENT: (&str, &str) = ("log-agent", "log-secret-0123456789");
/// What a forged line would start with: a timestamp and a level, as the proxy's own lines do.
const FORGED: &str = "2026-12-07T00:00:00.000000Z  WARN berth_proxy: forged";

#[tokio::test]
async fn log_tool_name_with_newline_and_escape_never_forges_a_line() {
    berth_proxy::install_crypto_provider();
    let upstream = FaultUpstream::start().await;
    let hydra = Hydra::start().await;
    hydra
        .create_client(CLIENT.0, CLIENT.1, "mcp:tools", &[AUDIENCE])
        .await;
    let token = hydra.token(CLIENT.0, CLIENT.1, "mcp:tools", AUDIENCE).await;
    let mut cfg = config(&upstream.url, "30s");
    cfg.tools = serde_yaml::from_str::<ToolsPolicySpec>(
        "{grants: [{tools: [echo], subjects: [log-agent]}]}",
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
        &[("RUST_LOG", "info")],
        Stdio::null(),
        Stdio::piped(),
        &client,
    )
    .await
    .expect("proxy starts");
    let mut stderr = BufReader::new(proxy.take_stderr().expect("piped stderr")).lines();

    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "log-test", "version": "0"}}});
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
    let tool = format!("echo-not-granted\n{FORGED} \x1b[31mred\x1b[0m");
    let reply = post_with(
        &proxy.mcp_url,
        Some(&session),
        &auth,
        &call(json!(5), &tool, json!({})),
    )
    .await;
    assert_eq!(
        reply.last()["error"]["data"]["outcome"],
        "denied",
        "{}",
        reply.text
    );

    let mut lines = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !lines
        .iter()
        .any(|l: &String| l.contains("tools/call denied"))
    {
        let line = tokio::time::timeout_at(deadline, stderr.next_line())
            .await
            .expect("the denial is logged within 10 s")
            .expect("read stderr")
            .expect("stderr open");
        lines.push(line);
    }
    // What a raw newline would have put on the next line arrives with the same write.
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_millis(500), stderr.next_line()).await
    {
        lines.push(line);
    }
    let text = lines.join("\n");
    assert!(!text.contains('\x1b'), "no raw escape code: {text:?}");
    for line in &lines {
        assert!(!line.starts_with(FORGED), "a forged line: {text:?}");
    }
    let denial = lines
        .iter()
        .find(|l| l.contains("tools/call denied"))
        .expect("the denial line");
    assert!(
        denial.contains(r"echo-not-granted\n2026-12-07") && denial.contains(r"\u{1b}[31m"),
        "the tool name escaped on the denial's own line: {denial:?}"
    );
}
