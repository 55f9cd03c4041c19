//! Berth's pods on a real kubelet (issue 11): the chart's operator runs as a pod from its image,
//! and the pods it generates run the berth proxy beside digest-pinned upstream images built on
//! this machine, reached through their Services' ClusterIPs (kube-proxy).
//!
//! Needs the one-node cluster (`tests/controlplane/up.sh` with `BERTH_CP_NODE=1`; `make test`'s
//! node stage starts it), see `berth_tests::node`. Every test namespace enforces the
//! "restricted" Pod Security Standard, so each pod here was admitted under it.

use std::time::{Duration, Instant};

use berth_crds::McpUpstream;
use berth_tests::cluster::operator::eventually_pod;
use berth_tests::cluster::{TestNamespace, client};
use berth_tests::node::{
    self, READY_DEADLINE, RELEASE_NAMESPACE, STATUS_DEADLINE, all_running_and_ready,
    cluster_ip_url, create, eventually_conditions, everything, metrics_of,
};
use berth_tests::proxy::sample;
use berth_tests::{rmcp_client, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

#[tokio::test]
async fn operator_from_the_chart_runs_as_a_ready_pod_and_holds_the_lease() {
    node::chart_installed().await;
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let pod = wait_for("a ready operator pod", READY_DEADLINE, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=berth-operator"))
                .await
                .ok()?;
            list.items.into_iter().find(all_running_and_ready)
        }
    })
    .await;
    let image = pod.spec.as_ref().expect("spec").containers[0]
        .image
        .clone()
        .unwrap_or_default();
    assert_eq!(
        image,
        format!("ghcr.io/berth-dev/berth-operator:{}", node::app_version()),
        "the operator runs from the image images/build.sh built"
    );
    let leases: Api<Lease> = Api::namespaced(client, RELEASE_NAMESPACE);
    let holder = wait_for("the operator's Lease", STATUS_DEADLINE, || {
        let leases = leases.clone();
        async move {
            let lease = leases.get_opt("berth-operator").await.ok().flatten()?;
            lease.spec?.holder_identity
        }
    })
    .await;
    assert_eq!(holder, pod.name_any(), "the running pod leads");
}

