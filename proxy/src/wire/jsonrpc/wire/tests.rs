//! Unit tests of [`WireMessage`]: byte-for-byte text, splicing, partial views, duplicate
//! members, batches.

use serde_json::json;

use super::*;

/// Numbers and strings a `Value` round trip changes: big integers, `-0.0`, exponents,
/// escapes, key order, whitespace.
const TRICKY: &str = r#"{"z":123456789012345678901234567890,"a":9007199254740993,"n":-0.0,"e":1e2,"E":2.50E-3,"u":"\u00e9\ud83d\ude00 é","s":"\/x","k":{"b":1,"a":[1.0, 2]}}"#;

#[test]
fn parse_keeps_the_exact_text() {
    let message = WireMessage::parse(format!(" \n{TRICKY}\r\n").as_bytes()).expect("parse");
    assert_eq!(message.text(), TRICKY);
    assert_eq!(message["k"]["b"], json!(1));
}

#[test]
fn insert_member_adds_one_member_and_keeps_every_other_byte() {
    let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{TRICKY}}}"#);
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert!(message.insert_member(&["result"], "resultType", &json!("complete")));
    assert_eq!(
        message.text(),
        text.replace(r#""result":{"#, r#""result":{"resultType":"complete","#)
    );
    assert_eq!(message["result"]["resultType"], json!("complete"));
    assert!(
        !message.insert_member(&["result"], "resultType", &json!("x")),
        "present"
    );
    assert!(
        !message.insert_member(&["id"], "k", &json!(1)),
        "not an object"
    );
    let mut empty = WireMessage::parse(br#"{"id":2,"result": {} }"#).expect("parse");
    assert!(empty.insert_member(&["result"], "ttlMs", &json!(0)));
    assert_eq!(empty.text(), r#"{"id":2,"result": {"ttlMs":0} }"#);
    assert_eq!(
        WireMessage::parse(empty.text().as_bytes())
            .expect("valid")
            .view(),
        empty.view()
    );
}

#[test]
fn set_splices_only_the_member() {
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":"client-7","method":"tools/call","params":{{"name":"echo","arguments":{TRICKY},"_meta":{{"progressToken":"p1","x":1e2}}}}}}"#
    );
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert!(message.set(&["id"], &json!(41)));
    assert!(message.set(&["params", "_meta", "progressToken"], &json!("berth-41")));
    let expected = text
        .replace(r#""id":"client-7""#, r#""id":41"#)
        .replace(r#""progressToken":"p1""#, r#""progressToken":"berth-41""#);
    assert_eq!(message.text(), expected);
    assert_eq!(message["id"], json!(41));
    assert_eq!(
        message["params"]["_meta"]["progressToken"],
        json!("berth-41")
    );
}

#[test]
fn raw_member_and_set_raw_give_a_value_back_as_it_was_written() {
    let request = WireMessage::parse(br#"{"id":1,"params":{"_meta":{"progressToken": -0 }}}"#)
        .expect("parse");
    let token = request
        .raw_member(&["params", "_meta", "progressToken"])
        .expect("present");
    assert_eq!(token.get(), "-0");
    assert!(request.raw_member(&["params", "absent"]).is_none());

    let mut progress =
        WireMessage::parse(br#"{"params":{"progressToken":"berth-1","p":1}}"#).expect("parse");
    assert!(progress.set_raw(&["params", "progressToken"], &token));
    assert_eq!(progress.text(), r#"{"params":{"progressToken":-0,"p":1}}"#);
    assert!(!progress.is_partial());

    // A value the view cannot hold: the text has it, the view reads null, the message is
    // partial (a rebuild would lose it).
    let lone = RawValue::from_string(r#""\ud800""#.to_owned()).expect("raw");
    assert!(progress.set_raw(&["params", "progressToken"], &lone));
    assert_eq!(
        progress.text(),
        r#"{"params":{"progressToken":"\ud800","p":1}}"#
    );
    assert_eq!(progress["params"]["progressToken"], json!(null));
    assert!(progress.is_partial());
}

#[test]
fn a_member_name_no_string_can_hold_is_read_around() {
    // A lone surrogate in a member name: valid JSON that a `Value` cannot hold.
    let text = r#"{"jsonrpc":"2.0","id":24,"method":"tools/list","\ud800":1,"params":{"_meta":{"progressToken":"t"}}}"#;
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert!(message.is_partial());
    assert_eq!(message["id"], json!(24));
    assert_eq!(message["method"], json!("tools/list"));
    assert_eq!(message.duplicate_member(), None);
    assert!(message.set(&["params", "_meta", "progressToken"], &json!("berth-1")));
    assert_eq!(message.text(), text.replace(r#""t""#, r#""berth-1""#));
    // Two different lone surrogates are two names; the same one twice is a duplicate.
    let two = WireMessage::parse(br#"{"id":1,"\ud800":1,"\ud801":2}"#).expect("parse");
    assert_eq!(two.duplicate_member(), None);
    let twice = WireMessage::parse(br#"{"id":1,"\ud800":1,"\ud800":2}"#).expect("parse");
    // Named for people with each byte of its WTF-8 form read as U+FFFD.
    assert_eq!(
        twice.duplicate_member().as_deref(),
        Some("\u{FFFD}\u{FFFD}\u{FFFD}")
    );
}

#[test]
fn set_of_an_absent_member_changes_nothing() {
    let text = r#"{"id":1,"params":{"_meta":5,"x":{"progressToken":1}}}"#;
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert!(!message.set(&["params", "_meta", "progressToken"], &json!("t")));
    assert!(!message.set(&["params", "progressToken"], &json!("t")));
    assert_eq!(message.text(), text);
}

#[test]
fn set_takes_the_last_duplicate_and_escaped_keys_like_the_view() {
    let text = r#"{"\u0069d":1,"id":2}"#;
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert_eq!(message["id"], json!(2));
    message.set_id(&json!("x"));
    assert_eq!(message.text(), r#"{"\u0069d":1,"id":"x"}"#);
}

#[test]
fn set_id_adds_an_absent_id() {
    let mut message = WireMessage::parse(br#"{"jsonrpc":"2.0","result":{}}"#).expect("parse");
    message.set_id(&json!(3));
    assert_eq!(message["id"], json!(3));
    assert_eq!(
        WireMessage::parse(message.text().as_bytes()).expect("parse")["id"],
        json!(3)
    );
}

#[test]
fn members_of_a_batch_keep_their_text() {
    let batch = WireMessage::parse(br#"[{"id":1,"result":{"n":1e2}} , {"id":2,"result":{}}]"#)
        .expect("parse");
    let members = batch.members().expect("array");
    assert_eq!(members[0].text(), r#"{"id":1,"result":{"n":1e2}}"#);
    assert_eq!(members[1]["id"], json!(2));
    assert!(WireMessage::from(json!({})).members().is_none());
}

#[test]
fn sse_data_drops_carriage_returns_only() {
    let message = WireMessage::parse(b"{\r\n\"a\":\"x\\r\"\r\n}").expect("parse");
    assert_eq!(message.sse_data(), "{\n\"a\":\"x\\r\"\n}");
}

#[test]
fn line_turns_line_breaks_into_spaces() {
    let message = WireMessage::parse(b"{\r\n\"a\":\"x\\n\"\n}").expect("parse");
    assert_eq!(message.line(), "{  \"a\":\"x\\n\" }");
    assert_eq!(
        WireMessage::parse(message.line().as_bytes()).expect("parse")["a"],
        json!("x\n")
    );
}

#[test]
fn json_a_value_cannot_hold_is_carried_with_a_partial_view() {
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    for member in [deep.as_str(), "1e400", r#""\ud800""#] {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":5,"result":{{"isError":true,"deep":{{"x":{member}}}}}}}"#
        );
        let mut message = WireMessage::parse(text.as_bytes()).expect("carried");
        assert!(message.is_partial());
        assert_eq!(message["result"]["isError"], json!(true));
        message.set_id(&json!("client"));
        assert_eq!(
            message.text(),
            text.replace(r#""id":5"#, r#""id":"client""#)
        );
    }
    assert!(
        !WireMessage::parse(br#"{"a":[1]}"#)
            .expect("parse")
            .is_partial()
    );
}

#[test]
fn duplicate_member_names_the_first_repeated_name_of_envelope_params_and_meta() {
    let cases = [
        (r#"{"id":1,"id":2,"method":"ping"}"#, Some("id")),
        (
            r#"{"id":1,"params":{"name":"a","\u006eame":"b"}}"#,
            Some("params.name"),
        ),
        (
            r#"{"id":1,"params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
            Some("params._meta.progressToken"),
        ),
        (r#"{"id":1,"params":{"arguments":{"x":1,"x":2}}}"#, None),
        // The next level is found by its decoded name, as the view finds it.
        (
            r#"{"id":1,"\u0070arams":{"\u005fmeta":{"a":1,"\u0061":2}}}"#,
            Some("params._meta.a"),
        ),
        (r#"{"id":1,"params":{"_meta":[1,1]}}"#, None),
        (r#"{"id":1,"params":[1,1]}"#, None),
        (
            r#"{"id":1,"method":"ping","params":{"a":1,"b":{"a":1}}}"#,
            None,
        ),
    ];
    for (text, expected) in cases {
        let message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert_eq!(message.duplicate_member().as_deref(), expected, "{text}");
    }
}

#[test]
fn duplicate_member_is_found_past_the_pairwise_scan_and_in_escaped_names() {
    let members: Vec<String> = (0..40).map(|i| format!(r#""m{i}":{i}"#)).collect();
    let unique = format!(r#"{{"id":1,"params":{{{}}}}}"#, members.join(","));
    let message = WireMessage::parse(unique.as_bytes()).expect("parse");
    assert_eq!(message.duplicate_member(), None);
    let repeated = format!(
        r#"{{"id":1,"params":{{{},"m\u0035":0}}}}"#,
        members.join(",")
    );
    let message = WireMessage::parse(repeated.as_bytes()).expect("parse");
    assert_eq!(message.duplicate_member().as_deref(), Some("params.m5"));
}

#[test]
fn a_clone_shares_the_message_until_one_is_rewritten() {
    let original = WireMessage::parse(br#"{"id":1,"result":{"n":1e2}}"#).expect("parse");
    let mut rewritten = original.clone();
    rewritten.set_id(&json!("client"));
    assert_eq!(original.text(), r#"{"id":1,"result":{"n":1e2}}"#);
    assert_eq!(original["id"], json!(1));
    assert_eq!(rewritten.text(), r#"{"id":"client","result":{"n":1e2}}"#);
    assert_eq!(original.clone().into_text(), original.text());
}

#[test]
fn parse_refuses_non_utf8_and_non_json() {
    assert!(matches!(
        WireMessage::parse(b"\xff"),
        Err(ParseError::Utf8(_))
    ));
    assert!(matches!(
        WireMessage::parse(b"{\"a\":"),
        Err(ParseError::Json(_))
    ));
}

#[test]
fn the_names_checked_while_parsing_agree_with_a_read_of_the_text() {
    let cases = [
        r#"{"id":1,"id":2,"method":"ping"}"#,
        r#"{"id":1,"params":{"name":"a","\u006eame":"b"},"params":{}}"#,
        r#"{"params":{"_meta":{"a":1,"a":2},"name":"x","name":"y"},"id":1}"#,
        r#"{"id":1,"params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
        r#"{"id":1,"params":{"arguments":{"x":1,"x":2}}}"#,
        r#"{"id":1,"\u0070arams":{"\u005fmeta":{"a":1,"\u0061":2}}}"#,
        r#"{"id":1,"params":{"_meta":[{"a":1,"a":1}]}}"#,
        r#"{"id":1,"params":[{"a":1,"a":1}]}"#,
        r#"{"id":1,"result":{"a":1,"a":2}}"#,
        r#"[{"id":1,"id":1}]"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}"#,
    ];
    for text in cases {
        let message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert_ne!(message.inner.envelope.names(), &Names::Unchecked, "{text}");
        assert_eq!(message.duplicate_member(), repeated_in_text(text), "{text}");
    }
}

#[test]
fn a_splice_where_no_name_repeats_stops_at_the_first_member() {
    let text = r#"{"id":1,"params":{"x":{"id":3}},"id":2}"#;
    assert_eq!(&text[members::span(text, &["id"], 1).expect("id")], "1");
    assert_eq!(&text[members::span(text, &["id"], 0).expect("id")], "2");
    // A message whose names repeat is spliced at the last member, as the view reads it.
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    message.set_id(&json!("x"));
    assert_eq!(message.text(), text.replace(r#""id":2"#, r#""id":"x""#));
    // One whose names do not, at its only member.
    let mut unique =
        WireMessage::parse(br#"{"id":1,"params":{"_meta":{"progressToken":"p"},"a":{}}}"#)
            .expect("parse");
    assert!(unique.set(&["params", "_meta", "progressToken"], &json!(9)));
    unique.set_id(&json!(2));
    assert_eq!(
        unique.text(),
        r#"{"id":2,"params":{"_meta":{"progressToken":9},"a":{}}}"#
    );
    // A member the whole view lacks is not looked for in the text.
    assert!(unique.raw_member(&["params", "name"]).is_none());
}

#[test]
fn an_object_spliced_as_written_has_its_names_read_again() {
    let mut message = WireMessage::parse(br#"{"id":1,"params":{}}"#).expect("parse");
    assert_eq!(message.duplicate_member(), None);
    let raw = RawValue::from_string(r#"{"a":1,"a":2}"#.to_owned()).expect("raw");
    assert!(message.set_raw(&["params"], &raw));
    assert_eq!(message.duplicate_member().as_deref(), Some("params.a"));
}

#[test]
fn remove_members_keeps_every_other_member_as_written() {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let text = format!(
        r#"{{"id":1,"params":{{ "a" : 1.50 ,"drop":{{"x":1}},"\ud800":"\u00e9","b":{deep},"drop2":2,"c":"\udfff"}}}}"#
    );
    let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
    assert!(message.remove_members(&["params"], &["drop", "drop2"]));
    assert_eq!(
        message.text(),
        format!(r#"{{"id":1,"params":{{"a" : 1.50,"\ud800":"\u00e9","b":{deep},"c":"\udfff"}}}}"#)
    );
    assert!(message["params"].get("drop").is_none());
    // The first member, and every member.
    let mut first = WireMessage::parse(br#"{"m":{"x":1, "y":[2]}}"#).expect("parse");
    assert!(first.remove_members(&["m"], &["x"]));
    assert_eq!(first.text(), r#"{"m":{"y":[2]}}"#);
    assert!(first.remove_members(&["m"], &["y"]));
    assert_eq!(first.text(), r#"{"m":{}}"#);
    assert_eq!(first["m"], json!({}));
    // Nothing to remove, or no object: nothing changes.
    assert!(!first.remove_members(&["m"], &["z"]));
    assert!(!first.remove_members(&["n"], &["x"]));
    let mut scalar = WireMessage::parse(br#"{"m":[{"x":1}]}"#).expect("parse");
    assert!(!scalar.remove_members(&["m"], &["x"]));
    assert_eq!(scalar.text(), r#"{"m":[{"x":1}]}"#);
}

#[test]
fn parse_unambiguous_refuses_a_name_twice_where_the_check_looks() {
    let twice = br#"{"jsonrpc":"2.0","id":1,"result":{},"id":999}"#;
    assert!(matches!(
        WireMessage::parse_unambiguous(twice),
        Err(ParseError::Repeated(name)) if name == "id"
    ));
    let deeper = br#"{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}"#;
    let message = WireMessage::parse_unambiguous(deeper).expect("not where the check looks");
    assert!(message.repeats_within(&["result"], 1));
    let tools = br#"{"id":1,"result":{"tools":[{"name":"a","annotations":{"x":1,"x":2}}]}}"#;
    let message = WireMessage::parse(tools).expect("parse");
    assert!(message.repeats_within(&["result"], 4));
    assert!(!message.repeats_within(&["result"], 3), "past the depth");
    assert!(!message.repeats_within(&["absent"], 4));
}

/// Paths the envelope holds, at and below the levels it descends into.
const PATHS: &[&[&str]] = &[
    &["id"],
    &["jsonrpc"],
    &["method"],
    &["params"],
    &["params", "name"],
    &["params", "arguments"],
    &["params", "arguments", "n"],
    &["params", "_meta"],
    &["params", "_meta", "progressToken"],
    &["params", "_meta", "x"],
    &["params", "absent"],
    &["result"],
    &["result", "isError"],
    &["result", "content"],
    &["result", "_meta"],
];

/// Every path of [`PATHS`] reads through the envelope as a search of the text finds it.
fn assert_reads_like_the_text(message: &WireMessage) {
    let text = message.text();
    for path in PATHS {
        let searched = members::span(text, path, 0).map(|range| &text[range]);
        assert_eq!(message.member_text(path), searched, "{path:?} in {text}");
    }
}

#[test]
fn the_envelope_follows_every_rewrite_as_a_search_of_the_text_finds_the_members() {
    let messages = [
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":1,"_meta":{"progressToken":"inner"}},"_meta":{"progressToken":"p","x":1e2}}}"#,
        r#"{ "jsonrpc" : "2.0" , "id" : "a" , "method" : "tools/call" , "params" : { "_meta" : { "progressToken" : 5 , "x" : [ ] } , "name" : "e" , "arguments" : { "n" : -0.0 } } }"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{ },"id":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,{"name":"x"}]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","par\u0061ms":{"name":"escaped","_meta":{"x":1}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"a","name":"b","_meta":{"x":1},"_meta":{"x":2}}}"#,
        r#"{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"{\"isError\":true}"}],"isError":true}}"#,
        r#"{"jsonrpc":"2.0","id":12,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":"not an object","name":"n"}}"#,
        r#"{"id":12,"jsonrpc":"2.0","result":{ "content" : [ ] , "_meta" : { } } }"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"\ud800","_meta":{"x":1}}}"#,
    ];
    for text in messages {
        let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert_reads_like_the_text(&message);
        message.set_id(&json!("a-much-longer-request-id"));
        assert_reads_like_the_text(&message);
        message.set(&["params", "_meta", "progressToken"], &json!("berth-1"));
        assert_reads_like_the_text(&message);
        let raw = RawValue::from_string("-0".to_owned()).expect("raw");
        message.set_raw(&["params", "_meta", "progressToken"], &raw);
        assert_reads_like_the_text(&message);
        message.set(&["params", "arguments", "n"], &json!({"deeper": [1, 2, 3]}));
        assert_reads_like_the_text(&message);
        // A whole object the envelope descends into, replaced: its new members are found.
        message.set(&["params", "_meta"], &json!({"x": 3, "progressToken": "m"}));
        assert_reads_like_the_text(&message);
        message.set(&["params", "_meta", "progressToken"], &json!("n"));
        assert_reads_like_the_text(&message);
        message.insert_member(&["result"], "resultType", &json!("complete"));
        assert_reads_like_the_text(&message);
        message.remove_members(&["params", "_meta"], &["x"]);
        assert_reads_like_the_text(&message);
        message.set(&["result", "isError"], &json!(false));
        assert_reads_like_the_text(&message);
        message.set_id(&json!(3));
        assert_reads_like_the_text(&message);
        // And what the view reads agrees with the text.
        let fresh = WireMessage::parse(message.text().as_bytes()).expect("valid");
        assert_eq!(message.view(), fresh.view(), "{}", message.text());
    }
}

#[test]
fn reading_and_rewriting_a_call_through_its_envelope_builds_no_view() {
    let text = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":"p"}}}"#;
    let mut request = WireMessage::parse(text.as_bytes()).expect("parse");
    for path in [
        &["params"][..],
        &["params", "_meta"],
        &["params", "name"],
        &["id"],
    ] {
        let found = request.inner.envelope.find(text, path);
        assert!(
            matches!(found, Found::At(_) | Found::Object(_)),
            "{path:?}: {found:?}"
        );
    }
    assert_eq!(
        request.member_str(&["params", "name"]).as_deref(),
        Some("echo")
    );
    assert_eq!(request.member_value(&["id"]), Some(json!(7)));
    assert_eq!(request.duplicate_member(), None);
    request.set_id(&json!(41));
    request.set(&["params", "_meta", "progressToken"], &json!("berth-41"));
    assert!(
        request.inner.view.get().is_none(),
        "the request's view was built"
    );
    let reply = WireMessage::parse_unambiguous(
        br#"{"jsonrpc":"2.0","id":41,"result":{"content":[{"type":"text","text":"hi"}],"isError":true}}"#,
    )
    .expect("parse");
    assert_eq!(reply.member_text(&["result", "isError"]), Some("true"));
    let mut reply = reply;
    reply.set_id(&json!(7));
    assert!(
        reply.inner.view.get().is_none(),
        "the reply's view was built"
    );
    // Read when asked for, from the text as rewritten.
    assert_eq!(reply["id"], json!(7));
    assert_eq!(
        request["params"]["_meta"]["progressToken"],
        json!("berth-41")
    );
}

#[test]
fn member_str_decodes_escapes_and_refuses_what_is_no_unicode_text() {
    let message =
        WireMessage::parse(br#"{"a":"plain","b":"\u00e9\"q","c":"\ud800","d":5,"e":"\\"}"#)
            .expect("parse");
    assert_eq!(message.member_str(&["a"]).as_deref(), Some("plain"));
    assert_eq!(message.member_str(&["b"]).as_deref(), Some("é\"q"));
    assert_eq!(message.member_str(&["c"]), None);
    assert_eq!(message.member_str(&["d"]), None);
    assert_eq!(message.member_str(&["e"]).as_deref(), Some("\\"));
    assert_eq!(message.member_value(&["c"]), None);
    // The same once the (partial) view is built.
    assert!(message.is_partial());
    assert_eq!(message.member_value(&["c"]), None);
    assert_eq!(message.member_value(&["d"]), Some(json!(5)));
}
