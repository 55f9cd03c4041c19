//! The resource limits the proxy holds against hostile clients and upstreams (`limits`, issue
//! 39): message sizes, connection deadlines and caps, and the audit queue. The McpUpstream spec
//! embeds them unchanged as `spec.proxy.limits`.
//!
//! Not responsible for: enforcing them (the proxy's listeners, front, upstream transports and
//! audit writer do, each counting what it refuses), or the time budgets of a call (`timeouts`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ProxyConfigError, parse_positive};
use crate::duration::DurationString;

const KIB: u32 = 1024;
const MIB: u32 = 1024 * 1024;

/// Limits on what one client, connection or upstream reply may cost the proxy. Every limit has
/// a default that fits a proxy container with a 128 MiB memory limit; what each refuses is
/// counted in a metric (`proxy/README.md`, "Limits").
///
/// Example: `{maxRequestBytes: 1048576, maxConnections: 512, headerReadTimeout: 5s}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.maxConnectionsPerSource) || !has(self.maxConnections) || self.maxConnectionsPerSource <= self.maxConnections", "message": "spec.proxy.limits.maxConnectionsPerSource must be at most spec.proxy.limits.maxConnections"},
    {"rule": "(has(self.maxListenUris) ? self.maxListenUris : 256) <= (has(self.maxSubscriptionsPerSession) ? self.maxSubscriptionsPerSession : 1024)", "message": "spec.proxy.limits.maxListenUris must be at most spec.proxy.limits.maxSubscriptionsPerSession"}
]))]
pub struct LimitsSpec {
    /// Largest request body a client may POST to the MCP endpoint, in bytes. A larger body is
    /// refused with HTTP 413 before it is read whole (from `Content-Length` when declared).
    /// Default `4194304` (4 MiB); 1024 to 67108864 (64 MiB).
    #[serde(default = "default_max_request_bytes")]
    #[schemars(with = "i32", range(min = 1024, max = 67_108_864))]
    pub max_request_bytes: u32,
    /// Largest reply the proxy accepts from the upstream for one request, in bytes: a JSON
    /// body, one SSE event, or one stdio line. A larger reply is not relayed; the client gets a
    /// JSON-RPC error naming this limit, with its request id. Default `16777216` (16 MiB);
    /// 1024 to 268435456 (256 MiB).
    #[serde(default = "default_max_reply_bytes")]
    #[schemars(with = "i32", range(min = 1024, max = 268_435_456))]
    pub max_reply_bytes: u32,
    /// Most bytes of request line and headers a client may send on one request, on the MCP and
    /// the admin port; more is answered HTTP 431 and the connection closed, and no more than
    /// this is buffered while the headers arrive. Default `32768` (32 KiB); 8192 to 1048576
    /// (1 MiB).
    #[serde(default = "default_max_header_bytes")]
    #[schemars(with = "i32", range(min = 8192, max = 1_048_576))]
    pub max_header_bytes: u32,
    /// How long a client may take to send a request's headers once a connection is open, or
    /// once the first byte of a keep-alive connection's next request arrived, e.g. `10s`; then
    /// the connection is closed without an answer. Both ports. Default `10s`, more than 0s and
    /// at most 5m.
    #[serde(default = "default_header_read_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('5m')", "message": "spec.proxy.limits.headerReadTimeout must be more than 0s and at most 5m"}]))]
    pub header_read_timeout: DurationString,
    /// How long a client may take to send a request's whole body once its headers arrived,
    /// e.g. `30s`: a deadline for the whole body, not for each read. When the proxy has not
    /// read the whole body by then, the request is refused (HTTP 408) and the connection
    /// closed. Both ports. Default `30s`, more than 0s and at most 1h.
    #[serde(default = "default_request_body_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('1h')", "message": "spec.proxy.limits.requestBodyTimeout must be more than 0s and at most 1h"}]))]
    pub request_body_timeout: DurationString,
    /// How long a keep-alive connection with no request in flight stays open, e.g. `60s`;
    /// then it is closed. A request waiting for its answer (a long `tools/call`) or an open
    /// stream (a GET stream, an SSE reply) is in flight, never idle. Both ports. Default
    /// `60s`, more than 0s and at most 1h.
    #[serde(default = "default_idle_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('1h')", "message": "spec.proxy.limits.idleTimeout must be more than 0s and at most 1h"}]))]
    pub idle_timeout: DurationString,
    /// Most client connections open at once on the MCP port; a connection past it is answered
    /// HTTP 503 and closed as soon as it is accepted, before its request is read. The admin
    /// port has a cap of its own (64). Default `1024`; 1 to 65536.
    #[serde(default = "default_max_connections")]
    #[schemars(with = "i32", range(min = 1, max = 65536))]
    pub max_connections: u32,
    /// Most connections open at once from one source IP address on the MCP port; a connection
    /// past it is refused as past `maxConnections`. Behind an ingress or a mesh every client
    /// shares the ingress's address: raise it to `maxConnections` there. The admin port has a
    /// cap of its own (32). Default `256`; 1 to 65536, at most `maxConnections`.
    #[serde(default = "default_max_connections_per_source")]
    #[schemars(with = "i32", range(min = 1, max = 65536))]
    pub max_connections_per_source: u32,
    /// Largest bearer token accepted in `Authorization`, in bytes; a longer one is refused
    /// with 401 before it is parsed, and nothing of it is echoed. Default `16384` (16 KiB);
    /// 1024 to 65536.
    #[serde(default = "default_max_token_bytes")]
    #[schemars(with = "i32", range(min = 1024, max = 65536))]
    pub max_token_bytes: u32,
    /// Most bytes of audit events waiting to be written; when the audit sink cannot keep up
    /// and the queue is full, `auditOnOverflow` decides. Default `4194304` (4 MiB); 65536 to
    /// 67108864 (64 MiB).
    #[serde(default = "default_audit_queue_bytes")]
    #[schemars(with = "i32", range(min = 65536, max = 67_108_864))]
    pub audit_queue_bytes: u32,
    /// Longest client- or upstream-chosen string kept in one audit field (a tool name, a
    /// client id, a subject), in bytes; a longer one is cut at a character boundary and marked
    /// `…[truncated N bytes]`. Default `256`; 32 to 4096.
    #[serde(default = "default_audit_field_bytes")]
    #[schemars(with = "i32", range(min = 32, max = 4096))]
    pub audit_field_bytes: u32,
    /// Most resource URIs one `subscriptions/listen` request (MCP 2026-07-28) may name in
    /// `notifications.resourceSubscriptions`; a listen naming more is refused with JSON-RPC
    /// -32602 naming this field, and nothing is subscribed upstream. Default `256`; 1 to 65536,
    /// at most `maxSubscriptionsPerSession`.
    #[serde(default = "default_max_listen_uris")]
    #[schemars(with = "i32", range(min = 1, max = 65536))]
    pub max_listen_uris: u32,
    /// Most resource URIs one client session may be subscribed to at once (`resources/subscribe`
    /// over the shared upstream session, or a `subscriptions/listen`); one more is refused with
    /// JSON-RPC -32602 naming this field. Default `1024`; 1 to 65536.
    #[serde(default = "default_max_subscriptions_per_session")]
    #[schemars(with = "i32", range(min = 1, max = 65536))]
    pub max_subscriptions_per_session: u32,
    /// Longest resource URI a client may subscribe to (`resources/subscribe` over the shared
    /// upstream session, or in a `subscriptions/listen`), in bytes: the proxy keeps every URI
    /// its clients subscribe to, so without it 1024 subscriptions of 4 MiB each would hold 4 GiB
    /// for one session. A longer one is refused with JSON-RPC -32602 naming this field (in a
    /// listen, that URI is left out). Default `4096`; 256 to 65536.
    #[serde(default = "default_max_uri_bytes")]
    #[schemars(with = "i32", range(min = 256, max = 65536))]
    pub max_uri_bytes: u32,
    /// Most requests the proxy sends upstream on its own at once (the `resources/subscribe` and
    /// `resources/unsubscribe` it makes for its clients' subscriptions); the rest wait their
    /// turn. Default `16`; 1 to 1024.
    #[serde(default = "default_max_proxy_requests_in_flight")]
    #[schemars(with = "i32", range(min = 1, max = 1024))]
    pub max_proxy_requests_in_flight: u32,
    /// What happens to a `tools/call` while the audit queue is full: `Drop` (default) forwards
    /// the call and drops its audit event, counted in
    /// `berth_proxy_audit_events_dropped_total`; `RefuseCalls` refuses a call that arrives
    /// while the queue has no room for its event, with a retryable JSON-RPC error (-32016)
    /// before it reaches the upstream. Under either, an event that finds the queue full when
    /// its call ends (one already in flight when the queue filled) is dropped and counted.
    #[serde(default)]
    pub audit_on_overflow: AuditOverflow,
}

