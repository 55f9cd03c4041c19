//! Unit tests of [`super`]: readiness from Deployment statuses (YAML as the API server reports
//! them), every condition from a Deployment plus a pods' report, `lastTransitionTime`
//! handling, image digests, and which changes publish Events.

use berth_crds::McpUpstreamStatus;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use super::*;
use crate::report::{Blocked, PodState, ToolsSummary};
use crate::validate::InvalidSpec;

mod transitions;

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

fn observation(deployment_status: &str, report: &Report) -> Observation {
    Observation {
        verdicts: conditions::observed(&deployment(deployment_status), report),
        endpoint: Some("http://e".to_owned()),
        upstream: None,
        tools: None,
    }
}

fn condition<'a>(status: &'a McpUpstreamStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("{type_} in {status:?}"))
}

fn summary(count: i64, missing: &[&str]) -> ToolsSummary {
    ToolsSummary {
        count,
        fingerprint: Some("sha256:ff".to_owned()),
        drifted: Vec::new(),
        missing: missing.iter().map(|m| (*m).to_owned()).collect(),
    }
}

fn pod(ready: bool, image_id: Option<&str>) -> PodState {
    PodState {
        name: "p".to_owned(),
        ready,
        ip: Some("10.0.0.1".to_owned()),
        upstream_image_id: image_id.map(str::to_owned),
        blocked: None,
    }
}

#[test]
fn desired_status_reports_generation_every_condition_and_endpoint() {
    let status = desired(
        &upstream(""),
        observation(ROLLING_OUT, &Report::default()),
        now(),
    );
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.endpoint.as_deref(), Some("http://e"));
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, CONDITION_TYPES);
    for c in &status.conditions {
        assert_eq!(c.observed_generation, Some(4), "{c:?}");
        assert_eq!(c.last_transition_time, Time(now()));
    }
    let summary = |c: &Condition| (c.status.clone(), c.reason.clone());
    let expect = |s: &str, r: &str| (s.to_owned(), r.to_owned());
    assert_eq!(
        summary(condition(&status, "Ready")),
        expect("False", "Progressing")
    );
    assert_eq!(
        summary(condition(&status, "Progressing")),
        expect("True", "RollingOut")
    );
    assert_eq!(
        summary(condition(&status, "Degraded")),
        expect("False", "AsExpected")
    );
    assert_eq!(
        summary(condition(&status, "UpstreamReady")),
        expect("False", "NoPods")
    );
    assert_eq!(
        summary(condition(&status, "ToolsDiscovered")),
        expect("Unknown", "NoPodRunning")
    );
}

#[test]
fn desired_status_same_value_keeps_last_transition_time() {
    let earlier = "status:\n  conditions:\n  - {type: Ready, status: 'False', reason: Progressing, \
                   message: m, lastTransitionTime: '2020-01-01T00:00:00Z'}\n";
    let status = desired(
        &upstream(earlier),
        observation(DEADLINE_EXCEEDED, &Report::default()),
        now(),
    );
    let ready = condition(&status, "Ready");
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
    let status = desired(
        &upstream(earlier),
        observation(AVAILABLE, &Report::default()),
        now(),
    );
    assert_eq!(condition(&status, "Ready").status, "True");
    assert_eq!(
        condition(&status, "Ready").last_transition_time,
        Time(now())
    );
}

#[test]
fn desired_status_invalid_spec_carries_message_and_keeps_pod_conditions() {
    let earlier = "status:\n  conditions:\n  - {type: UpstreamReady, status: 'True', reason: PodsReady, \
                   message: m, lastTransitionTime: '2020-01-01T00:00:00Z'}\n";
    let invalid = InvalidSpec {
        field: "spec.upstream.transport".to_owned(),
        message: "spec.upstream.transport: Stdio is not served".to_owned(),
    };
    let observation = Observation {
        verdicts: conditions::invalid(&invalid),
        ..Observation::default()
    };
    let status = desired(&upstream(earlier), observation, now());
    for (type_, value) in [
        ("Ready", "False"),
        ("Progressing", "False"),
        ("Degraded", "True"),
    ] {
        let c = condition(&status, type_);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (value, "InvalidSpec")
        );
        assert_eq!(c.message, invalid.message);
    }
    assert_eq!(condition(&status, "UpstreamReady").reason, "PodsReady");
    assert_eq!(status.endpoint, None);
}

