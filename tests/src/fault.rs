//! A scriptable fault upstream: an in-process MCP Streamable HTTP server (axum on 127.0.0.1:0)
//! whose failures tests switch on and off at run time, and which records everything it was sent.
//!
//! Responsible for: speaking MCP Streamable HTTP (2025-06-18 / 2025-11-25, "Transports:
//! Streamable HTTP") well enough to be a realistic upstream: `initialize` issues an
//! `Mcp-Session-Id`; requests are answered as `application/json` or as an SSE stream of
//! `event: message` events; notifications and responses get 202; `GET` opens a standalone SSE
//! stream; `DELETE` ends a session. Tools: `echo`, `bad` (`isError: true`), `missing` (JSON-RPC
//! -32602), `slow` (`arguments.ms`, with progress), `ask` (sampling, elicitation and roots
//! requests to the client mid-call). Faults: see [`Faults`] and the methods of [`FaultHandle`];
//! a silent TCP acceptor and a refused port are in [`silent`] and [`closed_port_url`]; an
//! upstream that is killed and restarted on the same port is in [`restart`]; a server
//! keep-alive timeout in front of one is in [`keep_alive`].
//! Not responsible for: being a correct or complete MCP server. It is a test double; where the
//! spec leaves a choice it copies the TypeScript SDK (status codes and bodies of errors).

mod http;
pub mod keep_alive;
pub mod restart;
pub mod silent;
mod streamed;
mod tools;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use restart::RestartableUpstream;
pub use silent::{SilentUpstream, closed_port_url, silent};

/// Protocol revisions the fault upstream accepts in `initialize` (newest first); any other
/// requested revision is answered with [`DEFAULT_PROTOCOL_VERSION`].
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The revision answered when the client asks for one not in [`SUPPORTED_PROTOCOL_VERSIONS`].
pub const DEFAULT_PROTOCOL_VERSION: &str = "2025-06-18";
/// The TypeScript SDK's answer to a second `initialize` on a single-session server (HTTP 400).
pub const ALREADY_INITIALIZED_BODY: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server already initialized"},"id":null}"#;
/// The TypeScript SDK's answer to a non-initialize request without `Mcp-Session-Id` (HTTP 400).
pub const SESSION_REQUIRED_BODY: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Mcp-Session-Id header is required"},"id":null}"#;
/// The strict server's answer to a request after the handshake without the negotiated
/// `MCP-Protocol-Version` (HTTP 400; worded as the TypeScript SDK words its version errors, and
/// naming no session, so it never reads as a lost session).
pub const PROTOCOL_VERSION_REQUIRED_BODY: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: MCP-Protocol-Version header missing or not the negotiated revision"},"id":null}"#;

/// What `tools/call raw` answers with [`Faults::null_id_error`] (the JSON-RPC request id is
/// `null`; field case BR-01).
pub const NULL_ID_ERROR: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"could not read the request"}}"#;
/// How long `ask` waits for each of the client's answers before giving up on it.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// What the upstream does when a second session is opened while one is live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecondSession {
    /// Any number of sessions (the default).
    #[default]
    Allow,
    /// `initialize` gets HTTP 400 with [`ALREADY_INITIALIZED_BODY`] while a session is live.
    RejectInitialize,
    /// `initialize` succeeds, but that session's `notifications/initialized` gets HTTP 400 with
    /// [`ALREADY_INITIALIZED_BODY`] (README.md "Why it exists", failure 1).
    RejectInitialized,
}

