//! How long the upstream side waits between attempts: the handshake backoff of the supervisor
//! and of a standalone stream being reopened, and what counts as a quick failure. Not
//! responsible for: the waiting itself (the supervisor and `listen` do it).

use std::time::Duration;

/// First wait after a failed handshake; doubles up to [`MAX_BACKOFF`].
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between handshake attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A stdio child of the supervisor that fails to initialize, or ends within this time of its
/// handshake, is a quick failure (field case BR-34). An HTTP session lost within this time of
/// its handshake is a quick loss: after the first in a row the supervisor backs off before
/// re-initializing (issue 12 item 1).
pub const QUICK_FAILURE_WINDOW: Duration = Duration::from_secs(10);