#[test]
fn conditions_available_with_ready_proxy_listing_tools_are_all_good() {
    let report = Report {
        pods: vec![pod(true, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(3, &[]),
            not_ready: None,
            upstream: None,
        },
    };
    let status = desired(&upstream(""), observation(AVAILABLE, &report), now());
    let got: Vec<(&str, &str, &str)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("Ready", "True", "DeploymentAvailable"),
            ("Progressing", "False", "RolloutComplete"),
            ("Degraded", "False", "AsExpected"),
            ("UpstreamReady", "True", "PodsReady"),
            ("ToolsDiscovered", "True", "ToolsListed"),
            ("UpstreamExposed", "Unknown", "ExposureNotChecked"),
        ]
    );
    assert!(
        condition(&status, "ToolsDiscovered")
            .message
            .contains("3 tools, fingerprint sha256:ff")
    );
    assert_eq!(
        tools_status(&report),
        Some(ToolsStatus {
            count: 3,
            fingerprint: Some("sha256:ff".to_owned()),
            missing: Vec::new()
        })
    );
}

#[test]
fn conditions_allowed_tool_missing_is_tools_discovered_false_and_degraded() {
    let report = Report {
        pods: vec![pod(false, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(1, &["nope", "gone"]),
            not_ready: Some("allowed tools missing upstream: nope, gone".to_owned()),
            upstream: None,
        },
    };
    let status = desired(&upstream(""), observation(ROLLING_OUT, &report), now());
    let tools = condition(&status, "ToolsDiscovered");
    assert_eq!(
        (tools.status.as_str(), tools.reason.as_str()),
        ("False", "AllowedToolMissing")
    );
    assert!(tools.message.contains("nope, gone"), "{tools:?}");
    let degraded = condition(&status, "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "AllowedToolMissing")
    );
    let upstream_ready = condition(&status, "UpstreamReady");
    assert_eq!(upstream_ready.reason, "PodsNotReady");
    assert!(
        upstream_ready
            .message
            .contains("allowed tools missing upstream: nope")
    );
    assert_eq!(tools_status(&report).map(|t| t.missing.len()), Some(2));
}

#[test]
fn conditions_available_but_proxy_timeout_is_not_ready_with_timeout_reason() {
    let report = Report {
        pods: vec![pod(true, None)],
        proxy: ProxyReport::Timeout {
            pod: "p".to_owned(),
        },
    };
    let status = desired(&upstream(""), observation(AVAILABLE, &report), now());
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ProxyReportTimeout")
    );
    assert_eq!(condition(&status, "Degraded").status, "True");
    assert_eq!(condition(&status, "ToolsDiscovered").status, "Unknown");
    assert_eq!(tools_status(&report), None);
}

#[test]
fn conditions_stalled_rollout_is_progress_deadline_exceeded_and_degraded() {
    let status = desired(
        &upstream(""),
        observation(DEADLINE_EXCEEDED, &Report::default()),
        now(),
    );
    assert_eq!(
        condition(&status, "Progressing").reason,
        "ProgressDeadlineExceeded"
    );
    assert_eq!(condition(&status, "Progressing").status, "False");
    assert_eq!(
        condition(&status, "Degraded").reason,
        "ProgressDeadlineExceeded"
    );
}

#[test]
fn upstream_status_compares_pinned_digest_with_running_image_id() {
    let pinned = format!("r/x@sha256:{}", "0".repeat(64));
    let same = Report {
        pods: vec![pod(
            true,
            Some(&format!("docker.io/r/x@sha256:{}", "0".repeat(64))),
        )],
        proxy: ProxyReport::NoPodRunning,
    };
    let status = upstream_status(&upstream(""), &same).expect("image id reported");
    assert_eq!(status.image.as_deref(), Some(pinned.as_str()));
    assert_eq!(status.digest_matches, Some(true));
    let other = Report {
        pods: vec![pod(true, Some("r/x@sha256:1111"))],
        proxy: ProxyReport::NoPodRunning,
    };
    let status = upstream_status(&upstream(""), &other).expect("image id reported");
    assert_eq!(status.image_id.as_deref(), Some("r/x@sha256:1111"));
    assert_eq!(status.digest_matches, Some(false));
    assert_eq!(upstream_status(&upstream(""), &Report::default()), None);
}

#[test]
fn conditions_available_with_unavailable_replicas_is_degraded() {
    let status = "status:
  observedGeneration: 2
  unavailableReplicas: 1
  conditions:
  - {type: Available, status: 'True', reason: MinimumReplicasAvailable, message: ok}
  - {type: Progressing, status: 'True', reason: NewReplicaSetAvailable, message: done}
";
    let status = desired(
        &upstream(""),
        observation(status, &Report::default()),
        now(),
    );
    let degraded = condition(&status, "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "ReplicasUnavailable")
    );
    assert_eq!(condition(&status, "Ready").status, "True");
}

