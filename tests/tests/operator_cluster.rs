//! The operator against the real local control plane: children and pod shape, status,
//! API-server validation, garbage collection, drift repair, readiness and invalid specs.
//!
//! Needs `KUBECONFIG` pointing at `tests/controlplane/up.sh`'s cluster (`make test` does this).
//! There is no kubelet: Deployments never become Available on their own, which the tests expect,
//! and the readiness test plays the kubelet's part for one Pod.

use std::time::Duration;

use berth_crds::{McpUpstream, PROXY_CONFIG_KEY, ProxyConfig};
use berth_tests::cluster::{PROXY_IMAGE, TestNamespace, client, rejected_naming, shared_operator};
use berth_tests::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;

/// The shipped example, applied as a user would.
const EVERYTHING: &str = include_str!("../../examples/everything.yaml");

/// Deadline for the operator to create or repair objects.
const RECONCILE_DEADLINE: Duration = Duration::from_secs(30);
/// Deadline for the kube-controller-manager's controllers (ReplicaSet, Deployment). Generous:
/// the machine may be busy compiling.
const CONTROLLERS_DEADLINE: Duration = Duration::from_secs(60);
/// Deadline for garbage collection: the collector may need a discovery resync (30 s) to notice
/// a CRD created after it started.
const GC_DEADLINE: Duration = Duration::from_secs(120);

fn everything() -> McpUpstream {
    serde_yaml::from_str(EVERYTHING).expect("examples/everything.yaml parses")
}

async fn create(ns: &TestNamespace, upstream: &McpUpstream) -> McpUpstream {
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), upstream)
        .await
        .expect("McpUpstream accepted")
}

/// Waits until `name` exists in `api`.
async fn eventually_get<K>(api: &Api<K>, name: &str, deadline: Duration) -> K
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to exist", std::any::type_name::<K>());
    wait_for(&what, deadline, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move { api.get_opt(&name).await.ok().flatten() }
    })
    .await
}

/// Waits until `name` is gone from `api`.
async fn eventually_gone<K>(api: &Api<K>, name: &str, deadline: Duration)
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to be deleted", std::any::type_name::<K>());
    wait_for(&what, deadline, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move { matches!(api.get_opt(&name).await, Ok(None)).then_some(()) }
    })
    .await;
}

fn ready_condition(upstream: &McpUpstream) -> Option<&Condition> {
    upstream
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Waits until the McpUpstream `name` satisfies `accept` and returns it.
async fn eventually_upstream(
    ns: &TestNamespace,
    name: &str,
    what: &str,
    accept: impl Fn(&McpUpstream) -> bool,
) -> McpUpstream {
    let api = ns.api::<McpUpstream>();
    let accept = &accept;
    wait_for(what, RECONCILE_DEADLINE, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move { api.get(&name).await.ok().filter(accept) }
    })
    .await
}

fn pod_spec(deployment: &Deployment) -> &PodSpec {
    deployment.spec.template.spec.as_ref().expect("pod spec")
}

fn proxy_container(deployment: &Deployment) -> &Container {
    pod_spec(deployment)
        .containers
        .iter()
        .find(|c| c.name == "proxy")
        .expect("proxy container")
}

