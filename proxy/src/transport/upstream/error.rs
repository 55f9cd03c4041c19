//! How an exchange with the upstream fails: [`UpstreamError`], with a bounded `kind()` label for
//! metrics and [`error_chain`] for logs.

/// A failed exchange with the upstream. `kind()` gives a bounded label for metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream URL or HTTP client settings are unusable.
    #[error("{0}")]
    Config(String),
    /// A message could not be encoded.
    #[error("failed to encode message")]
    Encode(#[source] serde_json::Error),
    /// The HTTP request could not be sent or its headers not received.
    #[error("failed to send request to upstream")]
    Send(#[source] super::http::HttpError),
    /// The reply body could not be read.
    #[error("failed to read upstream reply")]
    Read(#[source] super::http::HttpError),
    /// The upstream does not know the session (HTTP 404, or 400 naming the session).
    #[error("upstream session is unknown to the upstream")]
    SessionLost,
    /// The upstream answered with another HTTP error status.
    #[error("upstream answered HTTP {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// First bytes of the body.
        body: String,
    },
    /// The reply is not the JSON-RPC the protocol requires.
    #[error("malformed upstream reply: {0}")]
    Malformed(String),
    /// The handshake was answered, but not usably.
    #[error("{0}")]
    Handshake(String),
    /// A stdio child could not be started, or a stdio host's socket not reached.
    #[error("failed to start stdio upstream {target}")]
    Spawn {
        /// The program or socket path.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The stdio connection ended (the child exited, closed its stdout, or the host hung up);
    /// the text names why and carries the child's last stderr lines (redacted), for logs only.
    #[error("{0}")]
    Gone(String),
    /// A stdio host refused the connection (its `--max-children` reached).
    #[error("stdio host refused the connection: {0}")]
    Refused(String),
    /// A stdio reply line was longer than the stdio line limit: `upstream.maxLineBytes`, at
    /// most `limits.maxReplyBytes`.
    #[error(
        "upstream reply of {bytes} bytes exceeds the stdio line limit of {limit} bytes (upstream.maxLineBytes, at most limits.maxReplyBytes)"
    )]
    TooLong {
        /// Length of the line.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
    /// An HTTP reply (a JSON body, or one SSE event) was larger than `limits.maxReplyBytes`;
    /// it was not read further (issue 39).
    #[error("upstream reply exceeds limits.maxReplyBytes ({limit} bytes)")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

impl UpstreamError {
    /// Bounded kind label: `config`, `encode`, `send`, `read`, `session_lost`, `status`,
    /// `malformed`, `handshake`, `spawn`, `gone`, `refused`, `too_long`, `too_large`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Encode(_) => "encode",
            Self::Send(_) => "send",
            Self::Read(_) => "read",
            Self::SessionLost => "session_lost",
            Self::Status { .. } => "status",
            Self::Malformed(_) => "malformed",
            Self::Handshake(_) => "handshake",
            Self::Spawn { .. } => "spawn",
            Self::Gone(_) => "gone",
            Self::Refused(_) => "refused",
            Self::TooLong { .. } => "too_long",
            Self::TooLarge { .. } => "too_large",
        }
    }
}

/// An error with its causes, `outer: inner: innermost`, for logs (never for metric labels).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
