//! Unit tests of [`super`]: the backoff arithmetic, and whole reconciles against a fake API
//! server (`fake_api`: a `tower` service that records every request and answers like the API
//! server would).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::*;
use crate::build::BuildError;
use fake_api::{FakeApiServer, Recorded, everything};

mod fake_api;

#[test]
fn backoff_delay_doubles_from_one_second_and_caps_at_five_minutes() {
    let delays: Vec<u64> = (1..=12).map(|n| backoff_delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    assert_eq!(backoff_delay(u32::MAX), BACKOFF_MAX);
}

#[test]
fn backoff_counts_per_object_and_resets_on_success() {
    let backoff = Backoff::default();
    let a = ObjectRef::<McpUpstream>::new("a").within("ns");
    let b = ObjectRef::<McpUpstream>::new("b").within("ns");
    assert_eq!(backoff.next(a.clone()), Duration::from_secs(1));
    assert_eq!(backoff.next(a.clone()), Duration::from_secs(2));
    assert_eq!(
        backoff.next(b.clone()),
        Duration::from_secs(1),
        "independent"
    );
    backoff.reset(&a);
    assert_eq!(backoff.next(a), Duration::from_secs(1));
}

#[test]
fn error_kind_is_bounded_per_variant() {
    let timeout = Error::Timeout {
        name: "x".to_owned(),
        after: RECONCILE_TIMEOUT,
    };
    assert_eq!(timeout.kind(), "timeout");
    let build = Error::Build(BuildError::MissingMetadata {
        name: "x".to_owned(),
        field: "uid",
    });
    assert_eq!(build.kind(), "missing_metadata");
}

fn context(fake: &FakeApiServer) -> Arc<Context> {
    let settings = Settings {
        metrics_listen: None,
        ..Settings::default()
    };
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    Arc::new(Context::new(fake.client(), settings, metrics).expect("context"))
}

fn ready_of(status_patch: &Recorded) -> &Value {
    &status_patch.body["status"]["conditions"][0]
}

#[tokio::test]
async fn reconcile_valid_spec_applies_children_then_status_in_order() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    let action = reconcile(everything(None), ctx.clone())
        .await
        .expect("reconciles");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));

    let requests = fake.writes();
    let seen: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/api/v1/namespaces/demo/secrets"),
            (
                "PATCH",
                "/apis/berth.dev/v1alpha1/namespaces/demo/mcpupstreams/everything/status"
            ),
            (
                "PATCH",
                "/api/v1/namespaces/demo/configmaps/everything-proxy"
            ),
            ("PATCH", "/api/v1/namespaces/demo/services/everything"),
            (
                "PATCH",
                "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies/everything"
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/demo/deployments/everything"
            ),
            (
                "PATCH",
                "/apis/berth.dev/v1alpha1/namespaces/demo/mcpupstreams/everything/status"
            ),
        ]
    );
    let secret = &requests[0];
    assert_eq!(secret.body["metadata"]["name"], "everything-session-key");
    assert_eq!(
        secret.body["data"]["key"].as_str().map(str::len),
        Some(88),
        "64 hex characters, base64-encoded: {secret:?}"
    );
    let record = &requests[1];
    assert_eq!(
        record.body,
        json!({"status": {"sessionKeySecretUid": "uid-everything-session-key"}}),
        "the created Secret's uid recorded at once, by a merge patch: {record:?}"
    );
    assert!(!record.query.contains("force"), "{record:?}");
    for request in &requests[2..6] {
        assert!(
            request.query.contains("fieldManager=berth-operator")
                && !request.query.contains("force=true"),
            "server-side apply, not forced where it creates: {request:?}"
        );
        assert!(request.body["apiVersion"].is_string() && request.body["kind"].is_string());
    }
    let status = &requests[6];
    assert_eq!(status.body["status"]["observedGeneration"], 2);
    assert_eq!(
        status.body["status"].get("sessionKeySecretUid"),
        None,
        "the status apply never owns the record: {status:?}"
    );
    assert_eq!(
        status.body["status"]["endpoint"],
        "http://everything.demo.svc.cluster.local:8080/mcp"
    );
    assert_eq!(ready_of(status)["status"], "False");
    assert_eq!(ready_of(status)["reason"], "Progressing");
    assert!(
        ctx.metrics
            .render()
            .contains("berth_operator_reconciliations_total{result=\"ok\"} 1")
    );
}

