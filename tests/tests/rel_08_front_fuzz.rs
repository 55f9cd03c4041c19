//! Issue 12, item 8: malformed input at volume, as properties (proptest) of the downstream front.
//!
//! One proxy in front of the fault upstream serves every case of every property. Inputs: arbitrary
//! bytes, truncated and nested JSON, wrong types in every envelope member, huge ids and unknown
//! methods over POST; arbitrary session, version and accept headers over GET, DELETE and the
//! methods `/mcp` does not serve; malformed answers to a server request the proxy relayed.
//! Each case checks, against the JSON-RPC 2.0 and MCP rules rather than the proxy's code:
//! - nothing panics in the proxy (a panic hook counts panics on the runtime's threads), and every
//!   request gets an answer below 500 within a deadline;
//! - a message that carries a usable id (a string or an integer) gets a JSON-RPC reply under that
//!   id, an error unless it is a well-formed request the upstream answered; anything else gets a
//!   JSON-RPC error under `id: null` (or, for a well-formed notification, 202);
//! - nothing malformed reaches the upstream: every message the fault upstream received while the
//!   case ran is a well-formed JSON-RPC message, and none carries the case's marker unless the
//!   case's message was well-formed.
//!
//! Cases per property: [`BOUNDED_CASES`] (the run in `make test`), or `PROPTEST_CASES` for a
//! longer run (docs/testing.md).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use berth_proxy::RunningProxy;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, mcp_url, open_session_with, start_ready};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use reqwest::Method;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

/// Cases per property when `PROPTEST_CASES` is unset: together well under a minute here.
const BOUNDED_CASES: u32 = 96;
/// Cases of the multi-step server-request property when `PROPTEST_CASES` is unset.
const BOUNDED_EXCHANGE_CASES: u32 = 24;
/// How long one request may take before the case fails as a hang.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);
/// The top-level member that carries a case's marker (unknown members pass through the proxy).
const MARKER: &str = "_berthCase";
/// Methods the fault upstream answers with a result: generated requests use none of them, so
/// every generated request is answered with an error.
const KNOWN_METHODS: [&str; 13] = [
    "ping",
    "logging/setLevel",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "initialize",
];
/// Client capabilities under which the proxy relays server requests to the client.
fn client_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": false}})
}

// ---------------------------------------------------------------------------------------------
// The fixture: one runtime, one fault upstream, one proxy, one session.

struct Fixture {
    runtime: tokio::runtime::Runtime,
    up: FaultUpstream,
    _proxy: RunningProxy,
    url: String,
    session: String,
    client: reqwest::Client,
}

/// Panics on the fixture runtime's threads (the proxy's handlers and tasks).
static PROXY_PANICS: AtomicUsize = AtomicUsize::new(0);
/// Numbers the cases' markers.
static CASES: AtomicUsize = AtomicUsize::new(0);
const RUNTIME_THREAD: &str = "rel08-proxy";

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(RUNTIME_THREAD) {
                PROXY_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(RUNTIME_THREAD)
            .enable_all()
            .build()
            .expect("runtime");
        let (up, proxy, url, session) = runtime.block_on(async {
            let up = FaultUpstream::start().await;
            let proxy = start_ready(&config(&up.url, "10s")).await;
            let url = mcp_url(&proxy);
            let (session, _) = open_session_with(&url, "2025-06-18", client_capabilities()).await;
            (up, proxy, url, session)
        });
        Fixture {
            runtime,
            up,
            _proxy: proxy,
            url,
            session,
            client: reqwest::Client::new(),
        }
    })
}

fn proptest_config(bounded: u32) -> ProptestConfig {
    // `ProptestConfig::default()` reads `PROPTEST_CASES`.
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = bounded;
    }
    // Failures print the shrunk input; no regression files are written into the tree.
    config.failure_persistence = None;
    config
}

// ---------------------------------------------------------------------------------------------
// The oracle: JSON-RPC 2.0 (§4, §5) and MCP 2025-06-18 "Messages", independent of the proxy.

/// What a JSON-RPC message is, by the rules.
#[derive(Debug, PartialEq)]
enum Kind {
    /// `method` (not `notifications/*`) and a usable id; params, when present, an object.
    Request(Value),
    /// `notifications/*` without an id; params, when present, an object.
    Notification,
    /// A usable id (or null, for an error), and exactly one of an object `result` or an `error`
    /// object with an integer `code` and a string `message`.
    Response(Value),
    /// Anything else.
    Malformed,
}