#[test]
fn br_34_crash_looping_stdio_child_is_ready_false_with_restarts_and_last_stderr() {
    let upstream_state = crate::report::UpstreamState {
        ready: false,
        last_error: Some("child exited with code 1; stderr: no database URL provided".to_owned()),
        exposed: None,
        stdio: Some(crate::report::StdioState {
            children: 0,
            restarts: 7,
        }),
    };
    let report = Report {
        pods: vec![pod(false, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(0, &[]),
            not_ready: Some("upstream session not ready".to_owned()),
            upstream: Some(upstream_state.clone()),
        },
    };
    let status = desired(&upstream(""), observation(ROLLING_OUT, &report), now());
    for type_ in ["Ready", "UpstreamReady"] {
        let c = condition(&status, type_);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "UpstreamCrashLooping"),
            "{c:?}"
        );
        assert!(
            c.message.contains("7 restarts") && c.message.contains("no database URL provided"),
            "{c:?}"
        );
    }
    let degraded = condition(&status, "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "UpstreamCrashLooping")
    );
    // A ready pod, or a child that never restarted, is not a crash loop.
    let mut calm = upstream_state;
    calm.stdio = Some(crate::report::StdioState {
        children: 1,
        restarts: 0,
    });
    let report = Report {
        pods: vec![pod(false, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(0, &[]),
            not_ready: Some("upstream session not ready".to_owned()),
            upstream: Some(calm),
        },
    };
    let status = desired(&upstream(""), observation(ROLLING_OUT, &report), now());
    assert_ne!(condition(&status, "Ready").reason, "UpstreamCrashLooping");
}

#[test]
fn conditions_pod_that_cannot_pull_its_image_is_ready_false_naming_the_image_until_it_can() {
    let blocked = Blocked::ImagePull {
        container: "upstream".to_owned(),
        image: "r.example/s@sha256:aa".to_owned(),
        reason: "ErrImagePull".to_owned(),
        message: "not found".to_owned(),
    };
    let report = Report {
        pods: vec![PodState {
            blocked: Some(blocked),
            ..pod(false, None)
        }],
        ..Report::default()
    };
    let status = desired(&upstream(""), observation(ROLLING_OUT, &report), now());
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ImagePullFailed")
    );
    assert_eq!(
        ready.message,
        "container upstream of pod p cannot pull image r.example/s@sha256:aa (ErrImagePull): \
         not found"
    );
    assert_eq!(condition(&status, "Degraded").reason, "ImagePullFailed");

    // The image arrives: the cause is gone from the pod's status, and from the condition.
    let report = Report {
        pods: vec![pod(false, None)],
        ..Report::default()
    };
    let status = desired(&upstream(""), observation(ROLLING_OUT, &report), now());
    assert_eq!(condition(&status, "Ready").reason, "Progressing");
    assert_eq!(condition(&status, "Degraded").reason, "AsExpected");
}

/// The `UpstreamExposed` condition after a reconcile whose proxy answered `/upstream` with
/// `body`.
fn exposed_after(body: &str) -> Condition {
    let upstream_state: crate::report::UpstreamState =
        serde_json::from_str(body).expect("the proxy's /upstream JSON");
    let report = Report {
        pods: vec![pod(true, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(1, &[]),
            not_ready: None,
            upstream: Some(upstream_state),
        },
    };
    let status = desired(&upstream(""), observation(AVAILABLE, &report), now());
    condition(&status, "UpstreamExposed").clone()
}

#[test]
fn upstream_exposed_follows_the_proxy_upstream_exposed_field() {
    // Issue 40, item 3: a warning condition; Ready does not depend on it.
    let exposed = exposed_after(r#"{"ready": true, "exposed": true}"#);
    assert_eq!(
        (exposed.status.as_str(), exposed.reason.as_str()),
        ("True", "UpstreamPortExposed")
    );
    assert!(
        exposed.message.contains("127.0.0.1") && exposed.message.contains("pod p"),
        "says how to bind to loopback: {exposed:?}"
    );
    assert!(conditions::WARNING_REASONS.contains(&"UpstreamPortExposed"));
    let loopback = exposed_after(r#"{"ready": true, "exposed": false}"#);
    assert_eq!(
        (loopback.status.as_str(), loopback.reason.as_str()),
        ("False", "LoopbackOnly")
    );
    let unchecked = exposed_after(r#"{"ready": true, "exposed": null}"#);
    assert_eq!(
        (unchecked.status.as_str(), unchecked.reason.as_str()),
        ("Unknown", "ExposureNotChecked")
    );
    let stdio = exposed_after(r#"{"ready": true, "stdio": {"children": 1, "restarts": 0}}"#);
    assert_eq!(
        (stdio.status.as_str(), stdio.reason.as_str()),
        ("False", "NoUpstreamPort")
    );
}

#[test]
fn upstream_exposed_leaves_ready_true() {
    let report = Report {
        pods: vec![pod(true, None)],
        proxy: ProxyReport::Answered {
            pod: "p".to_owned(),
            tools: summary(1, &[]),
            not_ready: None,
            upstream: Some(
                serde_json::from_str(r#"{"ready": true, "exposed": true}"#).expect("json"),
            ),
        },
    };
    let status = desired(&upstream(""), observation(AVAILABLE, &report), now());
    assert_eq!(condition(&status, "Ready").status, "True");
    assert_eq!(condition(&status, "Degraded").status, "False");
}
