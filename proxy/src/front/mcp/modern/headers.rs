//! The checks a modern (MCP 2026-07-28) request passes before it is served: the per-request
//! protocol fields in `params._meta`, the `MCP-Protocol-Version` header that mirrors them, and
//! the `Mcp-Method` / `Mcp-Name` headers that mirror `method` and `params.name` / `params.uri`
//! ("Streamable HTTP", "Request Metadata" and "Server Validation"; "Basic", "Per-request
//! protocol fields").

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use serde_json::Value;

use crate::front::mcp::era::{
    self, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSIONS,
};
use crate::transport::upstream::param_headers::ParamHeader;
use crate::wire::jsonrpc::{self, WireMessage};
use crate::wire::revision;

/// Why a modern request is refused: every variant is a 400 with a JSON-RPC error.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `params` is not an object, or a required `_meta` field is missing or not of its type:
    /// -32602.
    InvalidParams(String),
    /// A required header is missing, malformed, or differs from the body: -32020.
    HeaderMismatch(String),
    /// The request names a revision the proxy does not serve: -32022.
    Unsupported(String),
}

impl Refusal {
    /// The `reason` label of `berth_proxy_invalid_messages_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidParams(_) => "params",
            Self::HeaderMismatch(_) => "header_mismatch",
            Self::Unsupported(_) => "protocol_version",
        }
    }

    /// The client's answer under request id `id`.
    pub fn answer(&self, id: &Value) -> crate::wire::answer::Answer {
        let error = |code, message: &str| {
            crate::wire::answer::Answer::error(StatusCode::BAD_REQUEST, id, code, message)
        };
        match self {
            Self::InvalidParams(why) => error(jsonrpc::INVALID_PARAMS, why),
            Self::HeaderMismatch(why) => error(jsonrpc::HEADER_MISMATCH, why),
            Self::Unsupported(version) => era::unsupported(id, version),
        }
    }
}

/// The modern revision a request uses, after its `_meta` fields and mirrored headers were
/// checked.
///
/// # Errors
/// [`Refusal`]: the `_meta` protocol version or client capabilities missing (-32602); the
/// `MCP-Protocol-Version`, `Mcp-Method` or `Mcp-Name` header missing or different from the body
/// (-32020; a header and a body that name different revisions are a mismatch before anything
/// else, as the conformance suite's `server-stateless` expects); a revision the proxy does not
/// serve (-32022, checked next, so a client learns the versions even from a sloppy request).
///
/// Reads the request through its envelope (`params._meta` alone is parsed; issue 14).
pub fn check(headers: &HeaderMap, body: &WireMessage) -> Result<&'static str, Refusal> {
    if body
        .member_text(&["params"])
        .is_some_and(|p| !p.starts_with('{'))
    {
        return Err(Refusal::InvalidParams(
            "params must be an object".to_owned(),
        ));
    }
    let meta = body.member(&["params", "_meta"]);
    let meta = meta.as_deref();
    let requested = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .map(|v| v.as_str().unwrap_or_default());
    let header = era::header_version(headers);
    if let (Some(body), Some(header)) = (requested, header)
        && body != header
    {
        // Both named and different: which one runs is ambiguous, whichever the proxy serves.
        return Err(mismatch(&format!(
            "MCP-Protocol-Version header {header:?} does not match the body's {body:?}"
        )));
    }
    let named = requested.or(header).unwrap_or_default();
    let Some(version) = MODERN_VERSIONS.iter().find(|v| **v == named) else {
        return Err(Refusal::Unsupported(named.to_owned()));
    };
    if requested.is_none() {
        return Err(missing(META_PROTOCOL_VERSION));
    }
    if !meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return Err(missing(META_CLIENT_CAPABILITIES));
    }
    match header {
        None => return Err(mismatch("the MCP-Protocol-Version header is required")),
        Some(header) if header != *version => {
            return Err(mismatch(&format!(
                "MCP-Protocol-Version header {header:?} does not match the body's {version:?}"
            )));
        }
        Some(_) => {}
    }
    let method = body.member_str(&["method"]).unwrap_or_default();
    compare(headers, "mcp-method", "Mcp-Method", Some(&method))?;
    if let Some(name) = revision::named_target(body, &method) {
        compare(headers, "mcp-name", "Mcp-Name", name.as_deref())?;
    }
    Ok(version)
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers against its `arguments`, for the arguments
/// the tool's listing annotated with `x-mcp-header` (`declared`; "Custom Headers", SEP-2243):
/// an argument present (and not null) needs its header, decoded equal to it (a string as is, a
/// number by value, a boolean as `true` / `false`); an absent or null one needs the header
/// absent. Values that are objects or arrays cannot be mirrored and are not checked.
///
/// # Errors
/// [`Refusal::HeaderMismatch`] (-32020) naming the header, for a missing, extra, undecodable or
/// different header.
pub fn check_params(
    headers: &HeaderMap,
    body: &WireMessage,
    declared: &[ParamHeader],
) -> Result<(), Refusal> {
    if declared.is_empty() {
        return Ok(());
    }
    // Parsed on its own: the rest of the request stays unparsed (issue 14).
    let arguments = body.member(&["params", "arguments"]);
    for param in declared {
        let value = param.value(arguments.as_deref()).filter(|v| !v.is_null());
        let raw = headers.get(param.header.as_str());
        let argument = format!("arguments.{}", param.path.join("."));
        let header = raw.map(|raw| raw.to_str().ok().and_then(|v| decode(v.trim())));
        match (value, header) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(mismatch(&format!(
                    "the {} header is required: the body has {argument}",
                    param.header
                )));
            }
            (None, Some(_)) => {
                return Err(mismatch(&format!(
                    "the {} header is sent but the body has no {argument}",
                    param.header
                )));
            }
            (Some(_), Some(None)) => {
                return Err(mismatch(&format!(
                    "the {} header is not a valid value",
                    param.header
                )));
            }
            (Some(value), Some(Some(header))) if !mirrors(&header, value) => {
                return Err(mismatch(&format!(
                    "{} header value {header:?} does not match body value {value}",
                    param.header
                )));
            }
            (Some(_), Some(Some(_))) => {}
        }
    }
    Ok(())
}

