//! Issue 12, item 8 (found by a new user): a member name given twice in the envelope, in
//! `params` or in `params._meta` is refused with 400 and -32600, and nothing reaches the
//! upstream. Parsers differ on which duplicate counts: with `"name":"bad","name":"echo"` the
//! proxy's policy saw `echo` while an upstream that keeps the first would run `bad`.

use berth_crds::ToolsPolicySpec;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, mcp_url, open_session, post_raw, start_ready};
use serde_json::json;

/// The proxy's config in front of `url` with a tool policy that allows only `echo`.
fn allowing_echo(url: &str) -> berth_crds::ProxyConfig {
    let mut cfg = config(url, "10s");
    cfg.tools = ToolsPolicySpec {
        allow: Some(vec!["echo".into()]),
        ..ToolsPolicySpec::default()
    };
    cfg
}

#[tokio::test]
async fn rel_08_duplicate_member_names_are_refused_and_never_reach_the_upstream() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&allowing_echo(&upstream.url)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let before = upstream.received().len();
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bad","name":"echo","arguments":{"message":"x"}}}"#,
            json!(4),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","method":"ping","params":{"name":"echo"}}"#,
            json!(5),
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"progressToken":1,"progressToken":2}}}"#,
            json!(6),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            json!(null),
        ),
    ];
    for (body, id) in cases {
        let reply = post_raw(&url, Some(&session), body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert_eq!(reply.last()["id"], id, "{body}");
        assert_eq!(reply.last()["error"]["code"], json!(-32600), "{body}");
    }
    assert_eq!(
        upstream.received().len(),
        before,
        "nothing reached the upstream"
    );
    // Duplicates inside a tool's arguments belong to the tool: forwarded as sent.
    let inner = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"a","message":"b"}}}"#;
    let reply = post_raw(&url, Some(&session), inner).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    proxy.shutdown().await;
}

/// Found by a new user: what an upstream sends is read by the last duplicate too, but was
/// passed on as written, so a client that keeps the first read the upstream's own request id
/// (`"id":<client's>,"id":999` went out as is). Such a reply now ends the call with an error
/// under the client's id; over JSON and over SSE alike.
#[tokio::test]
async fn rel_08_an_upstream_reply_with_a_name_twice_is_not_passed_on() {
    for sse in [false, true] {
        let upstream = FaultUpstream::builder().start().await;
        upstream.update(|f| {
            f.raw_result = Some(r#"{"content":[]},"id":999"#.to_owned());
            f.sse_replies = sse;
        });
        let proxy = start_ready(&config(&upstream.url, "10s")).await;
        let url = mcp_url(&proxy);
        let session = open_session(&url).await;
        let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"raw","arguments":{}}}"#;
        let reply = post_raw(&url, Some(&session), call).await;
        assert_eq!(reply.last()["id"], json!(9), "sse {sse}: {}", reply.text);
        assert!(
            reply.last()["error"].is_object(),
            "sse {sse}: {}",
            reply.text
        );
        assert!(!reply.text.contains("999"), "sse {sse}: {}", reply.text);
        proxy.shutdown().await;
    }
}

/// Found by a new user: a `tools/list` result in which a tool's name is given twice
/// (`"name":"hidden","name":"echo"`) passed the tool policy as `echo` and went out as written,
/// so a client that keeps the first duplicate was shown `hidden`. While a policy can hide tools,
/// such a listing goes out as the proxy read it.
#[tokio::test]
async fn rel_08_a_tool_listing_with_a_name_twice_is_shown_as_the_policy_read_it() {
    let upstream = FaultUpstream::builder().start().await;
    upstream.update(|f| {
        f.raw_tools_list = Some(
            r#"{"tools":[{"name":"hidden","name":"echo","inputSchema":{"type":"object"}}]}"#
                .to_owned(),
        );
    });
    let proxy = start_ready(&allowing_echo(&upstream.url)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let list = r#"{"jsonrpc":"2.0","id":10,"method":"tools/list"}"#;
    let reply = post_raw(&url, Some(&session), list).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.last()["result"]["tools"],
        json!([{"name":"echo","inputSchema":{"type":"object"}}]),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("hidden"), "{}", reply.text);
    proxy.shutdown().await;
}

/// Issue 39, item 8: a refusal repeats at most 256 bytes of what the client chose. A
/// `tools/call` naming a hidden tool of 1 MiB, or naming a member twice whose name is 1 MiB,
/// used to come back whole in the message and again in `data` (2 MiB for 1 MiB asked).
#[tokio::test]
async fn refusals_repeat_a_bounded_part_of_a_huge_client_chosen_name() {
    let upstream = FaultUpstream::builder().start().await;
    let proxy = start_ready(&allowing_echo(&upstream.url)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let huge = "t".repeat(1 << 20);
    let hidden = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": huge, "arguments": {}}})
    .to_string();
    let twice = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"echo","{huge}":1,"{huge}":2}}}}"#
    );
    for (body, id) in [(hidden, 7), (twice, 8)] {
        let reply = post_raw(&url, Some(&session), &body).await;
        assert_eq!(reply.last()["id"], json!(id), "{}", reply.status);
        assert!(
            reply.text.len() < 2048,
            "a refusal of {} bytes for a 1 MiB name",
            reply.text.len()
        );
        assert!(
            reply.text.contains("[truncated"),
            "says it cut: {}",
            reply.text
        );
    }
    proxy.shutdown().await;
}