/// The scriptable faults. `Faults::default()` is a well-behaved server. Change them at run time
/// with [`FaultHandle::update`] or the shortcut methods of [`FaultHandle`].
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Second-session behaviour.
    pub second_session: SecondSession,
    /// Forget a session right after it has served this many `tools/call`s (the call that
    /// reaches the count is still answered); later requests carrying it get 404, empty body.
    pub expire_after_calls: Option<u32>,
    /// The next `notifications/initialized` gets HTTP 500 (then this resets to `false`).
    pub fail_initialized_once: bool,
    /// The `initialize` reply is delayed by this much.
    pub handshake_delay: Duration,
    /// Answer every request as an SSE stream (`text/event-stream`) instead of JSON. Calls that
    /// send messages before their result (`ask`, `slow` with a progress token) always stream.
    pub sse_replies: bool,
    /// Until this instant every request (initialize included) gets 404 with an empty body.
    pub not_found_until: Option<Instant>,
    /// Until this instant `initialize` gets HTTP 503.
    pub unavailable_initialize_until: Option<Instant>,
    /// The exact text of the `result` that `tools/call` of the tool `raw` answers with, written
    /// into the reply as it is (no JSON round trip), as JSON or, with `sse_replies`, as one SSE
    /// event. `None`: `raw` answers `{}`.
    pub raw_result: Option<String>,
    /// Each `resources/subscribe` is answered after this long (to see how many the client keeps
    /// in flight at once: [`FaultHandle::most_subscribes_at_once`]).
    pub subscribe_delay: Duration,
    /// `tools/call raw` is answered with a text result of this many bytes, made in 64 KiB
    /// chunks as they are sent and never held whole: a JSON body without `Content-Length` or,
    /// with `sse_replies`, one SSE event; `u64::MAX` never ends. Takes precedence over
    /// `raw_result` (issue 39: a reply larger than the proxy's limit).
    pub streamed_result_bytes: Option<u64>,
    /// With `streamed_result_bytes`, the reply's HTTP status instead of 200 (a JSON body of that
    /// many bytes under an error status: what the proxy reads of a non-2xx reply's body).
    pub streamed_status: Option<u16>,
    /// `tools/call raw` is answered with HTTP 200 and [`NULL_ID_ERROR`] instead (JSON or, with
    /// `sse_replies`, one SSE event): an error the server could not tie to the request.
    pub null_id_error: bool,
    /// A POST carrying a response (a client's answer to a server request) gets this status with
    /// an empty body and is not delivered. `None`: delivered, 202.
    pub answer_status: Option<u16>,
    /// `resources/subscribe` is answered with a JSON-RPC error (-32603) and subscribes nothing.
    pub subscribe_error: bool,
    /// As `raw_result`, for the `result` of `tools/list` (after the proxy's own listings at
    /// start-up, which this also answers). `None`: the listing of `tools`.
    pub raw_tools_list: Option<String>,
    /// Forget every session as soon as its `notifications/initialized` was acknowledged, so the
    /// handshake succeeds and the next request carrying the session gets 404 (an upstream that
    /// loses its state right after each handshake: a crash loop behind a stable address, or
    /// replicas without session affinity).
    pub forget_after_initialized: bool,
    /// `tools/call echo` answers its POST this way and sends the response 50 ms later on the
    /// session's standalone GET stream instead (issue 12, item 3). `None`: on the POST.
    pub answer_on_standalone: Option<StandaloneAnswer>,
    /// `tools/call echo` is answered the 2025-11-25 polling way (the conformance suite's
    /// `server-sse-polling`): its POST stream carries only a priming event (an event id, `retry:
    /// 50`, no data) and closes; the response comes on a `GET` with that `Last-Event-ID`.
    pub sse_polling: bool,
    /// With `sse_polling`, this many of the `GET`s that resume a polled call close at once
    /// without an event before one carries the response (issue 39, item 11).
    pub empty_resumptions: u32,
    /// A strict server (issue 12, item 4): every request after the handshake (every POST but
    /// `initialize`, every GET and DELETE) whose `MCP-Protocol-Version` header is missing or
    /// differs from the revision negotiated on its session gets HTTP 400 with
    /// [`PROTOCOL_VERSION_REQUIRED_BODY`]; the request does nothing (a DELETE keeps the session).
    pub strict_protocol_version: bool,
    /// A server without sessions: `initialize` issues no `Mcp-Session-Id`, and requests without
    /// the header are served by one implicit session.
    pub sessionless: bool,
    /// Every `DELETE` of a live session is answered with this status (after it was recorded) and
    /// the session stays live.
    pub delete_status: Option<u16>,
}

/// How the POST of a call whose response goes on the standalone stream is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandaloneAnswer {
    /// `202 Accepted` with no body.
    Accepted,
    /// `200` with an SSE stream that ends without any event.
    EmptyStream,
}

/// The capabilities declared in the `initialize` result.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// `tools.listChanged` (default `true`).
    pub tools_list_changed: bool,
    /// `resources.subscribe` (default `false`); resources are always declared and served.
    pub resources_subscribe: bool,
    /// `logging` (default `true`).
    pub logging: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            tools_list_changed: true,
            resources_subscribe: false,
            logging: true,
        }
    }
}

impl Capabilities {
    fn to_json(&self) -> Value {
        let mut capabilities = json!({
            "tools": { "listChanged": self.tools_list_changed },
            "resources": { "subscribe": self.resources_subscribe, "listChanged": false },
        });
        if self.logging {
            capabilities["logging"] = json!({});
        }
        capabilities
    }
}

