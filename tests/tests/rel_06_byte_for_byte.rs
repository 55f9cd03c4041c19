//! Issue 12, item 6: the proxy does not change the data it carries. `params` and `result` reach
//! the other side byte for byte: big integers beyond 2^64 and above 2^53, `-0.0`, exponents,
//! escaped and unescaped Unicode, key order, whitespace and a large `structuredContent`. Only
//! the members the proxy owns (the JSON-RPC request id, `_meta.progressToken`) are rewritten.
//! The fault upstream answers `tools/call raw` with a result text it never parses and records
//! every request body as it arrived.

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{RawReply, config, mcp_url, open_session, post_with, start_ready};

/// Data that a parse-and-serialize round trip through `serde_json::Value` changes.
const TRICKY: &str = r#"{"z":123456789012345678901234567890,"a":9007199254740993,"neg":-0.0,"exp":1e2,"EXP":2.50E-3,"tiny":5e-324,"escaped":"\u00e9\ud83d\ude00\/","plain":"é😀 \"q\"","order":{"b" : 1,
 "a":[1.0, 2,-3]}}"#;

/// A result as an upstream might write it: the tricky data in `structuredContent`, plus about
/// 1 MiB of decimals written with trailing zeros.
fn result_text() -> String {
    let numbers: Vec<String> = (0..100_000).map(|n| format!("{n}.50")).collect();
    format!(
        r#"{{"content":[{{"type":"text","text":"ok \u00e9"}}],"structuredContent":{{"tricky":{TRICKY},"bulk":[{}]}},"isError":false}}"#,
        numbers.join(",")
    )
}

fn call_text(id: &str, meta: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"raw","arguments":{TRICKY}{meta}}}}}"#
    )
}

/// The exact text of the last message of a reply: the JSON body, or the data of the last SSE
/// event (multi-line data joined with `\n`, as the SSE specification says).
fn last_message_text(reply: &RawReply) -> String {
    if !reply
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return reply.text.clone();
    }
    let mut events: Vec<Vec<&str>> = vec![Vec::new()];
    for line in reply.text.split('\n') {
        if line.is_empty() {
            events.push(Vec::new());
        } else if let Some(data) = line.strip_prefix("data:") {
            let data = data.strip_prefix(' ').unwrap_or(data);
            events.last_mut().expect("an event").push(data);
        }
    }
    events
        .iter()
        .rev()
        .find(|event| !event.is_empty())
        .map(|event| event.join("\n"))
        .expect("an SSE event with data")
}