#[tokio::test]
async fn http_upstream_pod_runs_2_of_2_and_serves_calls_through_the_cluster_ip() {
    node::chart_installed().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "pods-http").await;
    let upstreams = ns.api::<McpUpstream>();
    create(&ns, &everything("everything")).await;
    let ready = [
        ("Ready", "True"),
        ("UpstreamReady", "True"),
        ("ToolsDiscovered", "True"),
    ];
    let upstream = eventually_conditions(&upstreams, "everything", &ready, READY_DEADLINE).await;

    let pod = eventually_pod(&ns, "everything", READY_DEADLINE).await;
    assert!(all_running_and_ready(&pod), "2/2 running: {:?}", pod.status);
    // BR-36 for real: the kubelet's imageID is compared with the pinned digest.
    let reported = upstream
        .status
        .and_then(|s| s.upstream)
        .expect("status.upstream");
    assert_eq!(reported.digest_matches, Some(true), "{reported:?}");
    let pinned = node::pinned("berth.local/everything:test");
    let digest = pinned.rsplit_once('@').expect("digest").1;
    assert!(
        reported
            .image_id
            .as_deref()
            .is_some_and(|id| id.ends_with(digest)),
        "imageID {:?} names the pinned digest {digest}",
        reported.image_id
    );

    let url = cluster_ip_url(&ns, "everything").await;
    let mcp = rmcp_client::connect(&url).await;
    let tools = mcp
        .list_all_tools()
        .await
        .expect("tools/list through the Service");
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let echoed =
        rmcp_client::call_tool(&mcp, "echo", json!({ "message": "through kube-proxy" })).await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert!(
        format!("{echoed:?}").contains("through kube-proxy"),
        "{echoed:?}"
    );
    // The reference server answers invalid arguments with a result carrying isError: true.
    let failed = rmcp_client::call_tool(&mcp, "echo", json!({})).await;
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    mcp.cancel().await.expect("client closes");

    // Issue 39, item 10: from outside the pod (this host, on the pod network) the diagnostics
    // need the operator's token, which the operator has (ToolsDiscovered came from /tools);
    // the scrape and probe endpoints stay open.
    for (path, token, expected) in [
        ("/tools", None, 401),
        ("/upstream", None, 401),
        ("/tools", Some("not-the-token"), 401),
        ("/metrics", None, 200),
        ("/readyz", None, 200),
    ] {
        assert_eq!(
            node::pod_status_code(&pod, 9090, path, token).await,
            Some(expected),
            "{path} with {token:?}"
        );
    }
    let metrics = metrics_of(&pod).await;
    assert_eq!(
        sample(&metrics, "berth_proxy_diagnostics_refusals_total"),
        3.0,
        "{metrics}"
    );
    let series = |outcome: &str| {
        format!("berth_proxy_tool_calls_total{{outcome=\"{outcome}\",tool=\"echo\"}}")
    };
    assert_eq!(sample(&metrics, &series("ok")), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, &series("tool_error")), 1.0, "{metrics}");
    // Audit events on the proxy container's stdout, as the kubelet logged that stream: one per
    // call, naming the McpUpstream (the kubelet expanded `$(BERTH_NAMESPACE)/everything`).
    let mcp_upstream = format!("{}/everything", ns.name);
    wait_for(
        "two audit events on the proxy's stdout",
        READY_DEADLINE,
        || {
            let pod = pod.clone();
            let mcp_upstream = mcp_upstream.clone();
            async move {
                let events: Vec<Value> = node::container_stdout(&pod, "proxy")
                    .iter()
                    .filter_map(|line| serde_json::from_str(line).ok())
                    .filter(|event: &Value| event["event"] == "tools/call")
                    .collect();
                let outcomes: Vec<_> = events
                    .iter()
                    .filter(|e| e["mcpupstream"] == mcp_upstream.as_str() && e["tool"] == "echo")
                    .map(|e| e["outcome"].as_str().unwrap_or_default().to_owned())
                    .collect();
                (outcomes == ["ok", "tool_error"]).then_some(())
            }
        },
    )
    .await;

    // Deleting the McpUpstream removes every object and the pod.
    upstreams
        .delete("everything", &DeleteParams::foreground())
        .await
        .expect("delete");
    let (deployments, services, maps, pods) = (
        ns.api::<Deployment>(),
        ns.api::<Service>(),
        ns.api::<ConfigMap>(),
        ns.api::<Pod>(),
    );
    wait_for("every object and pod to be gone", READY_DEADLINE, || {
        let (d, s, c, p) = (
            deployments.clone(),
            services.clone(),
            maps.clone(),
            pods.clone(),
        );
        async move {
            let labels = ListParams::default().labels("app.kubernetes.io/instance=everything");
            let left = d.list(&labels).await.ok()?.items.len()
                + s.list(&labels).await.ok()?.items.len()
                + c.list(&labels).await.ok()?.items.len()
                + p.list(&labels).await.ok()?.items.len();
            (left == 0).then_some(())
        }
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn stdio_upstream_pod_runs_the_stdio_host_in_the_servers_own_image() {
    node::chart_installed().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "pods-stdio").await;
    let upstream: McpUpstream = serde_json::from_value(json!({
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "McpUpstream",
        "metadata": { "name": "time" },
        "spec": {
            "upstream": {
                "image": node::pinned("berth.local/mcp-server-time:test"),
                "transport": "Stdio",
                "command": ["python3", "-m", "mcp_server_time"],
                "args": ["--local-timezone", "UTC"],
                // Another user than the pod's 65532; the proxy runs as 65533, the one user the
                // stdio host serves (issue 40, item 7).
                "securityContext": { "runAsUser": 1000, "runAsGroup": 1000 },
            },
            "session": { "maxSessions": 4 },
        },
    }))
    .expect("McpUpstream");
    create(&ns, &upstream).await;
    let ready = [
        ("Ready", "True"),
        ("UpstreamReady", "True"),
        ("ToolsDiscovered", "True"),
    ];
    eventually_conditions(&ns.api(), "time", &ready, READY_DEADLINE).await;

    let pod = eventually_pod(&ns, "time", READY_DEADLINE).await;
    assert!(all_running_and_ready(&pod), "{:?}", pod.status);
    let install = node::all_statuses(&pod)
        .find(|s| s.name == "berth-install")
        .and_then(|s| s.state.clone()?.terminated)
        .expect("copy-self ran to completion");
    assert_eq!(install.exit_code, 0, "{install:?}");

    let url = cluster_ip_url(&ns, "time").await;
    let mcp = rmcp_client::connect(&url).await;
    let now = rmcp_client::call_tool(&mcp, "get_current_time", json!({ "timezone": "UTC" })).await;
    assert_ne!(now.is_error, Some(true), "{now:?}");
    assert!(format!("{now:?}").contains("UTC"), "{now:?}");
    mcp.cancel().await.expect("client closes");
    let metrics = metrics_of(&pod).await;
    let ok = r#"berth_proxy_tool_calls_total{outcome="ok",tool="get_current_time"}"#;
    assert_eq!(sample(&metrics, ok), 1.0, "{metrics}");
    ns.delete().await;
}

#[tokio::test]
async fn upstream_killed_in_the_pod_is_restarted_by_the_kubelet_and_calls_recover() {
    node::chart_installed().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "pods-kill").await;
    let upstreams = ns.api::<McpUpstream>();
    create(&ns, &everything("victim")).await;
    let ready = [("Ready", "True"), ("UpstreamReady", "True")];
    eventually_conditions(&upstreams, "victim", &ready, READY_DEADLINE).await;
    let pod = eventually_pod(&ns, "victim", READY_DEADLINE).await;

    let killed_at = k8s_openapi::jiff::Timestamp::now();
    node::kill_container(&pod, "upstream").await;
    // The outage shows: the sidecar is not started again until its startup probe passes, so the
    // pod is not ready, and the operator reports it.
    eventually_conditions(
        &upstreams,
        "victim",
        &[("UpstreamReady", "False")],
        STATUS_DEADLINE,
    )
    .await;
    let pods = ns.api::<Pod>();
    let name = pod.name_any();
    let restarted = wait_for(
        "the kubelet to restart the upstream sidecar",
        READY_DEADLINE,
        || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                let pod = pods.get(&name).await.ok()?;
                (node::restarts(&pod, "upstream") >= 1 && all_running_and_ready(&pod))
                    .then_some(pod)
            }
        },
    )
    .await;
    assert_eq!(
        node::restarts(&restarted, "proxy"),
        0,
        "the proxy itself never restarts"
    );
    eventually_conditions(&upstreams, "victim", &ready, STATUS_DEADLINE).await;

    let mcp = rmcp_client::connect(&cluster_ip_url(&ns, "victim").await).await;
    let echoed =
        rmcp_client::call_tool(&mcp, "echo", json!({ "message": "after the crash" })).await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    mcp.cancel().await.expect("client closes");

    // Both transitions are on record as Events published after the kill.
    let events = ns.api::<Event>();
    let reasons = wait_for(
        "Events of the outage and the recovery",
        STATUS_DEADLINE,
        || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                let reasons: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("victim")
                    })
                    .filter(|e| last_seen(e).is_some_and(|t| t >= killed_at))
                    .filter_map(|e| e.reason.clone())
                    .collect();
                let both = ["PodsNotReady", "PodsReady"]
                    .iter()
                    .all(|r| reasons.iter().any(|seen| seen == r));
                both.then_some(reasons)
            }
        },
    )
    .await;
    eprintln!("events after the kill: {reasons:?}");
    ns.delete().await;
}

