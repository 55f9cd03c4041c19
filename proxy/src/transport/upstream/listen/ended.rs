//! Why listening on an upstream session's standalone stream ended, for both eras.

/// Why listening ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop` fired, the sink closed, or the upstream offers no standalone stream (405).
    Stopped,
    /// The upstream answered the GET with 404: the session is gone.
    Lost,
}
