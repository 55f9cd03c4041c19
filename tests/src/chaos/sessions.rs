//! The clients of a chaos run: concurrent sessions that make calls until the run's tickets are
//! gone (opening a new session whenever the proxy ended theirs), their standalone streams (read,
//! unread or none), and the churn of short sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Settings;
use super::client::{Client, Verdict, read_stream};
use super::schedule::Schedule;
use super::tally::Tally;

/// Longest a client keeps trying to open a session before it gives up: the proxy did not
/// recover.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between a client's `initialize` attempts.
const RETRY: Duration = Duration::from_millis(100);
/// Every this many calls of a session, one is slow (with progress where the upstream can).
const SLOW_EVERY: u64 = 8;

/// What the sessions of one phase share.
pub(super) struct Ctx {
    pub(super) client: Client,
    pub(super) schedule: Schedule,
    pub(super) tally: Arc<Tally>,
    /// The source of ids unique in the run.
    pub(super) ids: Arc<AtomicU64>,
}

/// The JSON-RPC ids of one session: numbers unique in the run, or (as clients number their own
/// requests) `"c1"`, `"c2"`, ... which every such session reuses, so that the proxy must keep
/// equal ids of different sessions apart.
struct Ids {
    unique: Option<Arc<AtomicU64>>,
    next: u64,
}

impl Ids {
    /// Ids unique in the run from `ids`, or with `unique` false the session's own.
    fn new(ctx: &Ctx, unique: bool) -> Self {
        Self {
            unique: unique.then(|| ctx.ids.clone()),
            next: 0,
        }
    }

    fn next(&mut self) -> Value {
        match &self.unique {
            Some(ids) => json!(ids.fetch_add(1, Ordering::Relaxed)),
            None => {
                self.next += 1;
                json!(format!("c{}", self.next))
            }
        }
    }
}

/// What a session does with its standalone stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamUse {
    /// Opens none.
    None,
    /// Opens one and reads it to its end.
    Read,
    /// Opens one and never reads a byte of it.
    Unread,
}

/// The standalone stream of session `n` of a phase: the first never reads its stream, the next
/// three read theirs.
fn stream_use(n: usize) -> StreamUse {
    match n {
        0 => StreamUse::Unread,
        1..=3 => StreamUse::Read,
        _ => StreamUse::None,
    }
}

/// An open downstream session and its standalone stream.
struct Live {
    id: String,
    ids: Ids,
    /// Opened per [`StreamUse::Unread`]: held, never read.
    _unread: Option<reqwest::Response>,
    /// The task reading the stream per [`StreamUse::Read`].
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// Runs `count` sessions until the schedule's tickets are gone; what ended any of them early.
pub(super) async fn sessions(ctx: &Arc<Ctx>, count: usize) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..count {
        let ctx = ctx.clone();
        tasks.spawn(async move { (n, session(&ctx, n).await) });
    }
    let mut problems = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((_, Ok(()))) => {}
            Ok((n, Err(error))) => problems.push(format!("session {n}: {error:#}")),
            Err(error) => problems.push(format!("a session task failed: {error}")),
        }
    }
    problems
}

/// One concurrent session: calls until the tickets are gone, opening a new session whenever the
/// proxy says (404) that this one ended; then closes it. Odd sessions use ids unique in the run,
/// even ones their own.
async fn session(ctx: &Ctx, n: usize) -> anyhow::Result<()> {
    let mut live: Option<Live> = None;
    let mut opened = 0;
    let mut calls: u64 = 0;
    while let Some(ticket) = ctx.schedule.take().await {
        let mut current = match live.take() {
            Some(current) => current,
            None => {
                opened += 1;
                open(ctx, stream_use(n), Ids::new(ctx, n % 2 == 1)).await?
            }
        };
        calls += 1;
        let payload = format!("s{n}.{opened}-c{calls}");
        let (verdict, status) = call(
            ctx,
            &mut current,
            &payload,
            calls.is_multiple_of(SLOW_EVERY),
        )
        .await;
        if let Some(stage) = ctx.tally.stages.get(ctx.schedule.stage_ended(ticket)) {
            stage.record(&verdict);
        }
        // 404: the proxy ended the session; a client starts over with initialize.
        if status != 404 {
            live = Some(current);
        }
    }
    if let Some(current) = live {
        close(ctx, current).await;
    }
    Ok(())
}