/// Whether header text `header` mirrors the argument `value`.
fn mirrors(header: &str, value: &Value) -> bool {
    match value {
        Value::String(text) => header == text,
        Value::Bool(flag) => header == if *flag { "true" } else { "false" },
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(n), _) => header.parse::<i64>() == Ok(n),
            (None, Some(n)) => header.parse::<u64>() == Ok(n),
            _ => header
                .parse::<f64>()
                .is_ok_and(|h| number.as_f64() == Some(h)),
        },
        Value::Null | Value::Array(_) | Value::Object(_) => true,
    }
}

fn missing(key: &str) -> Refusal {
    Refusal::InvalidParams(format!(
        "params._meta[{key:?}] is required on every MCP 2026-07-28 request"
    ))
}

fn mismatch(why: &str) -> Refusal {
    Refusal::HeaderMismatch(format!("header mismatch: {why}"))
}

/// Checks that header `name` is present and, decoded, equals the body's `expected` value.
fn compare(
    headers: &HeaderMap,
    name: &str,
    shown: &str,
    expected: Option<&str>,
) -> Result<(), Refusal> {
    let Some(raw) = headers.get(name) else {
        return Err(mismatch(&format!("the {shown} header is required")));
    };
    let Some(value) = raw.to_str().ok().and_then(decode) else {
        return Err(mismatch(&format!(
            "the {shown} header is not a valid value"
        )));
    };
    let expected = expected.unwrap_or_default();
    if value != expected {
        return Err(mismatch(&format!(
            "{shown} header value {value:?} does not match body value {expected:?}"
        )));
    }
    Ok(())
}

