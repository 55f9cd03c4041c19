//! How much of what a pod says the operator keeps (issue 40): text cut to
//! [`MAX_REPORTED_CHARS`], lists of names to [`MAX_REPORTED_NAMES`], so no condition message
//! grows with what a tenant's pod sends.
//!
//! Not responsible for: how much is read (`report::MAX_ANSWER_BYTES` bounds each answer).

/// Most characters of any text from a pod (a reason, an error, a tool name, a fingerprint, a
/// kubelet message) that the operator keeps; longer text is cut and ends in `…`.
pub const MAX_REPORTED_CHARS: usize = 512;
/// Most names of missing or drifted tools the operator keeps from one answer.
pub const MAX_REPORTED_NAMES: usize = 32;

/// `text` cut to at most [`MAX_REPORTED_CHARS`] characters, ending in `…` when cut.
pub fn truncate(text: &str) -> String {
    if text.chars().nth(MAX_REPORTED_CHARS).is_none() {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(MAX_REPORTED_CHARS - 1).collect();
    kept.push('…');
    kept
}