#[tokio::test]
async fn reconcile_available_deployment_writes_ready_true() {
    let fake = FakeApiServer {
        deployment_status: Some(json!({"conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."}
        ]})),
        ..FakeApiServer::default()
    };
    reconcile(everything(None), context(&fake))
        .await
        .expect("reconciles");
    let requests = fake.writes();
    let status = requests.last().expect("status patch");
    assert_eq!(ready_of(status)["status"], "True");
    assert_eq!(ready_of(status)["reason"], "DeploymentAvailable");
}

#[tokio::test]
async fn reconcile_invalid_spec_reports_condition_and_warning_event_without_applying() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    let mut upstream = (*everything(None)).clone();
    upstream.spec.timeouts.connect = berth_crds::DurationString::new("5 seconds");
    let action = reconcile(Arc::new(upstream), ctx.clone())
        .await
        .expect("an invalid spec is not a reconcile error");
    assert_eq!(action, Action::await_change(), "no hot loop");

    let requests = fake.writes();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let status = &requests[0];
    assert!(status.path.ends_with("/mcpupstreams/everything/status"));
    assert_eq!(ready_of(status)["reason"], "InvalidSpec");
    assert!(
        ready_of(status)["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.timeouts.connect: ")),
        "{status:?}"
    );
    assert_eq!(status.body["status"].get("endpoint"), None);
    let event = &requests[1];
    assert_eq!(
        (event.method.as_str(), event.path.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/demo/events")
    );
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "InvalidSpec");
    assert_eq!(event.body["regarding"]["name"], "everything");
    assert!(
        ctx.metrics
            .render()
            .contains("berth_operator_reconciliations_total{result=\"invalid_spec\"} 1")
    );
}

#[tokio::test]
async fn reconcile_invalid_spec_already_reported_writes_nothing() {
    let mut invalid = (*everything(None)).clone();
    invalid.spec.timeouts.connect = berth_crds::DurationString::new("5 seconds");
    let message = validate(&invalid).expect_err("invalid").message;
    let fake = FakeApiServer::default();
    let condition = |type_: &str, status: &str| {
        json!({"type": type_, "status": status, "reason": "InvalidSpec", "message": message,
               "observedGeneration": 2, "lastTransitionTime": "2030-01-01T00:00:00Z"})
    };
    let mut upstream = (*everything(Some(json!({"observedGeneration": 2, "conditions": [
        condition("Ready", "False"), condition("Progressing", "False"),
        condition("Degraded", "True"),
    ]}))))
    .clone();
    upstream.spec.timeouts = invalid.spec.timeouts;
    reconcile(Arc::new(upstream), context(&fake))
        .await
        .expect("reconciles");
    let requests = fake.writes();
    assert!(
        requests.is_empty(),
        "status already current, no second Event: {requests:?}"
    );
}