fn usable_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

fn kind_of(value: &Value) -> Kind {
    let Some(message) = value.as_object() else {
        return Kind::Malformed;
    };
    if message.get("jsonrpc") != Some(&json!("2.0")) {
        return Kind::Malformed;
    }
    let id = message.get("id");
    let (result, error) = (message.get("result"), message.get("error"));
    match message.get("method") {
        Some(Value::String(method)) => {
            let params_ok = message.get("params").is_none_or(Value::is_object);
            let notification = method.starts_with("notifications/");
            match id {
                _ if result.is_some() || error.is_some() || !params_ok => Kind::Malformed,
                None if notification => Kind::Notification,
                Some(id) if usable_id(id) && !notification => Kind::Request(id.clone()),
                _ => Kind::Malformed,
            }
        }
        Some(_) => Kind::Malformed,
        None => {
            let error_ok =
                |e: &Value| e.get("code").is_some_and(|c| c.is_i64()) && e["message"].is_string();
            let shape_ok = match (result, error) {
                (Some(result), None) => result.is_object(),
                (None, Some(error)) => error_ok(error),
                _ => false,
            };
            match id {
                Some(id) if shape_ok && (usable_id(id) || (id.is_null() && error.is_some())) => {
                    Kind::Response(id.clone())
                }
                _ => Kind::Malformed,
            }
        }
    }
}

/// The body as JSON, when it is JSON: serde_json's scanner (`IgnoredAny`, no depth or number
/// limits) decides; its envelope comes from a `Value`, or, for JSON a `Value` cannot hold whole
/// (deeper than 128 levels, `1e400`), from the members that fit (issue 12, item 6).
fn reference(body: &[u8]) -> Result<Value, ()> {
    let text = std::str::from_utf8(body).map_err(|_| ())?;
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|_| ())?;
    Ok(serde_json::from_str::<Value>(text).unwrap_or_else(|_| {
        berth_proxy::wire::jsonrpc::WireMessage::parse(body)
            .map(berth_proxy::wire::jsonrpc::WireMessage::into_view)
            .unwrap_or(Value::Null)
    }))
}

/// The id a reply must carry: the message's id when usable, else null (JSON-RPC 2.0 §5).
fn carried_id(body: &[u8]) -> Value {
    reference(body)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .filter(usable_id)
        .unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------------------------
// Sending, and checking one exchange.

/// One answer of the proxy: status, and the JSON-RPC messages of its body (one for JSON, every
/// event for SSE; none for an empty body or an open standalone stream).
#[derive(Debug)]
struct Reply {
    status: u16,
    messages: Vec<Value>,
    text: String,
}

impl Reply {
    fn last(&self) -> Option<&Value> {
        self.messages.last()
    }
}

fn json_headers(session: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![
        (
            HeaderName::from_static("content-type"),
            HeaderValue::from_static("application/json"),
        ),
        (
            HeaderName::from_static("accept"),
            HeaderValue::from_static("application/json, text/event-stream"),
        ),
    ];
    if let Some(session) = session {
        let value = HeaderValue::from_str(session).expect("session ids are header-safe");
        headers.push((HeaderName::from_static("mcp-session-id"), value));
    }
    headers
}

/// Sends one request; an open standalone stream (GET, 200) is dropped unread.
async fn send(
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Vec<u8>,
) -> Result<Reply, TestCaseError> {
    let fixture = fixture();
    let standalone = method == Method::GET;
    let mut request = fixture.client.request(method, &fixture.url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let exchange = async {
        let response = request
            .send()
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        let status = response.status().as_u16();
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse && status == 200 && standalone {
            return Ok::<_, String>(Reply {
                status,
                messages: Vec::new(),
                text: String::new(),
            });
        }
        let text = response.text().await.map_err(|e| format!("body: {e}"))?;
        let messages = if is_sse {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| serde_json::from_str(data.trim()))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("SSE data is not JSON: {e}: {text}"))?
        } else if text.is_empty() {
            Vec::new()
        } else {
            vec![serde_json::from_str(&text).map_err(|e| format!("body not JSON: {e}: {text}"))?]
        };
        Ok(Reply {
            status,
            messages,
            text,
        })
    };
    match tokio::time::timeout(ANSWER_DEADLINE, exchange).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(problem)) => Err(TestCaseError::fail(problem)),
        Err(_) => Err(TestCaseError::fail(format!(
            "no answer within {ANSWER_DEADLINE:?}"
        ))),
    }
}