/// One HTTP request the upstream received.
#[derive(Clone, Debug)]
pub struct Received {
    /// `POST`, `GET` or `DELETE`.
    pub http_method: String,
    /// The JSON-RPC method; `None` for responses and for `GET`/`DELETE`.
    pub method: Option<String>,
    /// The JSON-RPC id, when the message has one.
    pub id: Option<Value>,
    /// The `Mcp-Session-Id` request header.
    pub session: Option<String>,
    /// The whole message (`Value::Null` for `GET`/`DELETE` or a body that is not JSON).
    pub message: Value,
    /// The exact text of the request body (empty for `GET`/`DELETE`).
    pub raw: String,
    /// Every request header as `(lowercase name, value)`.
    pub headers: Vec<(String, String)>,
    /// The client end of the TCP connection it came on (one value per connection).
    pub peer: SocketAddr,
}

/// One `DELETE` the upstream received, and how it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// The `Mcp-Session-Id` request header.
    pub session: Option<String>,
    /// The `MCP-Protocol-Version` request header.
    pub protocol_version: Option<String>,
    /// The HTTP status it was answered with.
    pub status: u16,
}

/// Sets up a [`FaultUpstream`] before it starts.
#[derive(Clone, Debug)]
pub struct Builder {
    faults: Faults,
    capabilities: Capabilities,
    record: bool,
    session_prefix: String,
}

impl Builder {
    /// The faults to start with.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The capabilities to declare.
    pub fn capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Whether to record received messages (default `true`; benchmarks turn it off).
    pub fn record(mut self, on: bool) -> Self {
        self.record = on;
        self
    }

    /// The start of every issued `Mcp-Session-Id`, followed by `-<n>` (default `fault-session`),
    /// so that upstreams restarted on one address do not issue each other's ids.
    pub fn session_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.session_prefix = prefix.into();
        self
    }

    /// Binds 127.0.0.1:0 and starts serving `/mcp`.
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn start(self) -> FaultUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fault upstream");
        self.start_on(listener)
    }

    /// Starts serving `/mcp` on `listener` (e.g. a black hole being opened up).
    ///
    /// # Panics
    /// When the listener has no local address.
    pub fn start_on(self, listener: tokio::net::TcpListener) -> FaultUpstream {
        let handle = FaultHandle(Arc::new(Mutex::new(Inner::new(self))));
        let addr = listener.local_addr().expect("fault upstream addr");
        let app = http::router(handle.clone()).into_make_service_with_connect_info::<SocketAddr>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultUpstream {
            url: format!("http://{addr}/mcp"),
            addr,
            handle,
            _task: AbortOnDrop(task),
        }
    }
}

/// A running fault upstream. Dereferences to its [`FaultHandle`]. Dropping it stops accepting
/// connections (connections already open live until the runtime ends).
pub struct FaultUpstream {
    /// Its MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Its listen address.
    pub addr: SocketAddr,
    handle: FaultHandle,
    _task: AbortOnDrop,
}

impl FaultUpstream {
    /// A well-behaved fault upstream with default capabilities.
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// A builder with no faults, default capabilities and recording on.
    pub fn builder() -> Builder {
        Builder {
            faults: Faults::default(),
            capabilities: Capabilities::default(),
            record: true,
            session_prefix: "fault-session".to_owned(),
        }
    }

    /// An upstream that accepts TCP connections and never answers; see [`silent`].
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn silent() -> SilentUpstream {
        silent().await
    }

    /// A port that silently drops connection attempts; see [`silent::black_hole`].
    pub async fn black_hole() -> silent::BlackHole {
        silent::black_hole().await
    }

    /// A URL on which connections are refused; see [`closed_port_url`].
    pub fn closed_port_url() -> String {
        closed_port_url()
    }

    /// A handle that outlives borrows of `self` (e.g. to move into a task).
    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }
}

impl Deref for FaultUpstream {
    type Target = FaultHandle;

    fn deref(&self) -> &FaultHandle {
        &self.handle
    }
}

/// Changes the faults of a running upstream and reads what it recorded. Cheap to clone.
#[derive(Clone)]
pub struct FaultHandle(Arc<Mutex<Inner>>);