/// What the proxy does with a `tools/call` when its audit queue is full (`docs/audit.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AuditOverflow {
    /// Forward the call; drop its audit event and count it.
    #[default]
    Drop,
    /// Refuse calls that arrive while the queue is full (a retryable JSON-RPC error, -32016),
    /// so that no call is forwarded once events are being dropped.
    RefuseCalls,
}

impl Default for LimitsSpec {
    fn default() -> Self {
        Self {
            max_request_bytes: default_max_request_bytes(),
            max_reply_bytes: default_max_reply_bytes(),
            max_header_bytes: default_max_header_bytes(),
            header_read_timeout: default_header_read_timeout(),
            request_body_timeout: default_request_body_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections: default_max_connections(),
            max_connections_per_source: default_max_connections_per_source(),
            max_token_bytes: default_max_token_bytes(),
            audit_queue_bytes: default_audit_queue_bytes(),
            audit_field_bytes: default_audit_field_bytes(),
            max_listen_uris: default_max_listen_uris(),
            max_subscriptions_per_session: default_max_subscriptions_per_session(),
            max_uri_bytes: default_max_uri_bytes(),
            max_proxy_requests_in_flight: default_max_proxy_requests_in_flight(),
            audit_on_overflow: AuditOverflow::default(),
        }
    }
}