/// POSTs `body` on `session`.
async fn post(session: Option<&str>, body: Vec<u8>) -> Result<Reply, TestCaseError> {
    send(Method::POST, json_headers(session), body).await
}

/// A fresh marker for one case.
fn marker() -> String {
    format!("rel08-case-{}", CASES.fetch_add(1, Ordering::SeqCst))
}

/// Runs one case on the fixture's runtime, then checks the invariants of every case: no panic
/// in the proxy, and every message the upstream received meanwhile well-formed and, unless
/// `forwardable`, without `marker`.
fn run_case<F>(marker: &str, forwardable: bool, case: F) -> Result<(), TestCaseError>
where
    F: std::future::Future<Output = Result<(), TestCaseError>>,
{
    let fixture = fixture();
    let panics = PROXY_PANICS.load(Ordering::SeqCst);
    let from = fixture.up.received_count();
    fixture.runtime.block_on(case)?;
    prop_assert_eq!(
        PROXY_PANICS.load(Ordering::SeqCst),
        panics,
        "the proxy panicked"
    );
    for received in fixture.up.received_since(from) {
        if received.http_method != "POST" {
            continue;
        }
        let kind = kind_of(&received.message);
        prop_assert!(
            kind != Kind::Malformed,
            "malformed message reached the upstream: {}",
            received.message
        );
        prop_assert!(
            forwardable || !received.message.to_string().contains(marker),
            "a malformed case reached the upstream: {}",
            received.message
        );
    }
    Ok(())
}

/// The reply to a POSTed `body` obeys the oracle; returns whether the body was a well-formed
/// message (which may reach the upstream).
fn check_post_reply(body: &[u8], reply: &Reply) -> Result<bool, TestCaseError> {
    prop_assert!(
        (200..500).contains(&reply.status),
        "status {}: {}",
        reply.status,
        reply.text
    );
    let parsed = reference(body);
    let kind = parsed.as_ref().map_or(Kind::Malformed, kind_of);
    if kind == Kind::Notification {
        prop_assert_eq!(reply.status, 202, "{}", reply.text);
        prop_assert!(reply.messages.is_empty(), "{}", reply.text);
        return Ok(true);
    }
    let Some(last) = reply.last() else {
        return Err(TestCaseError::fail(format!(
            "status {} without a JSON-RPC message",
            reply.status
        )));
    };
    prop_assert_eq!(&last["jsonrpc"], &json!("2.0"), "{}", last);
    prop_assert_eq!(&last["id"], &carried_id(body), "reply id: {}", last);
    prop_assert!(
        last["error"]["code"].is_i64() && last["error"]["message"].is_string(),
        "not a JSON-RPC error: {}",
        last
    );
    if parsed.is_err() {
        prop_assert_eq!(&last["error"]["code"], &json!(-32700), "{}", last);
    }
    if kind == Kind::Malformed {
        prop_assert!(reply.status >= 400, "status {}: {}", reply.status, last);
    }
    Ok(matches!(kind, Kind::Request(_)))
}

/// POSTs `body` on the fixture's session and checks the reply and the upstream.
fn post_case(body: Vec<u8>) -> Result<(), TestCaseError> {
    let marker_text = marker();
    let body = splice_marker(body, &marker_text);
    let forwardable = reference(&body)
        .is_ok_and(|v| matches!(kind_of(&v), Kind::Request(_) | Kind::Notification));
    run_case(&marker_text, forwardable, async {
        let reply = post(Some(&fixture().session), body.clone()).await?;
        check_post_reply(&body, &reply).map(|_| ())
    })
}

/// Replaces the placeholder `@MARKER@` in `body` with the case's marker.
fn splice_marker(body: Vec<u8>, marker: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(&body);
    if !text.contains("@MARKER@") {
        return body;
    }
    text.replace("@MARKER@", marker).into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((".{0,8}", inner), 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn request_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::String),
    ]
}

/// Method names the fault upstream does not know (and `initialize`, refused on a live session).
fn unknown_method() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,10}(/[a-zA-Z]{1,12}){0,2}",
        ".{0,32}",
        Just("initialize".to_owned()),
        Just(String::new()),
        (1usize..4096).prop_map(|n| "m".repeat(n)),
    ]
    .prop_filter("known methods are answered with results", |m| {
        !KNOWN_METHODS.contains(&m.as_str()) || m == "initialize"
    })
}