impl FaultHandle {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the faults in place, e.g. `up.update(|f| f.expire_after_calls = Some(1))`.
    pub fn update(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.lock().faults);
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.lock().faults.clone()
    }

    /// Replaces the declared capabilities (seen by the next `initialize`).
    pub fn set_capabilities(&self, capabilities: Capabilities) {
        self.lock().capabilities = capabilities;
    }

    /// Forgets every session now and ends their standalone streams; requests carrying them get
    /// 404 with an empty body. Returns how many were forgotten.
    pub fn expire_all(&self) -> usize {
        let mut inner = self.lock();
        let count = inner.sessions.len();
        inner.sessions.clear();
        count
    }

    /// Forgets one session now. Returns whether it was live.
    pub fn expire(&self, session: &str) -> bool {
        self.lock().sessions.remove(session).is_some()
    }

    /// Answers every request (initialize included) with 404 and an empty body for `window`.
    pub fn not_found_for(&self, window: Duration) {
        self.lock().faults.not_found_until = Some(Instant::now() + window);
    }

    /// Answers `initialize` with HTTP 503 for `window`.
    pub fn unavailable_initialize_for(&self, window: Duration) {
        self.lock().faults.unavailable_initialize_until = Some(Instant::now() + window);
    }

    /// The next `notifications/initialized` gets HTTP 500.
    pub fn fail_initialized_once(&self) {
        self.lock().faults.fail_initialized_once = true;
    }

    /// The current tool definitions, as `tools/list` returns them.
    pub fn tools(&self) -> Vec<Value> {
        self.lock().tools.clone()
    }

    /// Replaces the `inputSchema` of `tool` and emits `notifications/tools/list_changed`.
    /// Returns whether the tool exists.
    pub fn set_input_schema(&self, tool: &str, schema: Value) -> bool {
        let found = {
            let mut inner = self.lock();
            let found = inner.tools.iter_mut().find(|t| t["name"] == tool);
            found.map(|t| t["inputSchema"] = schema).is_some()
        };
        if found {
            self.notify_tools_changed();
        }
        found
    }

    /// Removes `tool` and emits `notifications/tools/list_changed`. Returns whether it existed.
    pub fn remove_tool(&self, tool: &str) -> bool {
        let removed = {
            let mut inner = self.lock();
            let before = inner.tools.len();
            inner.tools.retain(|t| t["name"] != tool);
            inner.tools.len() != before
        };
        if removed {
            self.notify_tools_changed();
        }
        removed
    }

    /// Adds (or replaces, by name) a tool definition such as
    /// `{"name":"b","inputSchema":{"type":"object"}}` and emits
    /// `notifications/tools/list_changed`. A tool that is not built in answers with a text
    /// content holding its arguments as JSON.
    pub fn add_tool(&self, definition: Value) {
        {
            let mut inner = self.lock();
            let name = definition["name"].clone();
            inner.tools.retain(|t| t["name"] != name);
            inner.tools.push(definition);
        }
        self.notify_tools_changed();
    }

    /// Sends `notifications/tools/list_changed` on every open standalone stream. Returns how
    /// many streams it reached.
    pub fn notify_tools_changed(&self) -> usize {
        self.broadcast(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
    }

    /// Sends `notifications/resources/updated` for `uri` on the standalone streams of the
    /// sessions that subscribed to it. Returns how many streams it reached.
    pub fn notify_resource_updated(&self, uri: &str) -> usize {
        let message = json!({
            "jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": { "uri": uri },
        });
        self.lock()
            .send_to_streams(&message, |session| session.subscriptions.contains(uri))
    }

    /// Sends `notifications/message` (a log message) on every open standalone stream. Returns
    /// how many streams it reached.
    pub fn log(&self, level: &str, data: Value) -> usize {
        self.broadcast(&json!({
            "jsonrpc": "2.0", "method": "notifications/message",
            "params": { "level": level, "logger": "fault", "data": data },
        }))
    }

    /// Sends `message` on every open standalone stream of every session. Returns how many
    /// streams it reached.
    pub fn broadcast(&self, message: &Value) -> usize {
        self.lock().send_to_streams(message, |_| true)
    }

    /// Every request received, in order (empty when recording is off).
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// The requests received from position `from` on (as counted by [`Self::received_count`]),
    /// in order, without copying the earlier ones.
    pub fn received_since(&self, from: usize) -> Vec<Received> {
        let inner = self.lock();
        inner.received.get(from..).unwrap_or_default().to_vec()
    }

    /// How many requests were recorded so far.
    pub fn received_count(&self) -> usize {
        self.lock().received.len()
    }

    /// The most `resources/subscribe` requests being answered at once so far.
    pub fn most_subscribes_at_once(&self) -> usize {
        self.lock().subscribes_most
    }

    /// Holds one `resources/subscribe` for [`Faults::subscribe_delay`], counted as in flight.
    /// Without a delay it returns at once, so the subscription is recorded in the same step
    /// as the request (a zero sleep still waits for the timer's next tick, and a test that saw
    /// the request counted would notify a URI not yet subscribed).
    async fn delay_subscribe(&self) {
        let delay = {
            let mut inner = self.lock();
            if inner.faults.subscribe_delay.is_zero() {
                return;
            }
            inner.subscribes_now += 1;
            inner.subscribes_most = inner.subscribes_most.max(inner.subscribes_now);
            inner.faults.subscribe_delay
        };
        tokio::time::sleep(delay).await;
        self.lock().subscribes_now -= 1;
    }

    /// How many received POSTs carried JSON-RPC `method`.
    pub fn count(&self, method: &str) -> usize {
        let inner = self.lock();
        let matches = |r: &&Received| r.method.as_deref() == Some(method);
        inner.received.iter().filter(matches).count()
    }

    /// How many `initialize` requests arrived (counted even when recording is off, and also
    /// when they were rejected).
    pub fn initializes(&self) -> usize {
        self.lock().initializes
    }

    /// How many sessions were issued.
    pub fn sessions_issued(&self) -> usize {
        self.lock().sessions_issued
    }

    /// The ids of the live sessions.
    pub fn live_sessions(&self) -> Vec<String> {
        self.lock().sessions.keys().cloned().collect()
    }

    /// The `requestId`s of every `notifications/cancelled` received, in order.
    pub fn cancellations(&self) -> Vec<Value> {
        self.lock().cancellations.clone()
    }

    /// How many sessions were ended by `DELETE`.
    pub fn deletes(&self) -> usize {
        self.lock().deletes
    }

    /// Every `DELETE` received (also when recording is off, and also when it was refused), in
    /// order, with the status it got.
    pub fn delete_requests(&self) -> Vec<Delete> {
        self.lock().delete_requests.clone()
    }

    /// How many standalone GET streams are open.
    pub fn open_streams(&self) -> usize {
        let inner = self.lock();
        let open = |s: &Session| s.streams.iter().filter(|tx| !tx.is_closed()).count();
        inner.sessions.values().map(open).sum()
    }

    /// How many distinct TCP connections delivered recorded requests.
    pub fn connections(&self) -> usize {
        let inner = self.lock();
        let peers: HashSet<_> = inner.received.iter().map(|r| r.peer).collect();
        peers.len()
    }
}

