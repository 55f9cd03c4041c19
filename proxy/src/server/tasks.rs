//! The tasks that run behind the fronts until the upstream stops: idle session expiry, the
//! fan-out of the upstream's own messages, the OAuth key refresh, and on stopping the close of
//! every `PerClient` upstream session and of every stdio child.
//!
//! Not responsible for: the fronts or the upstream supervisor (the parent starts those), or
//! the order of shutdown (the parent's `upstream_stop` ends these tasks after the fronts).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::access::auth::DownstreamAuth;
use crate::engine::fanout::{self, Fanout};
use crate::engine::state::Engine;
use crate::transport::upstream::Endpoint;
use crate::wire::jsonrpc::WireMessage;

/// Spawns the background tasks of `engine`; each ends once `stop` fires (the close tasks
/// start then). `server_messages` are the upstream's standalone-stream messages for the
/// fan-out; `idle_timeout` is `session.idleTimeout`.
pub(super) fn spawn(
    engine: &Arc<Engine>,
    downstream_auth: Option<&DownstreamAuth>,
    endpoint: &Endpoint,
    server_messages: mpsc::Receiver<WireMessage>,
    idle_timeout: Duration,
    stop: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(expire_sessions(
            Arc::clone(engine),
            idle_timeout,
            stop.clone(),
        )),
        tokio::spawn(fanout::run(
            Fanout {
                upstream: Arc::clone(&engine.upstream),
                sessions: Arc::clone(&engine.sessions),
                subscriptions: Arc::clone(&engine.subscriptions),
                metrics: Arc::clone(&engine.metrics),
            },
            server_messages,
            stop.clone(),
        )),
        tokio::spawn(close_dedicated(Arc::clone(engine), stop.clone())),
    ];
    if let Some(DownstreamAuth::OAuth(server)) = downstream_auth {
        tasks.push(tokio::spawn(crate::access::auth::refresh_keys(
            Arc::clone(server),
            stop.clone(),
        )));
    }
    if let Some(stdio) = endpoint.stdio().cloned() {
        // On shutdown every child is stopped and reaped before `wait` returns.
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            stop.cancelled().await;
            stdio.shutdown().await;
        }));
    }
    tasks
}

/// Once `stop` fires, closes the `PerClient` upstream session of every downstream session.
async fn close_dedicated(engine: Arc<Engine>, stop: CancellationToken) {
    stop.cancelled().await;
    let dedicated = engine
        .sessions
        .all()
        .iter()
        .filter_map(|client| {
            client
                .dedicated()
                .map(crate::client::per_client::Dedicated::current)
        })
        .collect();
    crate::client::per_client::close_all(dedicated).await;
}

/// Ends the downstream sessions idle past `idle_timeout` (checked every quarter of it, between
/// 100 ms and 60 s), and forgets rate-limit windows no call uses any more.
async fn expire_sessions(engine: Arc<Engine>, idle_timeout: Duration, stop: CancellationToken) {
    let period = (idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        if let Some(limits) = &engine.rate_limits {
            limits.retain_recent();
        }
        let expired = engine.sessions.expired_ids();
        for id in &expired {
            if engine.end_session(id) {
                engine.metrics.downstream_sessions_expired.inc();
            }
        }
        if !expired.is_empty() {
            tracing::info!(expired = expired.len(), "downstream sessions expired");
        }
    }
}