#[tokio::test]
async fn reconcile_refused_apply_fails_with_apply_kind_reports_status_and_backs_off() {
    let fake = FakeApiServer {
        refuse: Some(("/deployments/", StatusCode::INTERNAL_SERVER_ERROR)),
        ..FakeApiServer::default()
    };
    let ctx = context(&fake);
    let upstream = everything(None);
    let err = reconcile(upstream.clone(), ctx.clone())
        .await
        .expect_err("apply refused");
    assert_eq!(err.kind(), "apply");
    assert!(err.to_string().contains("Deployment everything"), "{err}");
    let writes = fake.writes();
    let status = writes
        .iter()
        .find(|r| r.path.ends_with("/status"))
        .expect("the failure is reported in status");
    assert_eq!(ready_of(status)["status"], "False");
    assert_eq!(ready_of(status)["reason"], "ApplyFailed");
    assert_eq!(
        ready_of(status)["message"],
        "failed to apply Deployment everything: refused by the fake"
    );
    let event = writes.last().expect("event");
    assert_eq!(event.body["reason"], "ApplyFailed");
    assert_eq!(event.body["type"], "Warning");
    let first = error_policy(upstream.clone(), &err, ctx.clone());
    let second = error_policy(upstream, &err, ctx.clone());
    assert_eq!(first, Action::requeue(Duration::from_secs(1)));
    assert_eq!(second, Action::requeue(Duration::from_secs(2)));
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("berth_operator_reconciliations_total{result=\"error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_operator_reconcile_errors_total{kind=\"apply\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn br_32_forbidden_apply_is_ready_false_apply_forbidden_with_api_message() {
    let fake = FakeApiServer {
        refuse: Some(("/services/", StatusCode::FORBIDDEN)),
        ..FakeApiServer::default()
    };
    let err = reconcile(everything(None), context(&fake))
        .await
        .expect_err("apply forbidden");
    assert_eq!(err.kind(), "apply");
    let writes = fake.writes();
    let status = writes
        .iter()
        .find(|r| r.path.ends_with("/status"))
        .expect("the failure is reported in status");
    assert_eq!(ready_of(status)["reason"], "ApplyForbidden");
    assert_eq!(
        ready_of(status)["message"],
        "failed to apply Service everything: refused by the fake"
    );
}

#[tokio::test]
async fn reconcile_upstream_deleted_before_status_write_is_not_an_error() {
    let fake = FakeApiServer {
        refuse: Some(("/status", StatusCode::NOT_FOUND)),
        ..FakeApiServer::default()
    };
    let action = reconcile(everything(None), context(&fake))
        .await
        .expect("a vanished McpUpstream is not retried");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));
}

#[tokio::test]
async fn reconcile_steady_state_writes_nothing_and_counts_writes() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    reconcile(everything(None), ctx.clone())
        .await
        .expect("first reconcile");
    let first = fake.writes();
    assert_eq!(
        first.len(),
        7,
        "a Secret created, its uid recorded, four applies (the NetworkPolicy is on by default) \
         and a status: {first:?}"
    );
    assert_eq!(ctx.metrics.writes("Secret"), 1);
    assert_eq!(ctx.metrics.writes("ConfigMap"), 1);
    assert_eq!(ctx.metrics.writes("Service"), 1);
    assert_eq!(ctx.metrics.writes("NetworkPolicy"), 1);
    assert_eq!(ctx.metrics.writes("Deployment"), 1);
    assert_eq!(ctx.metrics.writes("McpUpstreamStatus"), 2);

    // The watch hands over the McpUpstream carrying the status just written.
    reconcile(everything(Some(fake.status())), ctx.clone())
        .await
        .expect("second reconcile");
    assert_eq!(fake.writes().len(), 7, "no write at steady state");
    assert_eq!(ctx.metrics.total_writes(), 7);
}

#[tokio::test]
async fn reconcile_deleted_child_is_applied_again() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    reconcile(everything(None), ctx.clone())
        .await
        .expect("first reconcile");
    let written = fake.status();
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove("/api/v1/namespaces/demo/configmaps/everything-proxy");
    reconcile(everything(Some(written)), ctx.clone())
        .await
        .expect("second reconcile");
    let writes: Vec<String> = fake.writes()[7..].iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        writes,
        ["/api/v1/namespaces/demo/configmaps/everything-proxy"]
    );
    assert_eq!(ctx.metrics.writes("ConfigMap"), 2);
}

