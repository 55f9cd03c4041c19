//! Issue 39 (the fuzz target of the wire parser): arbitrary and hostile bytes through
//! [`WireMessage::parse_unambiguous`], the envelope's member reads and the audit digest of the
//! arguments, as properties (proptest). The front itself is fuzzed over HTTP in
//! `rel_08_front_fuzz.rs`; this one holds the parser to what the front cannot see:
//! - nothing panics (a stack overflow on deep nesting would abort the whole test binary);
//! - memory is bounded by the input: the peak heap while one input of `n` bytes is parsed,
//!   read and digested is at most [`PER_BYTE`]` × n + `[`SLACK`] bytes above what was
//!   allocated before (measured by a counting global allocator, `peak_alloc`), whatever the
//!   nesting, escapes, numbers or repeated members.
//!
//! Cases: [`BOUNDED_CASES`] (the run in `make test`), or `PROPTEST_CASES` for a longer run.
//! One `#[test]` only: the allocator's counters are per process, so nothing else may allocate
//! while a case is measured.

use berth_proxy::client::audit::digest;
use berth_proxy::wire::jsonrpc::WireMessage;
use peak_alloc::PeakAlloc;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// Cases per generator when `PROPTEST_CASES` is unset.
const BOUNDED_CASES: u32 = 256;
/// Heap bytes a parse may take per input byte. Objects of many one-character members (`"k":1,`,
/// 6 bytes each) cost about 28 per byte today: each member is kept as a key and a raw value
/// while duplicates are looked for and the digest sorts them. Before the digest looked at the
/// nesting first, 20,000 nested objects cost 42 per byte.
const PER_BYTE: usize = 32;
/// Heap bytes a parse may take whatever the input.
const SLACK: usize = 256 * 1024;

/// Parses, reads and digests `bytes` as the proxy does with a client's message; returns the
/// peak heap above the start.
fn peak_of(bytes: &[u8]) -> usize {
    HEAP.reset_peak_usage();
    let before = HEAP.current_usage();
    if let Ok(message) = WireMessage::parse_unambiguous(bytes) {
        let _ = message.member_text(&["method"]);
        let _ = message.member_text(&["params", "name"]);
        if let Some(arguments) = message.member_text(&["params", "arguments"]) {
            let _ = digest::of_text(arguments);
        }
        let _ = message.line();
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        // The digest of any text, as an upstream's or a client's arguments may be.
        let _ = digest::of_text(text);
    }
    HEAP.peak_usage().saturating_sub(before)
}

fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let peak = peak_of(bytes);
    let bound = PER_BYTE * bytes.len() + SLACK;
    prop_assert!(
        peak <= bound,
        "{} input bytes took {peak} heap bytes (bound {bound}): {:?}",
        bytes.len(),
        String::from_utf8_lossy(&bytes[..bytes.len().min(120)])
    );
    Ok(())
}

/// A `tools/call` envelope around `arguments` (any text).
fn call_with(arguments: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{arguments}}}}}"#
    )
    .into_bytes()
}

/// Hostile JSON texts: deep nesting of arrays and objects (open, or closed), long escapes,
/// numbers beyond `f64`, members repeated, lone surrogates.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        (1usize..200_000).prop_map(|depth| "[".repeat(depth)),
        (1usize..50_000).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth))),
        (1usize..20_000).prop_map(|depth| format!(
            "{}1{}",
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        )),
        (1usize..100_000).prop_map(|n| format!("\"{}\"", r"\u00e9\n".repeat(n))),
        (1usize..10_000).prop_map(|n| format!("{{{}\"k\":1}}", "\"k\":1,".repeat(n))),
        (1usize..2_000).prop_map(|n| format!("[{}]", vec!["1e400"; n].join(","))),
        (1usize..20_000).prop_map(|n| format!("\"{}\"", r"\ud800".repeat(n))),
        "\\PC{0,2000}",
    ]
}

#[test]
fn wire_parser_never_panics_and_takes_memory_in_proportion_to_its_input() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(BOUNDED_CASES);
    // A runner per property: one runner counts its cases across runs.
    let runner = || {
        TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        })
    };
    runner()
        .run(&proptest::collection::vec(any::<u8>(), 0..4096), |bytes| {
            check(&bytes)
        })
        .expect("arbitrary bytes");
    runner()
        .run(&hostile(), |text| check(text.as_bytes()))
        .expect("hostile JSON texts");
    runner()
        .run(&hostile(), |arguments| check(&call_with(&arguments)))
        .expect("hostile arguments in a tools/call");
}