#[tokio::test]
async fn everything_example_applied_children_have_sidecar_pod_shape_and_status() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-shape").await;
    let example = everything();
    let created = create(&ns, &example).await;

    // ConfigMap: the proxy config the proxy itself would accept, pointing at the sidecar.
    let config_map = eventually_get(
        &ns.api::<ConfigMap>(),
        "everything-proxy",
        RECONCILE_DEADLINE,
    )
    .await;
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(PROXY_CONFIG_KEY))
        .expect("proxy.yaml key");
    let config = ProxyConfig::from_yaml(text).expect("rendered config parses");
    assert_eq!(
        config.upstream.url.as_deref(),
        Some("http://127.0.0.1:3001/mcp")
    );
    assert_eq!(config.listen, "0.0.0.0:8080");
    assert_eq!(config.admin_listen, "0.0.0.0:9090");

    // Deployment: native sidecar + proxy, as stored by the API server.
    let deployment =
        eventually_get(&ns.api::<Deployment>(), "everything", RECONCILE_DEADLINE).await;
    let owner = &deployment.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("McpUpstream", created.uid().as_deref().unwrap_or_default())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(deployment.spec.replicas, Some(1));
    let pod = pod_spec(&deployment);
    let sidecar = pod
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "upstream")
        .expect("upstream init container");
    assert_eq!(
        sidecar.restart_policy.as_deref(),
        Some("Always"),
        "native sidecar"
    );
    assert_eq!(sidecar.image, Some(example.spec.upstream.image.clone()));
    assert!(
        sidecar
            .image
            .as_deref()
            .is_some_and(|i| i.contains("@sha256:")),
        "digest-pinned"
    );
    assert_eq!(sidecar.args, Some(vec!["streamableHttp".to_owned()]));
    let startup = sidecar
        .startup_probe
        .as_ref()
        .and_then(|p| p.tcp_socket.as_ref());
    assert_eq!(
        startup.map(|t| t.port.clone()),
        Some(IntOrString::String("upstream".to_owned()))
    );
    let proxy = proxy_container(&deployment);
    assert_eq!(proxy.image.as_deref(), Some(PROXY_IMAGE));
    let http_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|g| g.path.clone())
    };
    assert_eq!(
        http_path(&proxy.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        http_path(&proxy.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let mount = &proxy.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/etc/berth", Some(true))
    );

    // Service: ClusterIP 8080 `mcp` to the pods' `mcp` port.
    let service = eventually_get(&ns.api::<Service>(), "everything", RECONCILE_DEADLINE).await;
    let spec = service.spec.as_ref().expect("service spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let port = &spec.ports.as_ref().expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("mcp"), 8080));
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("mcp".to_owned()))
    );

    // Status: observed, not Ready (no kubelet), endpoint advertised.
    let endpoint = format!("http://everything.{}.svc.cluster.local:8080/mcp", ns.name);
    let upstream = eventually_upstream(&ns, "everything", "status of everything", |u| {
        u.status.as_ref().and_then(|s| s.observed_generation) == u.metadata.generation
            && ready_condition(u).is_some()
    })
    .await;
    let ready = ready_condition(&upstream).expect("Ready condition");
    assert_eq!(ready.status, "False", "{ready:?}");
    assert!(
        ["Progressing", "DeploymentUnavailable"].contains(&ready.reason.as_str()),
        "{ready:?}"
    );
    assert_eq!(
        upstream.status.as_ref().and_then(|s| s.endpoint.as_deref()),
        Some(endpoint.as_str())
    );

    // The namespace enforces the "restricted" Pod Security Standard, so a Pod only exists if the
    // template meets it.
    let pod =
        berth_tests::cluster::operator::eventually_pod(&ns, "everything", CONTROLLERS_DEADLINE)
            .await;
    assert_eq!(
        pod.labels()
            .get("berth.dev/mcpupstream")
            .map(String::as_str),
        Some("everything")
    );
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_image_by_tag_is_rejected_by_api_server_naming_the_field() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-tag").await;
    let mut upstream = everything();
    upstream.spec.upstream.image = "docker.io/mcp/everything:latest".to_owned();
    rejected_naming(&ns, &upstream, "spec.upstream.image").await;
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_port_clashing_with_proxy_port_is_rejected_naming_the_field() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-port").await;
    let mut upstream = everything();
    upstream.spec.proxy.admin_port = 9100;
    upstream.spec.upstream.port = 9100;
    rejected_naming(&ns, &upstream, "spec.upstream.port").await;
    // Moving the proxy's port instead makes the same upstream port valid.
    upstream.spec.proxy.admin_port = 9091;
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream)
        .await
        .expect("distinct ports are accepted");
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_max_call_below_call_is_rejected_naming_the_field() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-maxcall").await;
    let mut upstream = everything();
    upstream.spec.timeouts.call = berth_crds::DurationString::new("60s");
    upstream.spec.timeouts.max_call = Some(berth_crds::DurationString::new("30s"));
    rejected_naming(&ns, &upstream, "spec.timeouts.maxCall").await;
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_deleted_children_are_garbage_collected() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-gc").await;
    create(&ns, &everything()).await;
    eventually_get(
        &ns.api::<ConfigMap>(),
        "everything-proxy",
        RECONCILE_DEADLINE,
    )
    .await;
    eventually_get(&ns.api::<Service>(), "everything", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<Deployment>(), "everything", RECONCILE_DEADLINE).await;

    ns.api::<McpUpstream>()
        .delete("everything", &DeleteParams::background())
        .await
        .expect("McpUpstream deleted");
    eventually_gone(&ns.api::<Deployment>(), "everything", GC_DEADLINE).await;
    eventually_gone(&ns.api::<Service>(), "everything", GC_DEADLINE).await;
    eventually_gone(&ns.api::<ConfigMap>(), "everything-proxy", GC_DEADLINE).await;
    ns.delete().await;
}