/// One call on `live` with `payload`, slow or not, counted; the verdict and the HTTP status.
async fn call(ctx: &Ctx, live: &mut Live, payload: &str, slow: bool) -> (Verdict, u16) {
    let id = live.ids.next();
    let began = Instant::now();
    let (verdict, status) = ctx.client.call(&live.id, &id, payload, slow).await;
    ctx.tally.latency(began.elapsed());
    ctx.tally.calls.record(&verdict);
    (verdict, status)
}

/// Opens a session (`initialize`, `notifications/initialized`, the standalone stream per
/// `stream`), retrying every [`RETRY`] for at most [`RECOVERY_DEADLINE`].
async fn open(ctx: &Ctx, stream: StreamUse, mut ids: Ids) -> anyhow::Result<Live> {
    let deadline = Instant::now() + RECOVERY_DEADLINE;
    loop {
        if let Some(session) = try_open(ctx, &mut ids).await {
            return Ok(with_stream(ctx, session, stream, ids).await);
        }
        ensure!(
            Instant::now() < deadline,
            "no session within {RECOVERY_DEADLINE:?}: the proxy did not recover"
        );
        tokio::time::sleep(RETRY).await;
    }
}

/// One `initialize` and `notifications/initialized`; the session id when both succeeded.
async fn try_open(ctx: &Ctx, ids: &mut Ids) -> Option<String> {
    let (verdict, session) = ctx.client.initialize(&ids.next()).await;
    ctx.tally.initializes.record(&verdict);
    let (Verdict::Result, Some(session)) = (verdict, session) else {
        return None;
    };
    if ctx.client.initialized(&session).await {
        return Some(session);
    }
    ctx.tally.initialized_refused.add(1);
    ctx.client.delete(&session).await;
    None
}

/// Whether a new client gets through now: a session opened, one call answered with its result
/// (payload `probe-<n>`), the session deleted. Counted like any session and call.
pub(super) async fn probe(ctx: &Ctx, n: u64) -> bool {
    let mut ids = Ids::new(ctx, true);
    let Some(session) = try_open(ctx, &mut ids).await else {
        return false;
    };
    let mut live = with_stream(ctx, session, StreamUse::None, ids).await;
    let (verdict, _) = call(ctx, &mut live, &format!("probe-{n}"), false).await;
    ctx.tally.probes.add(1);
    close(ctx, live).await;
    verdict == Verdict::Result
}

/// The session `id` with its standalone stream opened per `stream` (when the proxy lets it).
async fn with_stream(ctx: &Ctx, id: String, stream: StreamUse, ids: Ids) -> Live {
    let mut live = Live {
        id,
        ids,
        _unread: None,
        reader: None,
    };
    if stream == StreamUse::None {
        return live;
    }
    let Some(response) = ctx.client.open_stream(&live.id).await else {
        ctx.tally.streams_refused.add(1);
        return live;
    };
    ctx.tally.streams_opened.add(1);
    match stream {
        StreamUse::Unread => live._unread = Some(response),
        _ => {
            let tally = ctx.tally.clone();
            live.reader = Some(tokio::spawn(async move {
                read_stream(response, &tally).await;
            }));
        }
    }
    live
}

/// Ends `live` with `DELETE` (a 404 is fine: the proxy had ended it) and drops its stream.
async fn close(ctx: &Ctx, live: Live) {
    let status = ctx.client.delete(&live.id).await;
    if !matches!(status, Some(200 | 202 | 204 | 404)) {
        ctx.tally.deletes_failed.add(1);
    }
}

/// Opens, calls once and deletes `settings.churn` sessions (each with an unread standalone
/// stream), spread evenly over the run's tickets; stops early when `done` while tickets remain
/// (every session ended early).
pub(super) async fn churn(
    ctx: Arc<Ctx>,
    settings: Settings,
    done: CancellationToken,
) -> anyhow::Result<()> {
    let churn = settings.churn as u64;
    for j in 0..churn {
        let due = j * settings.calls / churn.max(1);
        while ctx.schedule.taken() < due {
            if done.is_cancelled() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut live = open(&ctx, StreamUse::Unread, Ids::new(&ctx, false))
            .await
            .with_context(|| format!("churned session {j}"))?;
        call(&ctx, &mut live, &format!("churn{j}"), false).await;
        close(&ctx, live).await;
        ctx.tally.churned.add(1);
    }
    Ok(())
}
