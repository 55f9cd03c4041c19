//! The Events that announce condition transitions.
//!
//! A transition is a condition whose status or reason changed, or a fault (a reason in
//! [`WARNING_REASONS`]) whose message changed (a different invalid field, other missing tools).
//! A condition that first appears is a transition only when it reports a fault, so creating an
//! McpUpstream does not publish an Event per condition. Transitions with the same reason in one
//! reconcile share one Event (an invalid spec flips `Ready`, `Progressing` and `Degraded` at
//! once). Events are `Warning` for faults and `Normal` otherwise; the reason is the condition's
//! reason; the note names each condition and its new status, then the message.

use berth_crds::{McpUpstream, McpUpstreamStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType};

use super::conditions::{CONDITION_TYPES, WARNING_REASONS, current_condition};

/// Event action of every Event the operator publishes.
pub const EVENT_ACTION: &str = "Reconcile";

/// Longest Event note the API server accepts (`events.k8s.io/v1`, 1 kB).
const MAX_NOTE_BYTES: usize = 1024;

/// The Events to publish when `upstream`'s status becomes `desired`, one per changed reason, in
/// condition order.
pub fn transitions(upstream: &McpUpstream, desired: &McpUpstreamStatus) -> Vec<Event> {
    let mut groups: Vec<(&str, Vec<&Condition>)> = Vec::new();
    for type_ in CONDITION_TYPES {
        let Some(next) = desired.conditions.iter().find(|c| c.type_ == type_) else {
            continue;
        };
        if !is_transition(current_condition(upstream, type_), next) {
            continue;
        }
        match groups.iter_mut().find(|(reason, _)| *reason == next.reason) {
            Some((_, members)) => members.push(next),
            None => groups.push((next.reason.as_str(), vec![next])),
        }
    }
    groups
        .into_iter()
        .map(|(reason, members)| {
            let flips: Vec<String> = members
                .iter()
                .map(|c| format!("{}={}", c.type_, c.status))
                .collect();
            let note = format!("{}: {}", flips.join(", "), members[0].message);
            Event {
                type_: if is_fault(reason) {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: reason.to_owned(),
                note: Some(truncate(note)),
                action: EVENT_ACTION.to_owned(),
                secondary: None,
            }
        })
        .collect()
}

fn is_fault(reason: &str) -> bool {
    WARNING_REASONS.contains(&reason)
}

fn is_transition(current: Option<&Condition>, next: &Condition) -> bool {
    match current {
        None => is_fault(&next.reason),
        Some(current) => {
            current.status != next.status
                || current.reason != next.reason
                || (is_fault(&next.reason) && current.message != next.message)
        }
    }
}

/// `note` cut at a character boundary to fit [`MAX_NOTE_BYTES`].
fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}
