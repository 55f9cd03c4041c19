//! Opening an upstream session: the era probe's outcome decides between a modern session
//! (`server/discover`, no handshake) and the legacy `initialize` handshake, with the fallbacks
//! a server that mishandles the probe needs (issue 13).
//!
//! Sources: MCP 2025-06-18, "Lifecycle" (initialize, then `notifications/initialized`); MCP
//! 2026-07-28 "Versioning", "Discovery" and "Backward Compatibility".

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::params::{hop_of, proxy_initialize_params};
use super::probe::{STDIO_PROBE_WAIT, Unanswered, probe_http, probe_stdio};
use super::reply::{final_response, stdio_reply};
use super::{Link, UpstreamSession};
use crate::transport::stdio::Connection;
use crate::transport::upstream::UpstreamError;
use crate::transport::upstream::endpoint::Endpoint;
use crate::transport::upstream::era::{ClientHop, Probe, UpstreamEra, classify};
use crate::wire::jsonrpc::Pointer as _;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::revision::{HANDSHAKE_VERSIONS, META_SERVER_INFO};

impl UpstreamSession {
    /// Opens an upstream session in the era the upstream speaks
    /// ([`era`](crate::transport::upstream::era)). Unless the endpoint is known to be legacy, a
    /// `server/discover` probe comes first: a modern
    /// upstream's `DiscoverResult` makes a modern session (no handshake, no session id); any
    /// other answer, or silence for [`STDIO_PROBE_WAIT`] on stdio, falls back to the `initialize`
    /// handshake, on a fresh child when the probe ended the old one, so a legacy server that
    /// mishandles the probe still gets its `initialize` (issue 13). The era found is cached on
    /// the endpoint.
    ///
    /// `params` are the `initialize` params to send (a `PerClient` client's own); `None` sends
    /// the proxy's ([`proxy_initialize_params`]). A modern upstream is told their
    /// `capabilities` and `clientInfo` on the proxy's own requests.
    ///
    /// # Errors
    /// Any [`UpstreamError`] from either step; [`UpstreamError::Handshake`] when the upstream
    /// answers `initialize` with an error or a revision without a handshake, or speaks only
    /// modern revisions the proxy does not.
    ///
    /// # Cancellation
    /// Applies no timeout itself; callers wrap it in the connect budget. Dropping it abandons
    /// the handshake and leaves no session behind on the proxy's side.
    pub async fn handshake(
        endpoint: &Endpoint,
        params: Option<Value>,
    ) -> Result<Self, UpstreamError> {
        let params = params.unwrap_or_else(proxy_initialize_params);
        if endpoint.era().get() == Some(UpstreamEra::Legacy) {
            let session = Self::initialize(endpoint, None, &params).await;
            if let Err(UpstreamError::Handshake(_)) = &session {
                // The cached era may be stale (the server changed): the next attempt probes.
                endpoint.era().forget();
            }
            return session;
        }
        let hop = hop_of(&params);
        let (probe, connection) = match endpoint {
            Endpoint::Http(http) => (probe_http(http, &hop).await?, None),
            Endpoint::Stdio(stdio) => {
                let connection = Arc::new(stdio.open().await?);
                // An upstream known to be modern is waited for within the connect budget (the
                // caller's); an unknown one for `STDIO_PROBE_WAIT`.
                let wait = match endpoint.era().get() {
                    Some(UpstreamEra::Modern) => Duration::MAX,
                    _ => STDIO_PROBE_WAIT,
                };
                let (probe, unanswered) = probe_stdio(&connection, &hop, wait).await;
                if probe == Probe::Legacy && !connection.ended().is_cancelled() {
                    return Self::initialize_after_silence(
                        endpoint, connection, unanswered, &params, hop,
                    )
                    .await;
                }
                let alive = !connection.ended().is_cancelled();
                (probe, alive.then_some(connection))
            }
        };
        match probe {
            Probe::Modern { version, result } => {
                endpoint.era().set(UpstreamEra::Modern);
                let link = match (endpoint, connection) {
                    (Endpoint::Http(http), _) => Link::Http(http.clone(), None),
                    (Endpoint::Stdio(_), Some(connection)) => Link::Stdio(connection),
                    (Endpoint::Stdio(stdio), None) => Link::Stdio(Arc::new(stdio.open().await?)),
                };
                Self::modern(link, version, result, hop).await
            }
            Probe::ModernWithoutCommonVersion {
                legacy_offered: false,
                supported,
            } => Err(UpstreamError::Handshake(format!(
                "upstream speaks only MCP revisions {supported:?}; the proxy speaks {:?}",
                crate::wire::revision::supported_versions()
            ))),
            Probe::ModernWithoutCommonVersion { .. } => {
                // A dual-era server without the proxy's modern revision: its legacy side, on
                // a fresh child (a stdio server may hold to the era its first message chose).
                endpoint.era().set(UpstreamEra::Legacy);
                Self::initialize(endpoint, None, &params).await
            }
            Probe::Legacy => {
                tracing::info!(upstream = %endpoint, restarted = connection.is_none() && endpoint.stdio().is_some(), "upstream speaks a legacy MCP revision: initialize");
                endpoint.era().set(UpstreamEra::Legacy);
                Self::initialize(endpoint, connection, &params).await
            }
        }
    }