/// One integer limit: its dotted field path, value and allowed range.
type Range = (&'static str, u32, u32, u32);

impl LimitsSpec {
    /// The header read deadline (more than zero).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `headerReadTimeout` does not parse or is zero.
    pub fn header_read_timeout(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("limits.headerReadTimeout", &self.header_read_timeout)
    }

    /// The body read deadline (more than zero).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `requestBodyTimeout` does not parse or is zero.
    pub fn request_body_timeout(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("limits.requestBodyTimeout", &self.request_body_timeout)
    }

    /// The keep-alive idle timeout (more than zero).
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `idleTimeout` does not parse or is zero.
    pub fn idle_timeout(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("limits.idleTimeout", &self.idle_timeout)
    }

    /// Checks every duration and every integer against its range (the CRD's own bounds, for a
    /// config that did not pass the API server).
    ///
    /// # Errors
    /// [`ProxyConfigError`] for the first field out of range or unparsable.
    pub fn check(&self) -> Result<(), ProxyConfigError> {
        self.header_read_timeout()?;
        self.request_body_timeout()?;
        self.idle_timeout()?;
        let ranges: [Range; 10] = [
            (
                "limits.maxRequestBytes",
                self.max_request_bytes,
                KIB,
                64 * MIB,
            ),
            ("limits.maxReplyBytes", self.max_reply_bytes, KIB, 256 * MIB),
            ("limits.maxHeaderBytes", self.max_header_bytes, 8 * KIB, MIB),
            ("limits.maxConnections", self.max_connections, 1, 65536),
            ("limits.maxTokenBytes", self.max_token_bytes, KIB, 64 * KIB),
            (
                "limits.auditQueueBytes",
                self.audit_queue_bytes,
                64 * KIB,
                64 * MIB,
            ),
            (
                "limits.auditFieldBytes",
                self.audit_field_bytes,
                32,
                4 * KIB,
            ),
            (
                "limits.maxSubscriptionsPerSession",
                self.max_subscriptions_per_session,
                1,
                65536,
            ),
            ("limits.maxUriBytes", self.max_uri_bytes, 256, 64 * KIB),
            (
                "limits.maxProxyRequestsInFlight",
                self.max_proxy_requests_in_flight,
                1,
                1024,
            ),
        ];
        for (field, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(out_of_range(field, value, min, max));
            }
        }
        if !(1..=self.max_connections).contains(&self.max_connections_per_source) {
            return Err(out_of_range(
                "limits.maxConnectionsPerSource",
                self.max_connections_per_source,
                1,
                self.max_connections,
            ));
        }
        if !(1..=self.max_subscriptions_per_session).contains(&self.max_listen_uris) {
            return Err(out_of_range(
                "limits.maxListenUris",
                self.max_listen_uris,
                1,
                self.max_subscriptions_per_session,
            ));
        }
        Ok(())
    }
}