/// Params: an object, sometimes with `_meta` (and a progress token) of any shape.
fn params() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(("[a-z]{1,6}", json_value()), 0..4),
        prop::option::of(prop_oneof![
            json_value(),
            json_value().prop_map(|token| json!({ "progressToken": token })),
        ]),
    )
        .prop_map(|(members, meta)| {
            let mut params: Map<String, Value> = members.into_iter().collect();
            if let Some(meta) = meta {
                params.insert("_meta".into(), meta);
            }
            Value::Object(params)
        })
}

/// What becomes of one envelope member.
#[derive(Clone, Debug)]
enum Member {
    Keep,
    Drop,
    Replace(Value),
}

fn member() -> impl Strategy<Value = Member> {
    prop_oneof![
        6 => Just(Member::Keep),
        1 => Just(Member::Drop),
        2 => json_value().prop_map(Member::Replace),
    ]
}

/// A request, notification or response, then each of `jsonrpc`, `id`, `method`, `params`,
/// `result` and `error` kept, dropped or replaced by a value of any type; the marker rides in
/// an extra member.
fn envelope() -> impl Strategy<Value = Value> {
    let base = prop_oneof![
        (request_id(), unknown_method(), params()).prop_map(|(id, method, params)| {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        }),
        ("[a-z]{1,12}", params()).prop_map(|(name, params)| {
            json!({"jsonrpc": "2.0", "method": format!("notifications/{name}"), "params": params})
        }),
        (request_id(), params())
            .prop_map(|(id, result)| { json!({"jsonrpc": "2.0", "id": id, "result": result}) }),
        (request_id(), any::<i32>(), ".{0,12}").prop_map(|(id, code, message)| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }),
    ];
    let members = prop::collection::vec(member(), 6);
    (base, members).prop_map(|(mut message, members)| {
        let object = message.as_object_mut().expect("an object");
        let names = ["jsonrpc", "id", "method", "params", "result", "error"];
        for (name, member) in names.iter().zip(members) {
            match member {
                Member::Keep => {}
                Member::Drop => {
                    object.remove(*name);
                }
                Member::Replace(value) => {
                    object.insert((*name).to_owned(), value);
                }
            }
        }
        object.insert(MARKER.into(), json!("@MARKER@"));
        message
    })
}

/// JSON nested `depth` deep around the message, its id, its method or its params (past
/// serde_json's recursion limit of 128 the body is not JSON to the proxy either).
fn nested() -> impl Strategy<Value = Vec<u8>> {
    (0usize..4, 1usize..300, any::<bool>()).prop_map(|(place, depth, arrays)| {
        let (open, close) = if arrays {
            ("[".repeat(depth), "]".repeat(depth))
        } else {
            (r#"{"a":"#.repeat(depth), "}".repeat(depth))
        };
        let text = match place {
            0 => format!(
                r#"{open}{{"jsonrpc":"2.0","id":1,"method":"x/y","{MARKER}":"@MARKER@"}}{close}"#
            ),
            1 => format!(r#"{{"jsonrpc":"2.0","id":{open}1{close},"method":"x/y","{MARKER}":"@MARKER@"}}"#),
            2 => format!(r#"{{"jsonrpc":"2.0","id":2,"method":{open}"x/y"{close},"{MARKER}":"@MARKER@"}}"#),
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"x/y","params":{{"p":{open}0{close}}},"{MARKER}":"@MARKER@"}}"#
            ),
        };
        text.into_bytes()
    })
}

/// Id tokens as written on the wire: integers at and past the 64-bit bounds, fractions,
/// exponents, long and escaped strings.
fn huge_id_token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(i64::MIN.to_string()),
        Just(u64::MAX.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("-9223372036854775809".to_owned()),
        "-?[1-9][0-9]{19,60}",
        "-?[0-9]{1,5}\\.[0-9]{1,5}",
        "-?[1-9]e-?[0-9]{1,4}",
        Just("-0".to_owned()),
        (any::<char>(), 1usize..20_000)
            .prop_map(|(c, n)| Value::from(c.to_string().repeat(n)).to_string()),
        Just(r#""\u0000\ud800\"\\""#.to_owned()),
    ]
}

