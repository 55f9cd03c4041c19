//! Unit tests of [`super`]: readiness from Deployment statuses (YAML as the API server reports
//! them) and `lastTransitionTime` handling.

use super::*;

fn deployment(status: &str) -> Deployment {
    serde_yaml::from_str(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: everything, generation: 2}}\n\
         spec: {{selector: {{matchLabels: {{a: b}}}}, template: {{}}}}\n{status}"
    ))
    .expect("deployment fixture parses")
}

fn upstream(status: &str) -> McpUpstream {
    serde_yaml::from_str(&format!(
        "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\n\
         metadata: {{name: everything, namespace: demo, generation: 4}}\n\
         spec: {{upstream: {{image: 'r/x@sha256:{}'}}}}\n{status}",
        "0".repeat(64)
    ))
    .expect("upstream fixture parses")
}

const AVAILABLE: &str = "status:
  observedGeneration: 2
  conditions:
  - {type: Available, status: 'True', reason: MinimumReplicasAvailable, message: Deployment has minimum availability.}
  - {type: Progressing, status: 'True', reason: NewReplicaSetAvailable, message: done}
";

const ROLLING_OUT: &str = "status:
  observedGeneration: 2
  conditions:
  - {type: Available, status: 'False', reason: MinimumReplicasUnavailable, message: Deployment does not have minimum availability.}
  - {type: Progressing, status: 'True', reason: ReplicaSetUpdated, message: ReplicaSet is progressing.}
";

const DEADLINE_EXCEEDED: &str = "status:
  observedGeneration: 2
  conditions:
  - {type: Available, status: 'False', reason: MinimumReplicasUnavailable, message: Deployment does not have minimum availability.}
  - {type: Progressing, status: 'False', reason: ProgressDeadlineExceeded, message: too slow}
";

#[test]
fn readiness_available_deployment_is_ready() {
    let readiness = Readiness::of_deployment(&deployment(AVAILABLE));
    assert!(readiness.ready);
    assert_eq!(readiness.reason, REASON_DEPLOYMENT_AVAILABLE);
}

#[test]
fn readiness_rollout_in_progress_is_progressing() {
    let readiness = Readiness::of_deployment(&deployment(ROLLING_OUT));
    assert!(!readiness.ready);
    assert_eq!(readiness.reason, REASON_PROGRESSING);
    assert!(
        readiness.message.contains("minimum availability"),
        "{readiness:?}"
    );
}

#[test]
fn readiness_no_status_yet_is_progressing() {
    let readiness = Readiness::of_deployment(&deployment(""));
    assert_eq!(
        (readiness.ready, readiness.reason),
        (false, REASON_PROGRESSING)
    );
}

#[test]
fn readiness_stalled_rollout_is_deployment_unavailable() {
    let readiness = Readiness::of_deployment(&deployment(DEADLINE_EXCEEDED));
    assert_eq!(
        (readiness.ready, readiness.reason),
        (false, REASON_DEPLOYMENT_UNAVAILABLE)
    );
}

#[test]
fn endpoint_is_service_dns_name_on_mcp_port() {
    assert_eq!(
        endpoint("weather", "team-a", "cluster.local", 8080),
        "http://weather.team-a.svc.cluster.local:8080/mcp"
    );
}

fn now() -> Timestamp {
    "2030-01-02T03:04:05Z".parse().expect("timestamp")
}

#[test]
fn desired_status_reports_generation_condition_and_endpoint() {
    let readiness = Readiness::of_deployment(&deployment(ROLLING_OUT));
    let status = desired(
        &upstream(""),
        &readiness,
        Some("http://e".to_owned()),
        now(),
    );
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.endpoint.as_deref(), Some("http://e"));
    let ready = &status.conditions[0];
    assert_eq!(
        (
            ready.type_.as_str(),
            ready.status.as_str(),
            ready.reason.as_str()
        ),
        ("Ready", "False", "Progressing")
    );
    assert_eq!(ready.observed_generation, Some(4));
    assert_eq!(ready.last_transition_time, Time(now()));
}

#[test]
fn desired_status_same_value_keeps_last_transition_time() {
    let earlier = "status:\n  conditions:\n  - {type: Ready, status: 'False', reason: Progressing, \
                   message: m, lastTransitionTime: '2020-01-01T00:00:00Z'}\n";
    let readiness = Readiness::of_deployment(&deployment(DEADLINE_EXCEEDED));
    let status = desired(&upstream(earlier), &readiness, None, now());
    let ready = &status.conditions[0];
    assert_eq!(
        ready.reason, REASON_DEPLOYMENT_UNAVAILABLE,
        "reason may change"
    );
    assert_eq!(
        ready.last_transition_time,
        Time("2020-01-01T00:00:00Z".parse().expect("timestamp"))
    );
}

#[test]
fn desired_status_changed_value_bumps_last_transition_time() {
    let earlier = "status:\n  conditions:\n  - {type: Ready, status: 'False', reason: Progressing, \
                   message: m, lastTransitionTime: '2020-01-01T00:00:00Z'}\n";
    let readiness = Readiness::of_deployment(&deployment(AVAILABLE));
    let status = desired(&upstream(earlier), &readiness, None, now());
    assert_eq!(status.conditions[0].status, "True");
    assert_eq!(status.conditions[0].last_transition_time, Time(now()));
}

#[test]
fn desired_status_invalid_spec_carries_validation_message() {
    let invalid = InvalidSpec {
        field: "spec.session.strategy".to_owned(),
        message: "spec.upstream.transport: Stdio is not served".to_owned(),
    };
    let status = desired(&upstream(""), &Readiness::invalid(&invalid), None, now());
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert_eq!(ready.message, invalid.message);
    assert_eq!(status.endpoint, None);
}