fn out_of_range(field: &'static str, value: u32, min: u32, max: u32) -> ProxyConfigError {
    ProxyConfigError::OutOfRange {
        field,
        value: u64::from(value),
        min: u64::from(min),
        max: u64::from(max),
    }
}

fn default_max_request_bytes() -> u32 {
    4 * MIB
}

fn default_max_reply_bytes() -> u32 {
    16 * MIB
}

fn default_max_header_bytes() -> u32 {
    32 * KIB
}

fn default_header_read_timeout() -> DurationString {
    DurationString::new("10s")
}

fn default_request_body_timeout() -> DurationString {
    DurationString::new("30s")
}

fn default_idle_timeout() -> DurationString {
    DurationString::new("60s")
}

fn default_max_connections() -> u32 {
    1024
}

fn default_max_connections_per_source() -> u32 {
    256
}

fn default_max_token_bytes() -> u32 {
    16 * KIB
}

fn default_audit_queue_bytes() -> u32 {
    4 * MIB
}

fn default_audit_field_bytes() -> u32 {
    256
}

fn default_max_listen_uris() -> u32 {
    256
}

fn default_max_subscriptions_per_session() -> u32 {
    1024
}

fn default_max_uri_bytes() -> u32 {
    4 * KIB
}

fn default_max_proxy_requests_in_flight() -> u32 {
    16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_defaults_pass_their_own_check() {
        assert!(LimitsSpec::default().check().is_ok());
    }

    #[test]
    fn limits_per_source_cap_above_total_is_refused_naming_the_field() {
        let limits = LimitsSpec {
            max_connections: 10,
            max_connections_per_source: 11,
            ..LimitsSpec::default()
        };
        let error = limits.check().expect_err("per-source cap above the total");
        assert!(
            error.to_string().contains("limits.maxConnectionsPerSource"),
            "{error}"
        );
    }

    #[test]
    fn limits_zero_header_timeout_is_refused_naming_the_field() {
        let limits = LimitsSpec {
            header_read_timeout: DurationString::new("0s"),
            ..LimitsSpec::default()
        };
        let error = limits.check().expect_err("zero header read timeout");
        assert!(
            matches!(
                error,
                ProxyConfigError::Duration {
                    field: "limits.headerReadTimeout",
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn limits_listen_uris_above_the_session_cap_are_refused_naming_the_field() {
        let limits = LimitsSpec {
            max_listen_uris: 2048,
            ..LimitsSpec::default()
        };
        let error = limits
            .check()
            .expect_err("listen cap above the session cap");
        assert!(
            error.to_string().contains("limits.maxListenUris"),
            "{error}"
        );
    }

    #[test]
    fn limits_request_body_below_a_kibibyte_is_refused() {
        let limits = LimitsSpec {
            max_request_bytes: 10,
            ..LimitsSpec::default()
        };
        assert!(limits.check().is_err());
    }
}