/// Everything behind the handle's lock. Never held across an await.
struct Inner {
    faults: Faults,
    capabilities: Capabilities,
    record: bool,
    session_prefix: String,
    tools: Vec<Value>,
    sessions: HashMap<String, Session>,
    received: Vec<Received>,
    initializes: usize,
    sessions_issued: usize,
    cancellations: Vec<Value>,
    deletes: usize,
    delete_requests: Vec<Delete>,
    /// `resources/subscribe` requests being answered now, and the most at once.
    subscribes_now: usize,
    subscribes_most: usize,
}

impl Inner {
    fn new(builder: Builder) -> Self {
        Self {
            faults: builder.faults,
            capabilities: builder.capabilities,
            record: builder.record,
            session_prefix: builder.session_prefix,
            tools: tools::definitions(),
            sessions: HashMap::new(),
            received: Vec::new(),
            initializes: 0,
            sessions_issued: 0,
            cancellations: Vec::new(),
            deletes: 0,
            delete_requests: Vec::new(),
            subscribes_now: 0,
            subscribes_most: 0,
        }
    }

    fn send_to_streams(&mut self, message: &Value, to: impl Fn(&Session) -> bool) -> usize {
        let mut reached = 0;
        for session in self.sessions.values_mut().filter(|s| to(s)) {
            session.streams.retain(|tx| !tx.is_closed());
            for tx in &session.streams {
                if tx.try_send(message.clone()).is_ok() {
                    reached += 1;
                }
            }
        }
        reached
    }
}

/// One upstream session.
#[derive(Default)]
struct Session {
    /// The revision answered in its `initialize`.
    protocol_version: String,
    initialized: bool,
    calls: u32,
    streams: Vec<mpsc::Sender<Value>>,
    subscriptions: HashSet<String>,
    /// Server-to-client requests awaiting the client's answer, by id.
    pending: HashMap<String, oneshot::Sender<Value>>,
    /// Client requests in flight, by JSON-RPC id (as JSON text), for `notifications/cancelled`.
    in_flight: HashMap<String, CancellationToken>,
    next_request: u64,
    /// `sse_polling` responses waiting for their resumption, by priming event id.
    polled: HashMap<String, Value>,
}

/// The key of the implicit session of a [`Faults::sessionless`] server.
const SESSIONLESS_KEY: &str = "";

/// A JSON-RPC id as a map key: its JSON text, so `1` and `"1"` differ.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