fn header_value() -> impl Strategy<Value = Option<HeaderValue>> {
    prop_oneof![
        Just(None),
        "[ -~]{0,40}".prop_map(|s| HeaderValue::from_str(&s).ok()),
        prop::collection::vec(0x80u8..=0xff, 1..8).prop_map(|b| HeaderValue::from_bytes(&b).ok()),
    ]
}

/// The `Mcp-Session-Id` of a body-less request.
#[derive(Clone, Debug)]
enum SessionHeader {
    Absent,
    /// A session opened for this case.
    Fresh,
    /// Any other value.
    Other(Option<HeaderValue>),
}

fn session_header() -> impl Strategy<Value = SessionHeader> {
    prop_oneof![
        1 => Just(SessionHeader::Absent),
        2 => Just(SessionHeader::Fresh),
        2 => header_value().prop_map(SessionHeader::Other),
    ]
}

fn protocol_version() -> impl Strategy<Value = Option<HeaderValue>> {
    prop_oneof![
        Just(None),
        Just(Some(HeaderValue::from_static("2025-06-18"))),
        header_value(),
    ]
}

fn http_method() -> impl Strategy<Value = Method> {
    prop_oneof![
        3 => Just(Method::GET),
        3 => Just(Method::DELETE),
        1 => Just(Method::PUT),
        1 => Just(Method::PATCH),
        1 => Just(Method::HEAD),
        1 => Just(Method::OPTIONS),
    ]
}

// ---------------------------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(proptest_config(BOUNDED_CASES))]

    #[test]
    fn rel_08_arbitrary_bytes_get_a_json_rpc_error(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..2048),
            ".{0,256}".prop_map(String::into_bytes),
        ],
    ) {
        post_case(body)?;
    }

    #[test]
    fn rel_08_truncated_json_gets_a_parse_error_and_never_reaches_the_upstream(
        message in envelope(),
        cut in any::<prop::sample::Index>(),
    ) {
        let text = message.to_string();
        let cut = 1 + cut.index(text.len() - 1);
        // Cut on a character boundary, so the prefix is text that is not JSON.
        let cut = (0..=cut).rev().find(|at| text.is_char_boundary(*at)).unwrap_or(0);
        post_case(text.as_bytes()[..cut].to_vec())?;
    }

    #[test]
    fn rel_08_nested_json_is_refused_or_answered_under_its_id(body in nested()) {
        post_case(body)?;
    }

    #[test]
    fn rel_08_wrong_types_in_envelope_members_get_errors_under_the_id(message in envelope()) {
        post_case(message.to_string().into_bytes())?;
    }

    #[test]
    fn rel_08_huge_ids_and_unknown_methods_are_answered_under_the_id(
        id in huge_id_token(),
        method in unknown_method(),
        notification in any::<bool>(),
    ) {
        let method = Value::from(method);
        let body = if notification {
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/{}","{MARKER}":"@MARKER@"}}"#,
                method.as_str().unwrap_or_default().replace(['"', '\\'], ""))
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"{MARKER}":"@MARKER@"}}"#)
        };
        post_case(body.into_bytes())?;
    }

    #[test]
    fn rel_08_get_delete_and_other_methods_with_arbitrary_headers_are_refused_cleanly(
        method in http_method(),
        session in session_header(),
        version in protocol_version(),
        accept in header_value(),
    ) {
        run_case(&marker(), false, async {
            let mut headers = Vec::new();
            let fresh = matches!(session, SessionHeader::Fresh);
            match session {
                SessionHeader::Absent | SessionHeader::Other(None) => {}
                SessionHeader::Fresh => {
                    let (id, _) = open_session_with(
                        &fixture().url, "2025-06-18", json!({})).await;
                    headers.push((HeaderName::from_static("mcp-session-id"),
                        HeaderValue::from_str(&id).expect("session id")));
                }
                SessionHeader::Other(Some(value)) => {
                    headers.push((HeaderName::from_static("mcp-session-id"), value));
                }
            }
            let served_version = version
                .as_ref()
                .is_none_or(|v| v.as_bytes() == b"2025-06-18");
            if let Some(version) = version {
                headers.push((HeaderName::from_static("mcp-protocol-version"), version));
            }
            if let Some(accept) = accept {
                headers.push((HeaderName::from_static("accept"), accept));
            }
            let reply = send(method.clone(), headers, Vec::new()).await?;
            prop_assert!((200..500).contains(&reply.status), "{} {}: {}",
                method, reply.status, reply.text);
            if ![Method::GET, Method::DELETE].contains(&method) {
                prop_assert_eq!(reply.status, 405, "{}: {}", method, reply.text);
            } else if fresh && method == Method::DELETE {
                prop_assert_eq!(reply.status, 204, "{}", reply.text);
            } else if fresh && served_version {
                prop_assert_eq!(reply.status, 200, "a live session's stream opens: {}",
                    reply.text);
            } else {
                let last = reply.last().ok_or_else(|| TestCaseError::fail(format!(
                    "{method} {} without a JSON-RPC error", reply.status)))?;
                prop_assert!(reply.status >= 400);
                prop_assert_eq!(&last["id"], &Value::Null);
                prop_assert!(last["error"]["code"].is_i64(), "{}", last);
            }
            Ok(())
        })?;
    }
}

