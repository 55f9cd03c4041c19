//! Resuming a call's SSE reply that the upstream closed before the response (MCP 2025-11-25,
//! "Resumability and Redelivery"; the conformance suite's `server-sse-polling`): a server may
//! send a priming event (an event id, no data), close the stream, and expect the client to
//! `GET` with `Last-Event-ID` after the `retry` it named. Before, the proxy reported such a
//! call as failed (-32012, "stream ended before the response"); now it resumes the stream itself,
//! as a client would, until the response arrives (issue 13).
//!
//! Not responsible for: the call's budget (the relay's deadline bounds every resumption) and
//! resumption by the proxy's own clients.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::UpstreamError;
use super::http::ReplyLimit;
use super::http::client::Body;
use crate::wire::jsonrpc::WireMessage;

/// An upstream response, its body not yet read.
type Response = http::Response<Body>;

/// How a call's stream is re-opened: `GET` on the session with `Last-Event-ID` (the HTTP
/// upstream implements it), `Ok(None)` when the upstream offers no stream. Passed in, so this
/// module uses no transport above it.
pub(super) trait Reopen: Send + Sync + 'static {
    /// The re-opened stream's response.
    ///
    /// # Errors
    /// As the transport's `GET`.
    fn reopen<'a>(
        &'a self,
        session: &'a str,
        protocol_version: &'a str,
        last_event_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Response>, UpstreamError>>;

    /// The limit on each event of a re-opened stream.
    fn reply_limit(&self) -> &ReplyLimit;
}

/// Most resumptions of one call's stream. A stream that closes again without an event is
/// resumed again (a server polling its clients may close before it has anything to say; issue
/// 39, item 11), no sooner than [`DEFAULT_RETRY_MS`] after the last, so a server that never
/// makes progress costs at most this many `GET`s, and the call's budget ends it sooner.
const MAX_RESUMES: u32 = 100;
/// Wait before a resumption when the upstream named no `retry`, in milliseconds.
const DEFAULT_RETRY_MS: u64 = 100;
/// Longest `retry` honored; the relay's deadline ends the call sooner anyway.
const MAX_RETRY: Duration = Duration::from_secs(10);

type Events = BoxStream<'static, Result<sse_stream::Sse, UpstreamError>>;

struct State {
    http: Box<dyn Reopen>,
    session: Option<String>,
    protocol_version: Option<String>,
    events: Option<Events>,
    /// The id of the last event, and whether it arrived since the last resumption.
    last_id: Option<String>,
    progressed: bool,
    retry: Duration,
    answered: bool,
    resumes: u32,
}

/// The JSON-RPC messages of a call's SSE `response`, the stream resumed with `GET` and
/// `Last-Event-ID` whenever it ends (or breaks) before a response, if the upstream gave event
/// ids and the call is on a session. Events without data are skipped; an event whose data is
/// not JSON ends the stream with [`UpstreamError::Malformed`]; an event over the reply limit
/// ends it with [`UpstreamError::TooLarge`], without a resumption.
pub(super) fn call_stream(
    http: impl Reopen,
    session: Option<String>,
    protocol_version: Option<String>,
    response: Response,
) -> BoxStream<'static, Result<WireMessage, UpstreamError>> {
    let events = events(http.reply_limit(), response);
    let state = State {
        http: Box::new(http),
        session,
        protocol_version,
        events: Some(events),
        last_id: None,
        progressed: false,
        retry: Duration::from_millis(DEFAULT_RETRY_MS),
        answered: false,
        resumes: 0,
    };
    futures::stream::unfold(state, next).boxed()
}

fn events(limit: &ReplyLimit, response: Response) -> Events {
    let limit = limit.clone();
    super::http::bounded_sse_events(&limit, response.into_body())
        .map(move |event| event.map_err(|e| limit.sse_error(&e)))
        .boxed()
}

async fn next(mut state: State) -> Option<(Result<WireMessage, UpstreamError>, State)> {
    loop {
        let events = state.events.as_mut()?;
        let broken = match events.next().await {
            Some(Ok(sse)) => {
                if let Some(id) = sse.id.filter(|id| !id.is_empty()) {
                    state.last_id = Some(id);
                    state.progressed = true;
                }
                if let Some(retry) = sse.retry {
                    state.retry = Duration::from_millis(retry).min(MAX_RETRY);
                }
                let Some(data) = sse.data.as_deref().map(str::trim).filter(|d| !d.is_empty())
                else {
                    continue;
                };
                let parsed = WireMessage::parse_unambiguous(data.as_bytes())
                    .map_err(|e| UpstreamError::Malformed(format!("unusable SSE event: {e}")));
                match parsed {
                    Ok(message) => {
                        state.answered |= is_response(&message);
                        return Some((Ok(message), state));
                    }
                    Err(error) => {
                        state.events = None;
                        return Some((Err(error), state));
                    }
                }
            }
            Some(Err(error @ UpstreamError::TooLarge { .. })) => {
                state.events = None;
                return Some((Err(error), state));
            }
            Some(Err(error)) => Some(error),
            None => None,
        };
        if !resume(&mut state).await {
            state.events = None;
            return broken.map(|error| (Err(error), state));
        }
    }
}

/// Re-opens the stream after its last event id; `false` when it cannot or must not be.
async fn resume(state: &mut State) -> bool {
    let (Some(session), Some(last_id)) = (&state.session, &state.last_id) else {
        return false;
    };
    if state.answered || state.resumes >= MAX_RESUMES {
        return false;
    }
    state.resumes += 1;
    // Without an event since the last resumption, the server's `retry` is not trusted below the
    // default: a stream that closes at once must not become a busy loop of requests.
    let wait = if state.progressed {
        state.retry
    } else {
        state.retry.max(Duration::from_millis(DEFAULT_RETRY_MS))
    };
    state.progressed = false;
    tokio::time::sleep(wait).await;
    let version = state.protocol_version.as_deref().unwrap_or_default();
    match state.http.reopen(session, version, last_id).await {
        Ok(Some(response)) => {
            tracing::debug!(last_event_id = %crate::observe::escaped::Escaped(last_id), "resumed a call's SSE stream with GET");
            state.events = Some(events(state.http.reply_limit(), response));
            true
        }
        Ok(None) | Err(_) => false,
    }
}

/// A JSON-RPC response (a result or an error with an id), not a server request.
fn is_response(message: &WireMessage) -> bool {
    // Read through the envelope: the result stays unparsed (issue 14).
    let has = |name| message.member_text(&[name]).is_some();
    !has("method") && has("id") && (has("result") || has("error"))
}