#[tokio::test]
async fn reconcile_optional_children_are_applied_once_then_steady() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    let mut upstream = (*everything(None)).clone();
    upstream.spec.network_policy.enabled = true;
    upstream.spec.replicas = 2;
    upstream.spec.pod_disruption_budget = Some(berth_crds::PodDisruptionBudgetSpec {
        min_available: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
        max_unavailable: None,
    });
    reconcile(Arc::new(upstream.clone()), ctx.clone())
        .await
        .expect("first reconcile");
    let first: Vec<String> = fake.writes().iter().map(|r| r.path.clone()).collect();
    assert!(
        first.contains(
            &"/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies/everything".to_owned()
        ) && first.contains(
            &"/apis/policy/v1/namespaces/demo/poddisruptionbudgets/everything".to_owned()
        ),
        "{first:?}"
    );
    assert_eq!(
        first.len(),
        8,
        "Secret, its uid, 5 applies and a status: {first:?}"
    );
    assert_eq!(ctx.metrics.writes("NetworkPolicy"), 1);
    assert_eq!(ctx.metrics.writes("PodDisruptionBudget"), 1);

    upstream.status = Some(serde_json::from_value(fake.status()).expect("status"));
    reconcile(Arc::new(upstream), ctx.clone())
        .await
        .expect("second reconcile");
    assert_eq!(fake.writes().len(), 8, "no write at steady state");
}

#[tokio::test]
async fn reconcile_upstream_being_deleted_applies_and_writes_nothing() {
    // `kubectl delete --cascade=foreground`: the McpUpstream stays, with a deletionTimestamp,
    // until the garbage collector removed its children; re-applying them would fight it.
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    let mut upstream = (*everything(None)).clone();
    upstream.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2030-01-01T00:00:00Z".parse().expect("timestamp"),
        ));
    reconcile(Arc::new(upstream), ctx.clone())
        .await
        .expect("reconcile");
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
}

/// A fake API server holding a Service `everything` someone else made (no owner reference).
fn fake_with_foreign_service() -> FakeApiServer {
    let fake = FakeApiServer::default();
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            "/api/v1/namespaces/demo/services/everything".to_owned(),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "everything", "namespace": "demo", "uid": "foreign",
                                "resourceVersion": "1"},
                   "spec": {"selector": {"app": "web"}}}),
        );
    fake
}

#[tokio::test]
async fn reconcile_foreign_service_of_same_name_writes_no_child_and_reports_name_conflict() {
    let fake = fake_with_foreign_service();
    let ctx = context(&fake);
    let action = reconcile(everything(None), ctx.clone())
        .await
        .expect("a name conflict is reported, not an error");
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(1)),
        "backoff, no hot loop"
    );
    let writes = fake.writes();
    let paths: Vec<(&str, &str)> = writes
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            (
                "PATCH",
                "/apis/berth.dev/v1alpha1/namespaces/demo/mcpupstreams/everything/status"
            ),
            ("POST", "/apis/events.k8s.io/v1/namespaces/demo/events"),
        ],
        "nothing but status and the Event is written"
    );
    assert_eq!(ready_of(&writes[0])["status"], "False");
    assert_eq!(ready_of(&writes[0])["reason"], "NameConflict");
    assert_eq!(
        ready_of(&writes[0])["message"],
        "Service everything exists and is not owned by this McpUpstream; \
         rename the McpUpstream or remove the Service"
    );
    assert_eq!(writes[1].body["type"], "Warning");
    assert_eq!(writes[1].body["reason"], "NameConflict");
    let again = reconcile(everything(None), ctx.clone())
        .await
        .expect("reported again");
    assert_eq!(again, Action::requeue(Duration::from_secs(2)));
    assert!(
        ctx.metrics
            .render()
            .contains("berth_operator_reconcile_errors_total{kind=\"name_conflict\"} 2")
    );
}

