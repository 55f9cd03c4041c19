//! The reply to a request the session sends itself: a stdio reply in the HTTP shape, and the
//! wait for the response with a given id in a reply.

use futures::StreamExt;
use serde_json::Value;

use crate::transport::stdio::PendingReply;
use crate::transport::upstream::UpstreamError;
use crate::transport::upstream::http::Reply;

/// A stdio reply as the HTTP-shaped [`Reply`] the forwarding code handles: a stream for a
/// request, `Accepted` for anything else.
pub(super) fn stdio_reply(pending: PendingReply) -> Reply {
    if pending.is_request() {
        Reply::Stream(Box::pin(pending))
    } else {
        Reply::Accepted
    }
}

/// Waits for the response with `id` in a reply (or an error with `id: null`, the reply being
/// that request's alone: field case BR-01).
pub(super) async fn final_response(reply: Reply, id: &Value) -> Result<Value, UpstreamError> {
    match reply {
        Reply::Json(value) if value.is_response_to(id) => Ok(value.into_view()),
        Reply::Json(_) => Err(UpstreamError::Malformed(
            "response id does not match".into(),
        )),
        Reply::Accepted => Err(UpstreamError::Malformed("request answered with 202".into())),
        Reply::Stream(mut stream) => {
            while let Some(message) = stream.next().await {
                let message = message?;
                if message.is_response_to(id) {
                    return Ok(message.into_view());
                }
            }
            Err(UpstreamError::Malformed(
                "stream ended before the response".into(),
            ))
        }
    }
}