#[tokio::test]
async fn deployment_hand_edit_is_reverted_by_operator() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-drift").await;
    create(&ns, &everything()).await;
    let deployments = ns.api::<Deployment>();
    eventually_get(&deployments, "everything", RECONCILE_DEADLINE).await;

    // Someone else force-applies over two fields the operator owns.
    let edit = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [
                {"name": "proxy", "image": "registry.example/someone/else:1"}
            ]}},
        },
    });
    let edited = deployments
        .patch(
            "everything",
            &PatchParams::apply("hand-edit").force(),
            &Patch::Apply(&edit),
        )
        .await
        .expect("hand edit accepted");
    assert_eq!(edited.spec.replicas, Some(3), "the edit took effect");

    wait_for(
        "the operator to revert the hand edit",
        RECONCILE_DEADLINE,
        || {
            let deployments = deployments.clone();
            async move {
                let current = deployments.get("everything").await.ok()?;
                (current.spec.replicas == Some(1)
                    && proxy_container(&current).image.as_deref() == Some(PROXY_IMAGE))
                .then_some(())
            }
        },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn deployment_deleted_is_recreated_by_operator() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-recreate").await;
    create(&ns, &everything()).await;
    let deployments = ns.api::<Deployment>();
    let first = eventually_get(&deployments, "everything", RECONCILE_DEADLINE).await;
    let first_uid = first.uid().expect("uid");

    deployments
        .delete("everything", &DeleteParams::background())
        .await
        .expect("deployment deleted");
    let recreated = wait_for(
        "the operator to recreate the Deployment",
        RECONCILE_DEADLINE,
        || {
            let (deployments, first_uid) = (deployments.clone(), first_uid.clone());
            async move {
                let current = deployments.get_opt("everything").await.ok().flatten()?;
                (current.uid() != Some(first_uid)).then_some(current)
            }
        },
    )
    .await;
    assert_eq!(
        proxy_container(&recreated).image.as_deref(),
        Some(PROXY_IMAGE)
    );
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_deployment_available_becomes_ready() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-ready").await;
    create(&ns, &everything()).await;
    eventually_upstream(
        &ns,
        "everything",
        "Ready=False before any pod is ready",
        |u| ready_condition(u).is_some_and(|c| c.status == "False"),
    )
    .await;

    // Play the kubelet: report the Pod running and ready. The ReplicaSet controller then counts
    // it available, and the Deployment controller sets Available=True, as in a real cluster.
    let pod =
        berth_tests::cluster::operator::eventually_pod(&ns, "everything", CONTROLLERS_DEADLINE)
            .await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ready = |type_: &str| serde_json::json!({"type": type_, "status": "True", "lastTransitionTime": now});
    let status = serde_json::json!({"status": {
        "phase": "Running",
        "startTime": now,
        "conditions": [ready("PodScheduled"), ready("Initialized"), ready("ContainersReady"), ready("Ready")],
    }});
    ns.api::<Pod>()
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("pod status patched");

    let upstream = wait_for("Ready=True", CONTROLLERS_DEADLINE, || {
        let api = ns.api::<McpUpstream>();
        async move {
            let upstream = api.get("everything").await.ok()?;
            ready_condition(&upstream)
                .is_some_and(|c| c.status == "True")
                .then_some(upstream)
        }
    })
    .await;
    let ready = ready_condition(&upstream).expect("Ready condition");
    assert_eq!(ready.reason, "DeploymentAvailable", "{ready:?}");
    assert_eq!(ready.observed_generation, upstream.metadata.generation);
    ns.delete().await;
}

/// An McpUpstream name the API server accepts but no Service can have.
const INVALID_NAME: &str = "everything.v2";

#[tokio::test]
async fn mcp_upstream_name_unfit_for_a_service_is_invalid_spec_with_warning_event() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "op-invalid").await;
    // A valid object name (a DNS subdomain) that cannot name a Service (not a DNS-1035 label):
    // the API server accepts it, the operator cannot serve it.
    let mut upstream = everything();
    upstream.metadata.name = Some(INVALID_NAME.to_owned());
    create(&ns, &upstream).await;

    let upstream = eventually_upstream(&ns, INVALID_NAME, "Ready=False InvalidSpec", |u| {
        ready_condition(u).is_some_and(|c| c.reason == "InvalidSpec")
    })
    .await;
    let ready = ready_condition(&upstream).expect("Ready condition");
    assert_eq!(ready.status, "False");
    assert!(ready.message.contains("metadata.name"), "{ready:?}");
    assert_eq!(
        upstream.status.as_ref().and_then(|s| s.observed_generation),
        upstream.metadata.generation
    );

    let events = ns.api::<Event>();
    let event = wait_for(
        "a Warning Event about the invalid spec",
        RECONCILE_DEADLINE,
        || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(INVALID_NAME)
                        && e.reason.as_deref() == Some("InvalidSpec")
                })
            }
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("berth-operator")
    );
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("metadata.name")),
        "{event:?}"
    );
    // Nothing is deployed for a spec that cannot be served.
    assert!(
        ns.api::<Deployment>()
            .get_opt(INVALID_NAME)
            .await
            .expect("get")
            .is_none(),
        "no Deployment for an invalid spec"
    );
    ns.delete().await;
}
