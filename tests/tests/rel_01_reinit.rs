//! Issue 12 item 1: a re-initialization that keeps failing must not hold callers for the whole
//! `timeouts.connect`. The upstream forgets its session (404) and answers `initialize` with 503
//! for a while; every caller gets a retryable JSON-RPC error under its own id as soon as the
//! one shared attempt failed, the upstream sees at most two `initialize`s per loss, the
//! supervisor paces later attempts with its backoff, and clients start over once the upstream
//! is back (field case BR-04: a session that cannot be recovered ends).

use std::time::{Duration, Instant};

use berth_crds::{DurationString, ProxyConfig, SessionStrategy};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{
    RawReply, call, config, mcp_url, open_session, post_raw, sample, scrape, start_ready,
    wait_ready,
};
use berth_tests::wait_for;
use serde_json::{Value, json};

/// `timeouts.connect` in these tests: every bound asserted below is far under it.
const CONNECT: &str = "10s";
/// What "at once" means here: well under the 10 s connect budget.
const FAST: Duration = Duration::from_secs(3);
/// Long enough to outlast each test's outage phase; lifted by [`end_outage`].
const OUTAGE: Duration = Duration::from_secs(120);

fn proxy_config(upstream: &FaultUpstream, strategy: SessionStrategy) -> ProxyConfig {
    let mut cfg = config(&upstream.url, "20s");
    cfg.timeouts.connect = DurationString::new(CONNECT);
    cfg.session.strategy = strategy;
    cfg
}

fn initialize(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "berth-tests", "version": "0"}}})
    .to_string()
}

fn text(reply: &Value) -> Value {
    reply["result"]["content"][0]["text"].clone()
}

/// The upstream forgets every session and answers `initialize` with 503 until [`end_outage`].
fn start_outage(upstream: &FaultUpstream) {
    upstream.unavailable_initialize_for(OUTAGE);
    upstream.expire_all();
}

fn end_outage(upstream: &FaultUpstream) {
    upstream.update(|f| f.unavailable_initialize_until = None);
}

/// Five `echo` calls (ids 10 to 14) sent at once on `session`: each reply and how long it took.
async fn five_calls(url: &str, session: &str) -> Vec<(u64, RawReply, Duration)> {
    futures::future::join_all((10..15u64).map(|id| async move {
        let started = Instant::now();
        let body = call(json!(id), "echo", json!({"message": id.to_string()}));
        let reply = post_raw(url, Some(session), &body).await;
        (id, reply, started.elapsed())
    }))
    .await
}

/// Every call got a complete answer (the connection was not dropped) under the caller's own
/// id, fast: HTTP 200 with a retryable JSON-RPC error, or, for a call that reached the proxy
/// only after a sibling's failure had ended the session (BR-04; the five race on a slow
/// machine), 404 with -32600 telling it to start over. At least the first to arrive gets the
/// retryable error.
fn assert_fast_retryable_errors(replies: &[(u64, RawReply, Duration)]) {
    assert!(
        replies.iter().any(|(_, reply, _)| reply.status == 200),
        "at least one call got the retryable error: {replies:?}"
    );
    for (id, reply, elapsed) in replies {
        if reply.status == 404 {
            assert_eq!(reply.last()["id"], json!(id), "call {id}: {reply:?}");
            assert_eq!(
                reply.last()["error"]["code"],
                json!(-32600),
                "call {id}: {reply:?}"
            );
            assert!(*elapsed < FAST, "call {id} waited {elapsed:?}");
            continue;
        }
        assert_eq!(reply.status, 200, "call {id}: {reply:?}");
        assert_eq!(reply.messages.len(), 1, "call {id}: one answer: {reply:?}");
        let answer = reply.last();
        assert_eq!(answer["id"], json!(id), "call {id}: its own id: {reply:?}");
        assert!(answer["error"]["code"].is_i64(), "call {id}: {reply:?}");
        assert_eq!(
            answer["error"]["data"]["retryable"],
            json!(true),
            "call {id}: {reply:?}"
        );
        assert!(
            *elapsed < FAST,
            "call {id} waited {elapsed:?} (timeouts.connect is {CONNECT})"
        );
    }
}

