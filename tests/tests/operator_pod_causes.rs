//! `Ready` names why pods do not run (issue 40), against the real local control plane: the test
//! writes a pod's status through the status subresource as a kubelet would (no kubelet runs
//! here) and reads the McpUpstream's condition.
//!
//! Runs an operator of its own scoped to its namespace. Needs `KUBECONFIG`
//! (tests/controlplane/up.sh).

use std::time::Duration;

use berth_crds::McpUpstream;
use berth_operator::status::current_condition;
use berth_tests::cluster::operator::{Operator, eventually_pod, play_kubelet, settings};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::wait_for;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
/// Resync of the test operator: pod status changes reach it through the resync.
const RESYNC: Duration = Duration::from_secs(5);
/// Deadline for the operator to react.
const DEADLINE: Duration = Duration::from_secs(60);

async fn eventually_ready(ns: &TestNamespace, what: &str, accept: impl Fn(&str, &str) -> bool) {
    let api = ns.api::<McpUpstream>();
    wait_for(what, DEADLINE, || {
        let api = api.clone();
        let accept = &accept;
        async move {
            let upstream = api.get("everything").await.ok()?;
            let ready = current_condition(&upstream, "Ready")?;
            (ready.status == "False" && accept(&ready.reason, &ready.message)).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn mcp_upstream_image_that_cannot_be_pulled_is_ready_false_naming_the_image_until_pulled() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-pull").await;
    let operator = Operator::start("berth-operator-pull", settings(&ns.name, RESYNC));
    let upstream: McpUpstream =
        serde_yaml::from_str(EVERYTHING).expect("examples/everything.yaml parses");
    let image = upstream.spec.upstream.image.clone();
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream)
        .await
        .expect("McpUpstream accepted");
    let pod = eventually_pod(&ns, "everything", DEADLINE).await;

    let waiting = serde_json::json!({"status": {
        "phase": "Pending",
        "initContainerStatuses": [{
            "name": "upstream", "image": image, "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                                  "message": format!("Back-off pulling image \"{image}\"")}},
        }],
    }});
    ns.api::<Pod>()
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&waiting),
        )
        .await
        .expect("pod status patched");
    let expected = format!(
        "container upstream of pod {} cannot pull image {image} (ImagePullBackOff)",
        pod.name_any()
    );
    eventually_ready(
        &ns,
        "Ready=False ImagePullFailed naming the image",
        |reason, message| reason == "ImagePullFailed" && message.starts_with(&expected),
    )
    .await;

    // The image is pulled and the sidecar runs: the cause is gone, and so is the reason.
    play_kubelet(&ns, &pod, false, &image).await;
    eventually_ready(&ns, "Ready=False without ImagePullFailed", |reason, _| {
        reason != "ImagePullFailed"
    })
    .await;

    operator.stop().await.expect("operator stops");
    ns.delete().await;
}