#[tokio::test]
async fn reconcile_name_conflict_removed_recovers_and_applies_children() {
    let fake = fake_with_foreign_service();
    let ctx = context(&fake);
    reconcile(everything(None), ctx.clone())
        .await
        .expect("conflict reported");
    let reported = fake.writes()[0].body["status"].clone();
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove("/api/v1/namespaces/demo/services/everything");
    let action = reconcile(everything(Some(reported)), ctx.clone())
        .await
        .expect("reconciles");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));
    let writes = fake.writes();
    assert!(
        writes
            .iter()
            .any(|r| r.path == "/api/v1/namespaces/demo/services/everything"),
        "{writes:?}"
    );
    let status = writes
        .iter()
        .rev()
        .find(|r| r.path.ends_with("/status"))
        .expect("status");
    assert_eq!(ready_of(status)["reason"], "Progressing");
}

#[tokio::test]
async fn reconcile_foreign_unwanted_network_policy_is_left_alone() {
    let fake = FakeApiServer::default();
    let path = "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies/everything";
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            path.to_owned(),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "metadata": {"name": "everything", "namespace": "demo", "uid": "foreign"}}),
        );
    let mut upstream = (*everything(None)).clone();
    upstream.spec.network_policy.ingress = false;
    reconcile(Arc::new(upstream), context(&fake))
        .await
        .expect("reconciles");
    assert!(
        fake.writes().iter().all(|r| r.path != path),
        "{:?}",
        fake.writes()
    );
}

#[tokio::test]
async fn reconcile_foreign_network_policy_of_default_spec_is_a_name_conflict() {
    // Issue 40, items 1 and 3: the policy is wanted by default, and a foreign one of its name
    // is never taken over.
    let fake = FakeApiServer::default();
    let path = "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies/everything";
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            path.to_owned(),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "metadata": {"name": "everything", "namespace": "demo", "uid": "foreign"}}),
        );
    reconcile(everything(None), context(&fake))
        .await
        .expect("a name conflict is reported, not an error");
    let writes = fake.writes();
    assert!(writes.iter().all(|r| r.path != path), "{writes:?}");
    let status = writes
        .iter()
        .find(|r| r.path.ends_with("/status") && r.query.contains("force=true"))
        .expect("status written");
    assert_eq!(ready_of(status)["reason"], "NameConflict");
    assert!(
        ready_of(status)["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("NetworkPolicy everything exists")),
        "{status:?}"
    );
}

#[tokio::test]
async fn reconcile_budget_percentage_of_every_replica_is_degraded_blocks_drain() {
    let fake = FakeApiServer::default();
    let mut upstream = (*everything(None)).clone();
    upstream.spec.pod_disruption_budget = Some(berth_crds::PodDisruptionBudgetSpec {
        min_available: Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("50%".to_owned()),
        ),
        max_unavailable: None,
    });
    reconcile(Arc::new(upstream), context(&fake))
        .await
        .expect("reconciles");
    let writes = fake.writes();
    let status = writes
        .iter()
        .find(|r| r.path.ends_with("/status") && r.query.contains("force=true"))
        .expect("status");
    let degraded = &status.body["status"]["conditions"][2];
    assert_eq!(degraded["type"], "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "DisruptionBudgetBlocksDrain");
    assert!(
        degraded["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.podDisruptionBudget.minAvailable 50%")),
        "{degraded}"
    );
    let event = writes.last().expect("event");
    assert_eq!(event.body["reason"], "DisruptionBudgetBlocksDrain");
    assert_eq!(event.body["type"], "Warning");
}

const SESSION_KEY_PATH: &str = "/api/v1/namespaces/demo/secrets/everything-session-key";

/// A fake holding a Secret `everything-session-key` (whoever made it: the operator reads no
/// Secret, so only the create's 409 tells it one exists).
fn fake_with_session_key_secret() -> FakeApiServer {
    let fake = FakeApiServer::default();
    fake.objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            SESSION_KEY_PATH.to_owned(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "everything-session-key", "namespace": "demo",
                                "uid": "foreign"}}),
        );
    fake
}