/// Once the upstream is back, a client that starts over gets a working session: `initialize`
/// succeeds within the supervisor's backoff and a call on the new session is answered.
async fn new_session_works(url: &str) {
    let session = wait_for(
        "a new downstream session",
        Duration::from_secs(20),
        || async {
            let reply = post_raw(url, None, &initialize(1)).await;
            (reply.status == 200).then_some(reply.session).flatten()
        },
    )
    .await;
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post_raw(url, Some(&session), &inited).await.status, 202);
    let reply = post_raw(
        url,
        Some(&session),
        &call(json!(20), "echo", json!({"message": "back"})),
    )
    .await;
    assert_eq!(text(reply.last()), json!("back"), "{reply:?}");
}

/// The session is ended (BR-04): its next request gets 404, so the client starts over.
async fn assert_ended(url: &str, session: &str) {
    let reply = post_raw(
        url,
        Some(session),
        &call(json!(15), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(
        reply.status, 404,
        "the unrecoverable session ended: {reply:?}"
    );
    assert_eq!(reply.last()["id"], json!(15));
}

/// The field report: the supervisor has already seen the loss (the upstream's standalone
/// stream answered 404) and its re-initialization fails with 503 when five calls arrive on one
/// downstream session. They used to wait the whole connect budget while the supervisor retried
/// six times.
#[tokio::test]
async fn rel_01_calls_while_reinitialization_fails_get_retryable_errors_at_once() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&proxy_config(&upstream, SessionStrategy::Shared)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let ok = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"message": "a"})),
    )
    .await;
    assert_eq!(text(ok.last()), json!("a"));
    start_outage(&upstream);
    wait_for(
        "the proxy to see the loss",
        Duration::from_secs(5),
        || async {
            let metrics = scrape(&proxy).await;
            let lost = sample(
                &metrics,
                r#"berth_proxy_upstream_session_losses_total{reason="stream"}"#,
            );
            (lost >= 1.0).then_some(())
        },
    )
    .await;
    let before = upstream.initializes();

    let replies = five_calls(&url, &session).await;

    assert_fast_retryable_errors(&replies);
    // The supervisor's attempts are 200 ms apart and more: the callers shared the one in
    // progress (or none, failing at once while it backs off) and caused none of their own.
    let attempts = upstream.initializes() - before;
    assert!(
        attempts <= 2,
        "the callers waited for at most one attempt: {attempts} initializes"
    );
    assert_ended(&url, &session).await;
    end_outage(&upstream);
    new_session_works(&url).await;
    proxy.shutdown().await;
}

/// Five calls that each see the upstream's 404 themselves share the supervisor's one
/// re-initialization: its failure ends every wait, with at most two `initialize`s upstream.
#[tokio::test]
async fn rel_01_calls_that_see_the_loss_share_one_failed_reinitialization() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&proxy_config(&upstream, SessionStrategy::Shared)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let before = upstream.initializes();
    start_outage(&upstream);

    let replies = five_calls(&url, &session).await;

    assert_fast_retryable_errors(&replies);
    let attempts = upstream.initializes() - before;
    assert!(
        (1..=2).contains(&attempts),
        "one shared re-initialization for the loss, at most two: {attempts}"
    );
    let metrics = scrape(&proxy).await;
    let losses: f64 = ["not_found", "stream"]
        .iter()
        .map(|reason| {
            let series =
                format!(r#"berth_proxy_upstream_session_losses_total{{reason="{reason}"}}"#);
            sample(&metrics, &series)
        })
        .sum();
    assert_eq!(losses, 1.0, "one loss, counted once: {metrics}");
    assert_ended(&url, &session).await;
    end_outage(&upstream);
    new_session_works(&url).await;
    proxy.shutdown().await;
}