/// A mirrored header's value: as sent, or decoded from the `=?base64?...?=` sentinel form
/// ("Value Encoding"); `None` when the sentinel does not hold base64 of UTF-8.
fn decode(value: &str) -> Option<String> {
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("header value"));
        }
        map
    }

    fn call(meta: Value) -> WireMessage {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
            "params":{"name":"get_weather","arguments":{},"_meta":meta}})
        .into()
    }

    fn meta() -> Value {
        json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}})
    }

    const GOOD: [(&str, &str); 3] = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "get_weather"),
    ];

    #[test]
    fn a_complete_request_passes_and_names_its_version() {
        assert_eq!(check(&headers(&GOOD), &call(meta())), Ok("2026-07-28"));
        let encoded = [
            GOOD[0],
            GOOD[1],
            ("mcp-name", "=?base64?Z2V0X3dlYXRoZXI=?="),
        ];
        assert_eq!(check(&headers(&encoded), &call(meta())), Ok("2026-07-28"));
    }

    #[test]
    fn a_request_is_checked_through_its_envelope_as_through_its_view_and_no_view_is_built() {
        // issue 14: a modern `tools/call` is checked on every call; only `params._meta` and
        // the annotated `arguments` are parsed.
        let declared = crate::transport::upstream::param_headers::declared(&json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}));
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","arguments":{"region":"eu"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let body = WireMessage::parse(text.as_bytes()).expect("parse");
        let region = [GOOD[0], GOOD[1], GOOD[2], ("mcp-param-region", "eu")];
        assert_eq!(check(&headers(&region), &body), Ok("2026-07-28"));
        assert_eq!(check_params(&headers(&region), &body, &declared), Ok(()));
        assert!(!body.view_is_built(), "the request's view was built");
        // The same answers as from a view, for requests refused and passed.
        let bodies = [
            text.to_owned(),
            text.replace("get_weather", "other"),
            text.replace(r#""params":{"#, r#""params":{"name":"x","#),
            text.replace(r#""region":"eu""#, r#""region":"us""#),
            text.replace("2026-07-28", "2027-01-01"),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"x":"\ud800"}}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\u0067et_weather","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#.to_owned(),
        ];
        for text in &bodies {
            let enveloped = WireMessage::parse(text.as_bytes()).expect("parse");
            let viewed = WireMessage::parse(text.as_bytes()).expect("parse");
            let _ = viewed.view();
            let headers = headers(&region);
            assert_eq!(
                check(&headers, &enveloped),
                check(&headers, &viewed),
                "{text}"
            );
            assert_eq!(
                check_params(&headers, &enveloped, &declared),
                check_params(&headers, &viewed, &declared),
                "{text}"
            );
        }
    }

    #[test]
    fn headers_that_differ_from_the_body_or_are_missing_are_a_header_mismatch() {
        let other = [GOOD[0], GOOD[1], ("mcp-name", "delete_everything")];
        let missing = [GOOD[0], GOOD[1]];
        let method = [GOOD[0], ("mcp-method", "tools/list"), GOOD[2]];
        let version = [GOOD[1], GOOD[2]];
        for pairs in [&other[..], &missing[..], &method[..], &version[..]] {
            let refusal = check(&headers(pairs), &call(meta())).expect_err("refused");
            assert_eq!(
                refusal.reason(),
                "header_mismatch",
                "{pairs:?}: {refusal:?}"
            );
        }
    }

    #[test]
    fn param_headers_must_mirror_annotated_arguments_decoded_and_by_type() {
        let declared = crate::transport::upstream::param_headers::declared(&json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry"}}}));
        let body = |arguments: Value| -> WireMessage {
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                "params":{"name":"t","arguments":arguments}})
            .into()
        };
        let all = json!({"region": "Hello", "count": 3, "dry": false});
        let good = [
            ("mcp-param-region", "=?base64?SGVsbG8=?="),
            ("mcp-param-count", "3"),
            ("mcp-param-dry", "false"),
        ];
        assert_eq!(
            check_params(&headers(&good), &body(all.clone()), &declared),
            Ok(())
        );
        let literal = [("mcp-param-region", "SGVsbG8=")];
        assert_eq!(
            check_params(
                &headers(&literal),
                &body(json!({"region": "SGVsbG8="})),
                &declared
            ),
            Ok(()),
            "no sentinel: the value is literal"
        );
        assert_eq!(
            check_params(&headers(&[]), &body(json!({"region": null})), &declared),
            Ok(()),
            "a null argument has no header"
        );
        let refused = [
            (
                "bad padding",
                vec![("mcp-param-region", "=?base64?SGVsbG8?=")],
                all.clone(),
            ),
            (
                "bad chars",
                vec![("mcp-param-region", "=?base64?SGVs!!!bG8=?=")],
                all.clone(),
            ),
            (
                "missing",
                vec![("mcp-param-count", "3"), ("mcp-param-dry", "false")],
                all.clone(),
            ),
            (
                "other value",
                vec![good[0], ("mcp-param-count", "4"), good[2]],
                all.clone(),
            ),
            ("extra", vec![("mcp-param-region", "x")], json!({})),
        ];
        for (case, pairs, arguments) in refused {
            let refusal = check_params(&headers(&pairs), &body(arguments), &declared);
            assert!(
                matches!(refusal, Err(Refusal::HeaderMismatch(_))),
                "{case}: {refusal:?}"
            );
        }
    }

    #[test]
    fn missing_meta_fields_are_invalid_params_and_unknown_versions_unsupported() {
        let no_caps = json!({META_PROTOCOL_VERSION: "2026-07-28"});
        assert_eq!(
            check(&headers(&GOOD), &call(no_caps)),
            Err(missing(META_CLIENT_CAPABILITIES))
        );
        assert_eq!(
            check(&headers(&GOOD), &call(json!({}))),
            Err(missing(META_PROTOCOL_VERSION))
        );
        let future = json!({META_PROTOCOL_VERSION: "2099-01-01", META_CLIENT_CAPABILITIES: {}});
        assert_eq!(
            check(&headers(&GOOD), &call(future.clone())).map_err(|r| r.reason()),
            Err("header_mismatch"),
            "the header names another revision than the body"
        );
        let mut future_headers = GOOD.to_vec();
        future_headers.retain(|(name, _)| *name != "mcp-protocol-version");
        future_headers.push(("mcp-protocol-version", "2099-01-01"));
        assert_eq!(
            check(&headers(&future_headers), &call(future)),
            Err(Refusal::Unsupported("2099-01-01".into()))
        );
    }
}
