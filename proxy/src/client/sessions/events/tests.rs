use super::*;
use serde_json::json;

/// A replay budget of `limit` bytes, counted in a gauge of its own.
fn budget(limit: usize) -> ReplayBudget {
    let gauge = prometheus::IntGauge::new("replay_bytes", "test").expect("valid gauge");
    ReplayBudget::new(limit, gauge)
}

/// A log with a budget that never binds.
fn unbounded() -> EventLog {
    EventLog::new(Arc::new(budget(usize::MAX)))
}

fn text(event: &StreamEvent) -> String {
    event
        .message
        .as_ref()
        .map_or_else(String::new, |m| m.sse_data().to_string())
}

#[tokio::test]
async fn a_dropped_connection_resumes_after_the_last_id_it_saw() {
    let log = Arc::new(unbounded());
    let (tx, rx) = mpsc::channel(8);
    let mut first = log.carry(StreamKind::Reply, rx, true, CancellationToken::new());
    let priming = first.recv().await.expect("priming event");
    assert!(priming.message.is_none(), "{priming:?}");
    tx.send(json!({"n": 1}).into())
        .await
        .expect("the pump reads");
    let one = first.recv().await.expect("first message");
    assert_eq!(text(&one), r#"{"n":1}"#);
    drop(first);
    tx.send(json!({"n": 2}).into())
        .await
        .expect("the pump reads");
    tx.send(json!({"n": 3}).into())
        .await
        .expect("the pump reads");
    drop(tx);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut resumed = log.resume(&one.id).expect("resumable");
    let mut seen = Vec::new();
    while let Some(event) = resumed.recv().await {
        seen.push(text(&event));
    }
    assert_eq!(
        seen,
        [r#"{"n":2}"#, r#"{"n":3}"#],
        "replayed, then the stream ended"
    );
    let mut again = log.resume(&priming.id).expect("from the priming id");
    assert_eq!(text(&again.recv().await.expect("an event")), r#"{"n":1}"#);
}

#[tokio::test]
async fn ids_of_another_log_or_stream_are_not_resumed() {
    let log = Arc::new(unbounded());
    let other = unbounded();
    let (tx, rx) = mpsc::channel(8);
    let mut events = log.carry(StreamKind::Reply, rx, false, CancellationToken::new());
    tx.send(json!(1).into()).await.expect("the pump reads");
    let id = events.recv().await.expect("an event").id;
    assert_eq!(other.resume(&id).err(), Some(Unresumable::Unknown));
    assert_eq!(log.resume("garbage").err(), Some(Unresumable::Unknown));
    let unknown_stream = id.replace(".1.", ".7.");
    assert_eq!(
        log.resume(&unknown_stream).err(),
        Some(Unresumable::Unknown)
    );
    let future_seq = format!("{}9", id);
    assert_eq!(log.resume(&future_seq).err(), Some(Unresumable::Unknown));
}

#[tokio::test]
async fn old_events_past_the_bound_are_evicted_not_replayed_wrongly() {
    let log = Arc::new(unbounded());
    let (tx, rx) = mpsc::channel(STREAM_EVENTS + 8);
    let events = log.carry(StreamKind::Reply, rx, true, CancellationToken::new());
    drop(events);
    for n in 0..STREAM_EVENTS + 2 {
        tx.send(json!(n).into()).await.expect("the pump reads");
    }
    drop(tx);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first = log.event_id(1, 1);
    assert_eq!(log.resume(&first).err(), Some(Unresumable::Evicted));
    let mut recent = log.resume(&log.event_id(1, 2)).expect("still kept");
    assert_eq!(
        text(&recent.recv().await.expect("an event")),
        "2",
        "seq 3 carries message 2"
    );
}

#[tokio::test]
async fn a_closed_session_ends_the_pump_and_its_sender_sees_it() {
    let log = Arc::new(unbounded());
    let (tx, rx) = mpsc::channel(1);
    let closed = CancellationToken::new();
    let _events = log.carry(StreamKind::Standalone, rx, false, closed.clone());
    closed.cancel();
    tokio::time::timeout(Duration::from_secs(2), tx.closed())
        .await
        .expect("the relay sees the stream end with the session");
}

#[tokio::test]
async fn what_was_queued_before_the_session_closed_still_reaches_the_client() {
    let log = Arc::new(unbounded());
    let (tx, rx) = mpsc::channel(4);
    let closed = CancellationToken::new();
    tx.send(json!({"id": 2, "error": {"code": -32000}}).into())
        .await
        .expect("queued");
    closed.cancel();
    let mut events = log.carry(StreamKind::Standalone, rx, false, closed);
    let event = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .expect("not stuck")
        .expect("the queued answer is delivered");
    assert_eq!(text(&event), r#"{"error":{"code":-32000},"id":2}"#);
    assert!(events.recv().await.is_none(), "then the stream ends");
}

#[tokio::test]
async fn a_reply_stream_outlives_its_session_until_the_call_answers() {
    let log = Arc::new(unbounded());
    let (tx, rx) = mpsc::channel(4);
    let closed = CancellationToken::new();
    let mut events = log.carry(StreamKind::Reply, rx, false, closed.clone());
    closed.cancel();
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.send(json!({"id": 2, "error": {"code": -32000}}).into())
        .await
        .expect("the pump still reads");
    drop(tx);
    let event = events.recv().await.expect("the late answer is delivered");
    assert_eq!(text(&event), r#"{"error":{"code":-32000},"id":2}"#);
    assert!(events.recv().await.is_none());
}

/// Carries one reply stream of `log` with `message`, reads it to its end, and returns the
/// stream's priming event id. The pump is finishing when this returns (`settled` waits).
async fn finished_stream(log: &Arc<EventLog>, message: serde_json::Value) -> String {
    let (tx, rx) = mpsc::channel(4);
    let mut events = log.carry(StreamKind::Reply, rx, true, CancellationToken::new());
    let priming = events.recv().await.expect("priming event").id;
    tx.send(message.into()).await.expect("the pump reads");
    drop(tx);
    while events.recv().await.is_some() {}
    priming
}

/// Lets finishing pumps finish.
async fn settled() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

fn padded(bytes: usize) -> serde_json::Value {
    json!({ "pad": "x".repeat(bytes) })
}

#[tokio::test]
async fn the_replay_budget_forgets_the_stream_that_finished_first_in_any_session() {
    let budget = Arc::new(budget(1000));
    let first = Arc::new(EventLog::new(Arc::clone(&budget)));
    let second = Arc::new(EventLog::new(Arc::clone(&budget)));
    let older = finished_stream(&first, padded(600)).await;
    settled().await;
    assert!(first.resume(&older).is_ok(), "kept while within the budget");
    let newer = finished_stream(&second, padded(600)).await;
    settled().await;
    assert_eq!(
        first.resume(&older).err(),
        Some(Unresumable::Unknown),
        "the other session's older stream is forgotten"
    );
    let mut replay = second.resume(&newer).expect("the newer stream is kept");
    assert!(text(&replay.recv().await.expect("its message")).contains("xxx"));
    assert!(budget.used() <= 1000, "used {}", budget.used());
}

#[tokio::test]
async fn a_live_stream_is_never_forgotten_for_the_replay_budget() {
    let budget = Arc::new(budget(100));
    let log = Arc::new(EventLog::new(Arc::clone(&budget)));
    let (tx, rx) = mpsc::channel(4);
    let mut events = log.carry(StreamKind::Reply, rx, true, CancellationToken::new());
    let priming = events.recv().await.expect("priming event").id;
    tx.send(padded(500).into()).await.expect("the pump reads");
    events.recv().await.expect("the message");
    drop(events);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(budget.used() > 100, "over the budget while live");
    let mut replay = log.resume(&priming).expect("a live stream stays resumable");
    assert!(text(&replay.recv().await.expect("its message")).contains("xxx"));
    drop(tx);
}

#[tokio::test]
async fn an_ended_session_gives_its_replay_bytes_back() {
    let budget = Arc::new(budget(usize::MAX));
    let log = Arc::new(EventLog::new(Arc::clone(&budget)));
    finished_stream(&log, padded(600)).await;
    settled().await;
    assert!(budget.used() > 600);
    drop(log);
    assert_eq!(budget.used(), 0);
}

#[tokio::test]
async fn the_finished_queue_stays_proportional_to_the_streams_kept() {
    let budget = Arc::new(budget(usize::MAX));
    let log = Arc::new(EventLog::new(Arc::clone(&budget)));
    for _ in 0..3000 {
        finished_stream(&log, json!(1)).await;
    }
    settled().await;
    // The log keeps RETAINED_STREAMS streams; the queue is pruned of the others once it has
    // doubled since its last pruning.
    assert!(budget.queued() <= 1024, "queued {}", budget.queued());
}