/// Rolling update under load, nothing lost (issue 11): two replicas behind their Service, a
/// client calling continuously while a spec change rolls both pods. Each old pod drains
/// (`timeouts.drain`): not ready at once, still serving while kube-proxy drops it, then its
/// in-flight calls finish; the client's session is adopted by the other replicas (signed
/// session ids, field case BR-35).
#[tokio::test]
async fn rolling_update_under_load_loses_no_call() {
    node::chart_installed().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "pods-roll").await;
    let upstreams = ns.api::<McpUpstream>();
    let mut upstream = everything("rolling");
    upstream.spec.replicas = 2;
    upstream.spec.pod_disruption_budget =
        Some(serde_json::from_value(json!({ "minAvailable": 1 })).expect("budget"));
    create(&ns, &upstream).await;
    let ready = [("Ready", "True"), ("UpstreamReady", "True")];
    eventually_conditions(&upstreams, "rolling", &ready, READY_DEADLINE).await;
    let url = cluster_ip_url(&ns, "rolling").await;

    let stop = tokio_util::sync::CancellationToken::new();
    let load = tokio::spawn(call_until(url, stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let patch = json!({ "spec": { "upstream": { "env": [
        { "name": "PORT", "value": "3001" }, { "name": "ROLL", "value": "1" },
    ] } } });
    upstreams
        .patch(
            "rolling",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("spec change");
    let deployments = ns.api::<Deployment>();
    wait_for(
        "the rollout to replace both pods",
        READY_DEADLINE * 2,
        || {
            let deployments = deployments.clone();
            async move {
                let deployment = deployments.get("rolling").await.ok()?;
                let status = deployment.status?;
                let done = status.observed_generation >= deployment.metadata.generation
                    && status.updated_replicas == Some(2)
                    && status.ready_replicas == Some(2)
                    && status.replicas == Some(2);
                done.then_some(())
            }
        },
    )
    .await;
    // Let the last old pod's drain end with calls still flowing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.cancel();
    let tally = load.await.expect("load task");
    eprintln!(
        "rolling update: {} calls made, {} failed, worst call {:?}",
        tally.made,
        tally.failed.len(),
        tally.worst
    );
    assert!(tally.made >= 20, "the load ran: {tally:?}");
    assert!(
        tally.failed.is_empty(),
        "calls failed during the roll: {tally:?}"
    );
    ns.delete().await;
}

/// When an Event was last observed: its series' last observation, else its creation.
fn last_seen(event: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or(event.event_time.as_ref().map(|t| t.0))
}

#[derive(Debug, Default)]
struct Tally {
    made: usize,
    failed: Vec<String>,
    worst: Duration,
}

/// Sequential `echo` calls on one rmcp session through `url` until `stop` fires.
async fn call_until(url: String, stop: tokio_util::sync::CancellationToken) -> Tally {
    let mcp = rmcp_client::connect(&url).await;
    let mut tally = Tally::default();
    while !stop.is_cancelled() {
        let arguments = json!({ "message": format!("call {}", tally.made) });
        let started = Instant::now();
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        let params = rmcp::model::CallToolRequestParams::new("echo").with_arguments(arguments);
        let outcome = tokio::time::timeout(Duration::from_secs(30), mcp.call_tool(params)).await;
        tally.made += 1;
        tally.worst = tally.worst.max(started.elapsed());
        match outcome {
            Ok(Ok(result)) if result.is_error != Some(true) => {}
            other => tally.failed.push(format!("call {}: {other:?}", tally.made)),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = mcp.cancel().await;
    tally
}
