//! Unit tests of [`crate::status::events`]: which status changes publish an Event, and of which
//! type and reason.

use super::*;

#[test]
fn transitions_first_status_of_new_object_publishes_no_event() {
    let status = desired(
        &upstream(""),
        observation(ROLLING_OUT, &Report::default()),
        now(),
    );
    assert!(events::transitions(&upstream(""), &status).is_empty());
}

#[test]
fn transitions_ready_flip_publishes_normal_event_and_fault_publishes_warning() {
    let earlier = "status:\n  conditions:\n  - {type: Ready, status: 'False', reason: Progressing, \
                   message: m, lastTransitionTime: '2020-01-01T00:00:00Z'}\n";
    let before = upstream(earlier);
    let status = desired(&before, observation(AVAILABLE, &Report::default()), now());
    let events = events::transitions(&before, &status);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "DeploymentAvailable");
    assert_eq!(events[0].type_, EventType::Normal);
    assert!(
        events[0]
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("Ready=True: "))
    );

    let invalid = InvalidSpec {
        field: "metadata.name".to_owned(),
        message: "metadata.name: bad".to_owned(),
    };
    let observation = Observation {
        verdicts: conditions::invalid(&invalid),
        ..Observation::default()
    };
    let status = desired(&before, observation, now());
    let events = events::transitions(&before, &status);
    assert_eq!(events.len(), 1, "one Event per reason");
    assert_eq!(events[0].type_, EventType::Warning);
    assert_eq!(events[0].reason, "InvalidSpec");
    assert_eq!(
        events[0].note.as_deref(),
        Some("Ready=False, Progressing=False, Degraded=True: metadata.name: bad")
    );
}

#[test]
fn transitions_unchanged_status_publishes_nothing() {
    let first = desired(
        &upstream(""),
        observation(AVAILABLE, &Report::default()),
        now(),
    );
    let mut current = upstream("");
    current.status = Some(first);
    let again = desired(&current, observation(AVAILABLE, &Report::default()), now());
    assert!(is_current(&current, &again));
    assert!(events::transitions(&current, &again).is_empty());
}
