//! The operator never trespasses (issue 40), against the real local control plane: an object
//! whose name a child would take and that this McpUpstream does not own is never modified,
//! adopted or deleted, and the McpUpstream says so (`Ready=False`, `NameConflict`); a tenant's
//! pod carrying the proxy's labels is not counted as one of the McpUpstream's pods. The
//! session-key Secret, which the operator creates without being able to read Secrets (item 6),
//! keeps the same guarantee through the uid recorded in `status.sessionKeySecretUid`.
//!
//! Each test runs an operator of its own scoped to its namespace. Needs `KUBECONFIG`
//! (tests/controlplane/up.sh); no kubelet.

use std::time::Duration;

use berth_crds::McpUpstream;
use berth_operator::status::current_condition;
use berth_tests::cluster::operator::{Operator, eventually_pod, play_kubelet, settings};
use berth_tests::cluster::{TestNamespace, client, ensure_crd, eventually_gone};
use berth_tests::wait_for;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
/// Resync of the test operators.
const RESYNC: Duration = Duration::from_secs(10);
/// Deadline for the operator to react.
const DEADLINE: Duration = Duration::from_secs(60);
/// Deadline for garbage collection: the collector may need a discovery resync (30 s) to notice
/// a CRD created after it started.
const GC_DEADLINE: Duration = Duration::from_secs(120);

/// The example, named `name`, asking for a NetworkPolicy.
fn upstream(name: &str) -> McpUpstream {
    let mut upstream: McpUpstream =
        serde_yaml::from_str(EVERYTHING).expect("examples/everything.yaml parses");
    upstream.metadata.name = Some(name.to_owned());
    upstream.spec.network_policy.enabled = true;
    upstream
}

/// A tenant's own Service `name`, selecting `app: web`.
fn tenant_service(name: &str) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .expect("service object")
}

/// A tenant's own NetworkPolicy `name`, letting anything reach `app: web` on 8080.
fn tenant_network_policy(name: &str) -> NetworkPolicy {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": 8080, "protocol": "TCP"}]}],
        },
    }))
    .expect("network policy object")
}

async fn eventually_condition(
    ns: &TestNamespace,
    name: &str,
    reason: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let api = ns.api::<McpUpstream>();
    wait_for(
        &format!("Ready of {name} with reason {reason}"),
        DEADLINE,
        || {
            let api = api.clone();
            async move {
                let upstream = api.get(name).await.ok()?;
                current_condition(&upstream, "Ready")
                    .filter(|c| c.reason == reason)
                    .cloned()
            }
        },
    )
    .await
}