#[tokio::test]
async fn reconcile_session_key_is_created_never_read() {
    let fake = FakeApiServer::default();
    reconcile(everything(None), context(&fake))
        .await
        .expect("reconciles");
    let secret_requests: Vec<(String, String)> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/secrets"))
        .map(|r| (r.method, r.path))
        .collect();
    assert_eq!(
        secret_requests,
        [(
            "POST".to_owned(),
            "/api/v1/namespaces/demo/secrets".to_owned()
        )],
        "issue 40, item 6: no get on Secrets"
    );
}

#[tokio::test]
async fn reconcile_existing_session_key_without_record_is_a_name_conflict_before_any_apply() {
    let fake = fake_with_session_key_secret();
    let ctx = context(&fake);
    let action = reconcile(everything(None), ctx.clone())
        .await
        .expect("a name conflict is reported, not an error");
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));
    let writes = fake.writes();
    let paths: Vec<&str> = writes.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/demo/secrets",
            "/apis/berth.dev/v1alpha1/namespaces/demo/mcpupstreams/everything/status",
            "/apis/events.k8s.io/v1/namespaces/demo/events",
        ],
        "the create found it; nothing applied"
    );
    assert_eq!(ready_of(&writes[1])["reason"], "NameConflict");
    assert!(
        ready_of(&writes[1])["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Secret everything-session-key exists")),
        "{:?}",
        writes[1]
    );
}

#[tokio::test]
async fn reconcile_existing_session_key_with_recorded_uid_is_used() {
    let fake = fake_with_session_key_secret();
    let ctx = context(&fake);
    let status = json!({"sessionKeySecretUid": "foreign"});
    let action = reconcile(everything(Some(status)), ctx.clone())
        .await
        .expect("reconciles");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));
    let writes: Vec<String> = fake.writes().iter().map(|r| r.path.clone()).collect();
    assert!(
        writes.contains(&"/apis/apps/v1/namespaces/demo/deployments/everything".to_owned()),
        "{writes:?}"
    );
    assert_eq!(
        writes.iter().filter(|p| p.ends_with("/status")).count(),
        1,
        "no record written over the one in place: {writes:?}"
    );
}

#[tokio::test]
async fn reconcile_existing_session_key_with_owned_deployment_is_used_after_upgrade() {
    // An earlier operator version read the Secret, checked its owner, then made the Deployment;
    // its status records no uid.
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    reconcile(everything(None), ctx.clone())
        .await
        .expect("first operator");
    let mut status = fake.status();
    status
        .as_object_mut()
        .expect("status object")
        .remove("sessionKeySecretUid");
    let upgraded = context(&fake);
    let action = reconcile(everything(Some(status)), upgraded)
        .await
        .expect("reconciles");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));
}

#[tokio::test]
async fn reconcile_session_key_create_is_sent_again_only_on_a_new_generation() {
    let fake = FakeApiServer::default();
    let ctx = context(&fake);
    reconcile(everything(None), ctx.clone())
        .await
        .expect("first");
    reconcile(everything(Some(fake.status())), ctx.clone())
        .await
        .expect("steady");
    assert_eq!(
        ctx.metrics.writes("Secret"),
        1,
        "steady state sends no create"
    );
    let mut edited = (*everything(Some(fake.status()))).clone();
    edited.metadata.generation = Some(3);
    edited.spec.timeouts.call = berth_crds::DurationString::new("61s");
    reconcile(Arc::new(edited), ctx.clone())
        .await
        .expect("edited");
    assert_eq!(ctx.metrics.writes("Secret"), 2, "one create per generation");
    assert!(
        fake.writes().iter().all(|r| !r.path.ends_with("/status")
            || r.body["status"]["conditions"][0]["reason"] != "NameConflict"),
        "its own Secret is no conflict"
    );
}