/// `PerClient`: the client's five callers that saw its upstream session's 404 share one
/// re-handshake; its failure ends every wait (it used to be one handshake per caller, in turn).
#[tokio::test]
async fn rel_01_per_client_callers_share_one_failed_rehandshake() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&proxy_config(&upstream, SessionStrategy::PerClient)).await;
    let url = mcp_url(&proxy);
    let probe_sessions = upstream.live_sessions();
    let session = open_session(&url).await;
    let own = upstream
        .live_sessions()
        .into_iter()
        .find(|s| !probe_sessions.contains(s))
        .expect("the client's own upstream session");
    let before = upstream.initializes();
    upstream.unavailable_initialize_for(OUTAGE);
    assert!(upstream.expire(&own));

    let replies = five_calls(&url, &session).await;

    assert_fast_retryable_errors(&replies);
    // Only the client's session was lost (the supervisor's probe session lives on), so every
    // initialize after the loss is the client's re-handshake.
    let attempts = upstream.initializes() - before;
    assert_eq!(
        attempts, 1,
        "one re-handshake for the client's five callers"
    );
    assert_ended(&url, &session).await;
    end_outage(&upstream);
    new_session_works(&url).await;
    proxy.shutdown().await;
}

/// A new client's `initialize` while the upstream answers every handshake with 503 fails as fast
/// as the upstream does (502 and a JSON-RPC error under its id), not with 504 after the whole
/// connect budget; a client retrying in a tight loop never makes the upstream see more than the
/// supervisor's own, backed-off attempts.
#[tokio::test]
async fn rel_01_initialize_during_the_outage_fails_as_fast_as_the_upstream() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&proxy_config(&upstream, SessionStrategy::Shared)).await;
    let url = mcp_url(&proxy);
    start_outage(&upstream);
    let readyz = format!("http://{}/readyz", proxy.admin_addr);
    wait_for(
        "the proxy to see the loss",
        Duration::from_secs(5),
        || async {
            let status = reqwest::get(&readyz).await.ok()?.status().as_u16();
            (status == 503).then_some(())
        },
    )
    .await;

    let window = Instant::now();
    let before = upstream.initializes();
    let mut clients = 0;
    while window.elapsed() < Duration::from_secs(2) {
        clients += 1;
        let started = Instant::now();
        let reply = post_raw(&url, None, &initialize(clients)).await;
        let elapsed = started.elapsed();
        assert_eq!(
            reply.status, 502,
            "the upstream failed, not the budget: {reply:?}"
        );
        assert!(reply.session.is_none(), "no session: {reply:?}");
        let error = &reply.last()["error"];
        assert_eq!(reply.last()["id"], json!(clients), "{reply:?}");
        assert_eq!(error["code"], json!(-32010), "{reply:?}");
        assert_eq!(error["data"]["outcome"], json!("upstream_unavailable"));
        assert_eq!(error["data"]["retryable"], json!(true));
        assert!(elapsed < FAST, "initialize {clients} took {elapsed:?}");
    }
    let attempts = upstream.initializes() - before;
    assert!(clients >= 5, "the loop ran: {clients}");
    assert!(
        attempts <= 6,
        "{clients} clients in 2 s; the upstream saw {attempts} initializes (the supervisor's backoff)"
    );
    end_outage(&upstream);
    new_session_works(&url).await;
    proxy.shutdown().await;
}

/// An upstream that loses each session right after its handshake (the proxy's first request on
/// it gets 404): the supervisor re-initializes once at once, then backs off, instead of
/// re-initializing as fast as the upstream answers.
#[tokio::test]
async fn rel_01_supervisor_backs_off_an_upstream_that_forgets_every_new_session() {
    let upstream = FaultUpstream::start().await;
    let proxy = start_ready(&proxy_config(&upstream, SessionStrategy::Shared)).await;
    upstream.update(|f| f.forget_after_initialized = true);
    let before = upstream.initializes();
    upstream.expire_all();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = upstream.initializes() - before;
    // Waits of 0, 200, 400, 800, 1600 ms: at most five attempts in 3 s; a loop makes hundreds.
    assert!((2..=8).contains(&attempts), "{attempts} initializes in 3 s");
    let metrics = scrape(&proxy).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_upstream_ready"),
        0.0,
        "{metrics}"
    );
    upstream.update(|f| f.forget_after_initialized = false);
    wait_ready(&proxy, Duration::from_secs(15)).await;
    proxy.shutdown().await;
}