/// One call through the proxy; asserts the upstream got the client's text with only the id
/// (and the progress token) rewritten, and the client got the upstream's text with only the
/// id rewritten.
async fn assert_round_trip(sse_upstream: bool, accept: &str, meta: &str, upstream_token: &str) {
    let upstream = FaultUpstream::builder().start().await;
    let result = result_text();
    upstream.update(|f| {
        f.raw_result = Some(result.clone());
        f.sse_replies = sse_upstream;
    });
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;

    let client_text = call_text(r#""client-7""#, meta);
    let reply = post_with(&url, Some(&session), &[("accept", accept)], &client_text).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        &reply.text[..reply.text.len().min(300)]
    );

    let sent = upstream
        .received()
        .into_iter()
        .find(|r| r.message["params"]["name"] == "raw")
        .expect("the call reached the upstream");
    let upstream_id = sent.message["id"].to_string();
    let expected_upstream = call_text(&upstream_id, &meta.replace("tok-1", upstream_token));
    assert!(
        sent.raw == expected_upstream,
        "the upstream got a changed request:\n got: {}\nwant: {}",
        &sent.raw,
        expected_upstream
    );

    let expected_client = format!(r#"{{"jsonrpc":"2.0","id":"client-7","result":{result}}}"#);
    let got = last_message_text(&reply);
    assert!(
        got == expected_client,
        "the client got a changed result (first difference at byte {:?}):\n got: {}…\nwant: {}…",
        got.bytes()
            .zip(expected_client.bytes())
            .position(|(a, b)| a != b),
        &got[..got.len().min(400)],
        &expected_client[..expected_client.len().min(400)],
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_06_json_reply_params_and_result_byte_for_byte() {
    assert_round_trip(false, "application/json, text/event-stream", "", "").await;
}

#[tokio::test]
async fn rel_06_sse_reply_params_and_result_byte_for_byte() {
    assert_round_trip(true, "application/json, text/event-stream", "", "").await;
}

#[tokio::test]
async fn rel_06_json_only_client_of_an_sse_upstream_byte_for_byte() {
    assert_round_trip(true, "application/json", "", "").await;
}

#[tokio::test]
async fn rel_06_progress_token_is_the_only_member_rewritten_in_meta() {
    // The upstream sees `berth-<upstream id>` as the token; `_meta`'s other members and their
    // spelling stay.
    let meta = r#","_meta":{"x":1E3,"progressToken":"tok-1","y":"\u0041"}"#;
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_with(&url, Some(&session), &[], &call_text("8", meta)).await;
    assert_eq!(reply.status, 200);
    let sent = upstream
        .received()
        .into_iter()
        .find(|r| r.message["params"]["name"] == "raw")
        .expect("the call reached the upstream");
    let upstream_id = sent.message["id"].to_string();
    let token = format!("berth-{upstream_id}");
    let expected = call_text(&upstream_id, &meta.replace("tok-1", &token));
    assert_eq!(sent.raw, expected);
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_06_stdio_child_params_and_result_byte_for_byte() {
    use berth_crds::SessionStrategy;
    use berth_tests::stdio::{Marker, config as stdio_config, fault_child, start as start_stdio};

    // Over stdio a message is one line (MCP "Transports: stdio"), so the one line break of
    // TRICKY, JSON whitespace, becomes a space on the way to the child; nothing else changes.
    let dir = tempfile::tempdir().expect("temp dir");
    let result = result_text().replace('\n', " ");
    std::fs::write(dir.path().join("result"), &result).expect("write result");
    let marker = Marker::new("rel06");
    let raw_dir = dir.path().to_string_lossy().into_owned();
    let argv = fault_child(&marker, &["--raw-dir", &raw_dir]);
    for strategy in [SessionStrategy::PerClient, SessionStrategy::Shared] {
        let proxy = start_stdio(&stdio_config(argv.clone(), strategy), &[]).await;
        berth_tests::proxy::wait_ready(&proxy, std::time::Duration::from_secs(20)).await;
        let url = mcp_url(&proxy);
        let session = open_session(&url).await;
        let reply = post_with(&url, Some(&session), &[], &call_text(r#""c-9""#, "")).await;
        assert_eq!(reply.status, 200, "{strategy:?}");
        let expected = format!(r#"{{"jsonrpc":"2.0","id":"c-9","result":{result}}}"#);
        assert!(
            last_message_text(&reply) == expected,
            "{strategy:?}: the client got a changed result"
        );
        let received = std::fs::read_to_string(dir.path().join("received")).expect("received");
        let line = received
            .lines()
            .rfind(|line| line.contains(r#""name":"raw""#))
            .expect("the call reached the child");
        let id: serde_json::Value =
            serde_json::from_str::<serde_json::Value>(line).expect("json line")["id"].clone();
        assert_eq!(
            line,
            call_text(&id.to_string(), "").replace('\n', " "),
            "{strategy:?}: the child got a changed request"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn rel_06_results_and_arguments_a_json_value_cannot_hold_pass_unchanged() {
    // Nesting past serde_json's 128 levels, a number beyond f64 and a lone surrogate: valid
    // JSON that the proxy carries as text (found by a new user: a 130-deep result came back as
    // a retryable -32012 although the tool had run).
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let odd = format!(r#"{{"deep":{deep},"huge":1e400,"lone":"\ud800"}}"#);
    let result = format!(r#"{{"content":[],"structuredContent":{odd}}}"#);
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.raw_result = Some(result.clone()));
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let client_text = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"raw","arguments":{odd}}}}}"#
    );
    let reply = post_with(&url, Some(&session), &[], &client_text).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        last_message_text(&reply),
        format!(r#"{{"jsonrpc":"2.0","id":3,"result":{result}}}"#)
    );
    let sent = upstream
        .received()
        .into_iter()
        .find(|r| r.raw.contains(r#""name":"raw""#))
        .expect("the call reached the upstream");
    let at = sent.raw.find(r#","method""#).expect("method");
    assert_eq!(
        &sent.raw[at..],
        &client_text[client_text.find(r#","method""#).expect("method")..]
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_06_progress_tokens_come_back_as_the_client_wrote_them() {
    // A progress token that a `serde_json::Value` would change: the client must get back the
    // text it sent, or it cannot match its progress notifications (found by a new user: a lone
    // surrogate came back as `null`, `18446744073709551617` as `1.8446744073709552e+19`, `-0`
    // as `-0.0`, `1e2` as `100.0`).
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let tokens = [
        r#""\ud800""#,
        "18446744073709551617",
        "-0",
        "1e2",
        r#""\u00e9""#,
        r#""tok-1""#,
    ];
    for (n, token) in tokens.iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"slow","arguments":{{"ms":10,"steps":2}},"_meta":{{"progressToken":{token}}}}}}}"#
        );
        let reply = post_with(&url, Some(&session), &[], &body).await;
        assert_eq!(reply.status, 200, "{token}: {}", reply.text);
        let progress: Vec<&str> = reply
            .text
            .lines()
            .filter(|line| line.contains("notifications/progress"))
            .collect();
        assert_eq!(progress.len(), 2, "{token}: {}", reply.text);
        for line in progress {
            assert!(
                line.contains(&format!(r#""progressToken":{token}"#)),
                "{token} came back changed: {line}"
            );
        }
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_06_a_member_name_no_string_can_hold_passes_with_the_request_id() {
    // A lone UTF-16 surrogate in an envelope member's name: valid JSON that no `str` holds
    // (found by a new user: the whole message read as "not a JSON object" and was refused
    // without its request id; the upstream itself accepts it).
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| f.raw_result = Some(r#"{"content":[]}"#.to_owned()));
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let body = r#"{"jsonrpc":"2.0","id":24,"method":"tools/call","\ud800":1,"params":{"name":"raw","arguments":{}}}"#;
    let reply = post_with(&url, Some(&session), &[], body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        last_message_text(&reply),
        r#"{"jsonrpc":"2.0","id":24,"result":{"content":[]}}"#
    );
    let sent = upstream
        .received()
        .into_iter()
        .find(|r| r.raw.contains(r#""name":"raw""#))
        .expect("the call reached the upstream");
    assert!(sent.raw.contains(r#","\ud800":1,"#), "{}", sent.raw);
    proxy.shutdown().await;
}

#[tokio::test]
async fn rel_06_a_lone_surrogate_in_a_routed_value_is_refused_as_what_it_is() {
    // A lone UTF-16 surrogate in the method, the request id or the tool's name: the proxy
    // cannot route on it, so it refuses, saying why (found by a new user: the refusal said the
    // member was missing or not a string, though it was there and a string).
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&config(&upstream.url, "10s")).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"\ud800x","arguments":{}}}"#,
            "params.name holds a lone UTF-16 surrogate",
            serde_json::json!(31),
            (200, -32602),
        ),
        (
            r#"{"jsonrpc":"2.0","id":32,"method":"tools/\udc00"}"#,
            "method holds a lone UTF-16 surrogate",
            serde_json::json!(32),
            (400, -32600),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"\ud800","method":"tools/list"}"#,
            "id holds a lone UTF-16 surrogate",
            serde_json::Value::Null,
            (400, -32600),
        ),
    ];
    for (body, says, id, (status, code)) in cases {
        let reply = post_with(&url, Some(&session), &[], body).await;
        assert_eq!(reply.status, status, "{body}: {}", reply.text);
        let message: serde_json::Value =
            serde_json::from_str(&last_message_text(&reply)).expect("a JSON-RPC reply");
        assert_eq!(message["id"], id, "{body}: {}", reply.text);
        assert_eq!(message["error"]["code"], code, "{body}: {}", reply.text);
        let text = message["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains(says), "{body}: {text}");
    }
    assert!(
        !upstream
            .received()
            .iter()
            .any(|r| r.raw.contains(r"\ud800") || r.raw.contains(r"\udc00")),
        "nothing the proxy could not route went upstream"
    );
    proxy.shutdown().await;
}