#[tokio::test]
async fn mcp_upstream_named_like_tenant_service_and_network_policy_leaves_them_untouched() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-trespass").await;
    let operator = Operator::start("berth-operator-trespass", settings(&ns.name, RESYNC));
    let services = ns.api::<Service>();
    let policies = ns.api::<NetworkPolicy>();
    let service = services
        .create(&PostParams::default(), &tenant_service("api"))
        .await
        .expect("tenant Service created");
    let policy = policies
        .create(&PostParams::default(), &tenant_network_policy("api"))
        .await
        .expect("tenant NetworkPolicy created");

    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream("api"))
        .await
        .expect("McpUpstream accepted");
    let ready = eventually_condition(&ns, "api", "NameConflict").await;
    assert_eq!(ready.status, "False");
    assert_eq!(
        ready.message,
        "Service api exists and is not owned by this McpUpstream; \
         rename the McpUpstream or remove the Service"
    );
    let events = ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .expect("events listed");
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("NameConflict")
                && e.type_.as_deref() == Some("Warning")),
        "a Warning Event NameConflict: {:?}",
        events.items
    );
    // A few more reconciles (backoff 1 s, 2 s, 4 s) change nothing either.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = services.get("api").await.expect("Service still there");
    assert_eq!(after.spec, service.spec, "the Service is not modified");
    assert!(after.owner_references().is_empty(), "{after:?}");
    let after = policies
        .get("api")
        .await
        .expect("NetworkPolicy still there");
    assert_eq!(after.spec, policy.spec, "the NetworkPolicy is not modified");
    assert!(after.owner_references().is_empty(), "{after:?}");

    // Foreground deletion: the McpUpstream is gone only once the garbage collector has deleted
    // everything it owns, so the tenant's objects would be gone by then if it owned them.
    ns.api::<McpUpstream>()
        .delete("api", &DeleteParams::foreground())
        .await
        .expect("McpUpstream deleted");
    eventually_gone(&ns.api::<McpUpstream>(), "api", GC_DEADLINE).await;
    let after = services.get("api").await.expect("Service survives");
    assert_eq!(after.uid(), service.uid());
    let after = policies.get("api").await.expect("NetworkPolicy survives");
    assert_eq!(after.uid(), policy.uid());

    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_name_conflict_removed_recovers_and_creates_children() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-conflict").await;
    let operator = Operator::start("berth-operator-conflict", settings(&ns.name, RESYNC));
    let services = ns.api::<Service>();
    services
        .create(&PostParams::default(), &tenant_service("api"))
        .await
        .expect("tenant Service created");
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream("api"))
        .await
        .expect("McpUpstream accepted");
    eventually_condition(&ns, "api", "NameConflict").await;

    services
        .delete("api", &DeleteParams::default())
        .await
        .expect("tenant Service removed");
    // Retried with backoff: recovers without any change to the McpUpstream.
    eventually_condition(&ns, "api", "Progressing").await;
    let uid = ns
        .api::<McpUpstream>()
        .get("api")
        .await
        .expect("McpUpstream")
        .uid();
    let service = services.get("api").await.expect("the operator's Service");
    assert!(
        service
            .owner_references()
            .iter()
            .any(|r| r.controller == Some(true) && Some(&r.uid) == uid.as_ref()),
        "{service:?}"
    );

    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_named_like_tenant_secret_leaves_it_untouched_then_records_its_own() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-secret-conflict").await;
    let operator = Operator::start("berth-operator-secret", settings(&ns.name, RESYNC));
    let secrets = ns.api::<Secret>();
    let tenant: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "api-session-key"},
        "stringData": {"key": "the tenant's own"},
    }))
    .expect("secret object");
    let tenant = secrets
        .create(&PostParams::default(), &tenant)
        .await
        .expect("tenant Secret created");
    let upstreams = ns.api::<McpUpstream>();
    upstreams
        .create(&PostParams::default(), &upstream("api"))
        .await
        .expect("McpUpstream accepted");
    let ready = eventually_condition(&ns, "api", "NameConflict").await;
    assert_eq!(
        ready.message,
        "Secret api-session-key exists and is not owned by this McpUpstream; \
         rename the McpUpstream or remove the Secret"
    );
    // Nothing is applied while the conflict stands: the pods would be given the tenant's key.
    assert!(
        ns.api::<k8s_openapi::api::apps::v1::Deployment>()
            .get_opt("api")
            .await
            .expect("read")
            .is_none(),
        "no Deployment mounts a Secret the operator did not make"
    );
    let after = secrets.get("api-session-key").await.expect("Secret kept");
    assert_eq!(after.data, tenant.data, "the Secret is not modified");
    assert!(after.owner_references().is_empty(), "{after:?}");
    let status = upstreams.get("api").await.expect("McpUpstream").status;
    assert_eq!(
        status.and_then(|s| s.session_key_secret_uid),
        None,
        "nothing recorded for a Secret the operator did not create"
    );

    secrets
        .delete("api-session-key", &DeleteParams::default())
        .await
        .expect("tenant Secret removed");
    eventually_condition(&ns, "api", "Progressing").await;
    let own = secrets
        .get("api-session-key")
        .await
        .expect("the operator's Secret");
    let recorded = wait_for("status.sessionKeySecretUid", DEADLINE, || async {
        upstreams
            .get("api")
            .await
            .ok()?
            .status?
            .session_key_secret_uid
    })
    .await;
    assert_eq!(Some(recorded), own.uid(), "the uid the create answered");
    assert_ne!(own.uid(), tenant.uid());

    operator.stop().await.expect("operator stops");
    ns.delete().await;
}

/// A tenant's bare pod (no controller) carrying the proxy's labels for McpUpstream `instance`,
/// within the "restricted" Pod Security Standard the test namespace enforces.
fn impostor(instance: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "impostor", "labels": {
            "app.kubernetes.io/name": "berth-proxy",
            "app.kubernetes.io/instance": instance,
        }},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "proxy",
                "image": "registry.example/tenant/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    .expect("pod object")
}

#[tokio::test]
async fn labelled_pod_not_of_our_replica_set_is_not_counted() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-impostor").await;
    let operator = Operator::start("berth-operator-impostor", settings(&ns.name, RESYNC));
    let pods = ns.api::<Pod>();
    let tenant = pods
        .create(&PostParams::default(), &impostor("everything"))
        .await
        .expect("tenant pod created");
    // Ready, with an IP: counted by labels, it would make the McpUpstream's pods look ready.
    play_kubelet(&ns, &tenant, true, "registry.example/tenant/app@sha256:00").await;

    let mut spec = upstream("everything");
    spec.spec.network_policy.enabled = false;
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &spec)
        .await
        .expect("McpUpstream accepted");
    // The ReplicaSet's own pod (no kubelet: never ready).
    eventually_pod(&ns, "everything", DEADLINE).await;
    let api = ns.api::<McpUpstream>();
    let counted = |upstream: &McpUpstream| {
        current_condition(upstream, "UpstreamReady").map(|c| (c.status.clone(), c.message.clone()))
    };
    wait_for(
        "UpstreamReady to count only the ReplicaSet's pod",
        DEADLINE,
        || {
            let api = api.clone();
            async move {
                let upstream = api.get("everything").await.ok()?;
                let (status, message) = counted(&upstream)?;
                (status == "False" && message.starts_with("0 of 1 pods ready")).then_some(())
            }
        },
    )
    .await;
    // And it stays so across a resync.
    tokio::time::sleep(RESYNC + Duration::from_secs(2)).await;
    let upstream = api.get("everything").await.expect("McpUpstream");
    let (status, message) = counted(&upstream).expect("UpstreamReady");
    assert_eq!(status, "False", "{message}");
    assert!(message.starts_with("0 of 1 pods ready"), "{message}");

    operator.stop().await.expect("operator stops");
    ns.delete().await;
}