    /// `initialize` on a stdio child that answered the probe in no way: a legacy server that
    /// ignores unknown requests, or a modern one slow to start. If `initialize` fails and the
    /// probe's answer arrives after all (within [`STDIO_PROBE_WAIT`] more) naming a modern
    /// revision, the child is modern and gets a modern session.
    async fn initialize_after_silence(
        endpoint: &Endpoint,
        connection: Arc<Connection>,
        unanswered: Option<Unanswered>,
        params: &Value,
        hop: ClientHop,
    ) -> Result<Self, UpstreamError> {
        endpoint.era().set(UpstreamEra::Legacy);
        let legacy = Self::initialize(endpoint, Some(Arc::clone(&connection)), params).await;
        let (Err(error), Some(unanswered)) = (&legacy, unanswered) else {
            return legacy;
        };
        let late = tokio::time::timeout(STDIO_PROBE_WAIT, unanswered).await;
        let Ok(Ok(response)) = late else {
            return legacy;
        };
        match classify(Some(&response)) {
            Probe::Modern { version, result } if !connection.ended().is_cancelled() => {
                tracing::info!(upstream = %endpoint, refused = %error, "stdio upstream answered the era probe late: modern");
                endpoint.era().set(UpstreamEra::Modern);
                Self::modern(Link::Stdio(connection), version, result, hop).await
            }
            Probe::Modern { .. } => {
                // It ended on the `initialize` it was not meant to get: the next attempt knows
                // it is modern and waits for its answer to the probe.
                tracing::info!(upstream = %endpoint, "stdio upstream answered the era probe late and ended on initialize: modern");
                endpoint.era().set(UpstreamEra::Modern);
                legacy
            }
            _ => legacy,
        }
    }

    /// The legacy handshake: `initialize` without a session header, then
    /// `notifications/initialized` on the new session. The session exists only once both
    /// succeeded, so no caller can see a half-initialized session. A stdio `connection` still
    /// alive after the era probe is used; otherwise a new child is started.
    async fn initialize(
        endpoint: &Endpoint,
        connection: Option<Arc<Connection>>,
        params: &Value,
    ) -> Result<Self, UpstreamError> {
        let request: WireMessage =
            json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params }).into();
        // The handshake names the proxy's span (replacing a client's `_meta.traceparent` that
        // came with PerClient's forwarded params).
        let request = crate::observe::telemetry::with_trace_context(&request).unwrap_or(request);
        let (reply, link) = match endpoint {
            Endpoint::Http(http) => {
                let (reply, id) = http.post(&request, None, None).await?;
                (reply, Link::Http(http.clone(), id))
            }
            Endpoint::Stdio(stdio) => {
                // Dropping this future drops the connection, which stops the child.
                let connection = match connection {
                    Some(connection) => connection,
                    None => Arc::new(stdio.open().await?),
                };
                let reply = stdio_reply(connection.send_own(&request).await?);
                (reply, Link::Stdio(connection))
            }
        };
        let response = final_response(reply, &json!(0)).await?;
        if let Some(error) = response.get("error") {
            return Err(UpstreamError::Handshake(format!(
                "initialize failed: {error}"
            )));
        }
        let result = response
            .get("result")
            .cloned()
            .ok_or_else(|| UpstreamError::Handshake("initialize result missing".into()))?;
        let protocol_version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !HANDSHAKE_VERSIONS.contains(&protocol_version.as_str()) {
            return Err(UpstreamError::Handshake(format!(
                "upstream chose unsupported protocol version {protocol_version:?}"
            )));
        }
        let session = Self::new(
            link,
            UpstreamEra::Legacy,
            protocol_version,
            result,
            ClientHop::default(),
        );
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        session.send(&initialized.into()).await?;
        Ok(session)
    }

    /// A modern session over `link`: the upstream's `DiscoverResult` (asked for again when the
    /// probe got a modern error instead) kept, and seen as an `initialize` result
    /// (`capabilities`, `serverInfo`, `instructions`) by the rest of the proxy.
    async fn modern(
        link: Link,
        version: &str,
        discover: Value,
        hop: ClientHop,
    ) -> Result<Self, UpstreamError> {
        let mut session = Self::new(
            link,
            UpstreamEra::Modern,
            version.to_owned(),
            Value::Null,
            hop,
        );
        let discover = if discover.is_object() {
            discover
        } else {
            let response = session.request("server/discover", json!({})).await?;
            response.get("result").cloned().ok_or_else(|| {
                UpstreamError::Handshake(format!(
                    "server/discover failed: {}",
                    response.get("error").cloned().unwrap_or_default()
                ))
            })?
        };
        let mut view = json!({
            "protocolVersion": version,
            "capabilities": discover.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        });
        if let Some(info) = discover.at("/_meta").and_then(|m| m.get(META_SERVER_INFO)) {
            view["serverInfo"] = info.clone();
        }
        if let Some(instructions) = discover.get("instructions") {
            view["instructions"] = instructions.clone();
        }
        session.initialize_result = view;
        tracing::debug!(protocol_version = version, "modern upstream discovered");
        Ok(session)
    }
}