/// Reads the proxy's SSE reply to a call, passing each message on as it arrives.
async fn next_message(
    messages: &mut tokio::sync::mpsc::Receiver<Value>,
) -> Result<Value, TestCaseError> {
    match tokio::time::timeout(ANSWER_DEADLINE, messages.recv()).await {
        Ok(Some(message)) => Ok(message),
        Ok(None) => Err(TestCaseError::fail("the call's stream ended early")),
        Err(_) => Err(TestCaseError::fail(
            "no message on the call's stream in time",
        )),
    }
}

/// A well-formed answer to the server request `request`.
fn good_answer(request: &Value) -> Value {
    let result = match request["method"].as_str() {
        Some("sampling/createMessage") => json!({"role": "assistant", "model": "t",
            "content": {"type": "text", "text": "hi"}}),
        Some("elicitation/create") => json!({"action": "accept", "content": {"colour": "red"}}),
        _ => json!({"roots": []}),
    };
    json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
}

proptest! {
    #![proptest_config(proptest_config(BOUNDED_EXCHANGE_CASES))]

    /// The fault upstream's `ask` tool sends sampling, elicitation and roots requests on the
    /// call's stream; the first gets the generated answer (its id kept or mutated like every
    /// other member). A malformed answer is refused under its id and the server request stays
    /// pending; well-formed answers then finish the call.
    #[test]
    fn rel_08_malformed_answers_to_server_requests_never_reach_the_upstream(
        members in prop::collection::vec(member(), 4),
        result in prop_oneof![params(), json_value()],
    ) {
        let marker_text = marker();
        run_case(&marker_text, true, async {
            let url = &fixture().url;
            let (session, _) = open_session_with(url, "2025-06-18", client_capabilities()).await;
            let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "ask", "arguments": {}}}).to_string();
            let (status, mut messages) =
                berth_tests::proxy::post_stream(url, &session, &call).await;
            prop_assert_eq!(status, 200);
            let request = next_message(&mut messages).await?;
            prop_assert!(request["id"].is_string(), "a server request: {}", request);

            let mut answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
            let object = answer.as_object_mut().expect("object");
            for (name, member) in ["jsonrpc", "id", "result", "error"].iter().zip(&members) {
                match member {
                    Member::Keep => {}
                    Member::Drop => { object.remove(*name); }
                    Member::Replace(value) => { object.insert((*name).into(), value.clone()); }
                }
            }
            object.insert(MARKER.into(), json!(marker_text));
            let body = answer.to_string().into_bytes();
            let from = fixture().up.received_count();
            let reply = post(Some(&session), body.clone()).await?;
            let answers_it = kind_of(&answer) == Kind::Response(request["id"].clone());
            if answers_it {
                prop_assert_eq!(reply.status, 202, "{}", reply.text);
            } else {
                check_post_reply(&body, &reply)?;
                let leaked = fixture().up.received_since(from).into_iter()
                    .find(|r| r.message.to_string().contains(&marker_text));
                prop_assert!(leaked.is_none(), "a malformed answer reached the upstream: {:?}",
                    leaked.map(|r| r.message));
                let retry = post(Some(&session), good_answer(&request).to_string().into_bytes())
                    .await?;
                prop_assert_eq!(retry.status, 202, "the request is still pending: {}",
                    retry.text);
            }
            for _ in 0..2 {
                let request = next_message(&mut messages).await?;
                let reply = post(Some(&session), good_answer(&request).to_string().into_bytes())
                    .await?;
                prop_assert_eq!(reply.status, 202, "{}", reply.text);
            }
            let last = next_message(&mut messages).await?;
            prop_assert_eq!(&last["id"], &json!(1), "{}", last);
            Ok(())
        })?;
    }
}
