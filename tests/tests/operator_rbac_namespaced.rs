//! The namespaced install mode (issue 40, item 6), against the real API server: the chart
//! rendered with `watchNamespaces` grants the operator's ServiceAccount a Role in each listed
//! namespace and nothing cluster-wide (`kubectl auth can-i` says no outside them), and the
//! operator, running with exactly those rights as that ServiceAccount and watching only those
//! namespaces, reconciles McpUpstreams in each to their children and leaves one in an unwatched
//! namespace alone.
//!
//! Needs `KUBECONFIG` (tests/controlplane/up.sh) plus helm (tests/chart/build.sh) and kubectl
//! (tests/controlplane/build.sh), both cached after their first build; `make test` builds them.

use std::time::Duration;

use berth_crds::McpUpstream;
use berth_operator::Settings;
use berth_tests::cluster::operator::{Operator, settings};
use berth_tests::cluster::rbac::{
    delete_cluster_objects, named, render_rbac_with, rules, run, service_account_config, tool_dir,
};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::PostParams;

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
const DEADLINE: Duration = Duration::from_secs(90);

fn upstream(name: &str) -> McpUpstream {
    let mut upstream: McpUpstream = serde_yaml::from_str(EVERYTHING).expect("example parses");
    upstream.metadata.name = Some(name.to_owned());
    upstream
}

#[tokio::test]
async fn operator_with_watch_namespaces_reconciles_only_there_and_holds_no_cluster_rights() {
    let client = client().await;
    ensure_crd(&client).await;
    let helm = tool_dir("tests/chart/build.sh").join("helm");
    let kubectl = tool_dir("tests/controlplane/build.sh").join("kubectl");
    let system = TestNamespace::create(&client, "op-ns-sys").await;
    let first = TestNamespace::create(&client, "op-ns-a").await;
    let second = TestNamespace::create(&client, "op-ns-b").await;
    let outside = TestNamespace::create(&client, "op-ns-out").await;
    let release = format!("n{}", &system.name[system.name.len() - 8..]);
    let watch = format!("watchNamespaces={{{},{}}}", first.name, second.name);
    let (yaml, documents) = render_rbac_with(&helm, &release, &system.name, &["--set", &watch]);
    assert!(
        documents
            .iter()
            .all(|d| d["kind"] != "ClusterRole" && d["kind"] != "ClusterRoleBinding"),
        "no cluster-wide rights in namespaced mode: {yaml}"
    );
    let roles: Vec<&serde_json::Value> = documents.iter().filter(|d| d["kind"] == "Role").collect();
    let role_namespaces: Vec<&str> = roles
        .iter()
        .filter(|r| {
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| !n.ends_with("-leader-election"))
        })
        .filter_map(|r| r["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(role_namespaces, [&first.name, &second.name]);
    let (ok, out) = run(
        &kubectl,
        &["apply", "--server-side", "-f", "-"],
        Some(&yaml),
    );
    assert!(ok, "chart RBAC applied: {out}");
    let account = named(&documents, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .expect("ServiceAccount name")
        .to_owned();
    let as_user = format!("--as=system:serviceaccount:{}:{account}", system.name);
    let can = |args: &[&str]| {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        full.push(&as_user);
        run(&kubectl, &full, None).0
    };

    // Every rule holds in each watched namespace...
    let granted = rules(roles[0]);
    assert!(granted.len() > 10, "{granted:?}");
    for namespace in [&first.name, &second.name] {
        for (verb, resource, sub, group) in &granted {
            let target = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let sub_flag = sub.as_ref().map(|s| format!("--subresource={s}"));
            let mut args = vec![verb.as_str(), target.as_str(), "-n", namespace.as_str()];
            if let Some(flag) = &sub_flag {
                args.push(flag);
            }
            assert!(can(&args), "cannot {verb} {target} {sub:?} in {namespace}");
        }
    }
    // ...and none outside them, nor cluster-wide.
    for (verb, target) in [
        ("list", "mcpupstreams.berth.dev"),
        ("create", "secrets"),
        ("create", "deployments.apps"),
        ("patch", "services"),
        ("list", "pods"),
    ] {
        assert!(
            !can(&[verb, target, "-n", &outside.name]),
            "can {verb} {target} in the unwatched namespace"
        );
        assert!(
            !can(&[verb, target, "--all-namespaces"]),
            "can {verb} {target} cluster-wide"
        );
    }
    assert!(
        !can(&["get", "secrets", "-n", &first.name]),
        "reads Secrets"
    );

    let config = service_account_config(&client, &system.name, &account).await;
    let operator = Operator::start_with(
        "berth-operator-namespaced",
        Settings {
            namespaces: vec![first.name.clone(), second.name.clone()],
            ..settings(&first.name, Duration::from_secs(10))
        },
        Some(config),
    );
    for namespace in [&first, &second, &outside] {
        namespace
            .api::<McpUpstream>()
            .create(&PostParams::default(), &upstream("everything"))
            .await
            .expect("McpUpstream accepted");
    }
    for namespace in [&first, &second] {
        let deployments = namespace.api::<Deployment>();
        wait_for(
            "the Deployment in a watched namespace",
            DEADLINE,
            || async { deployments.get_opt("everything").await.ok().flatten() },
        )
        .await;
        let upstreams = namespace.api::<McpUpstream>();
        wait_for("status in a watched namespace", DEADLINE, || async {
            upstreams
                .get("everything")
                .await
                .ok()?
                .status?
                .observed_generation
        })
        .await;
    }
    // Both watched namespaces are done; a few resyncs later the unwatched one is untouched.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        outside
            .api::<McpUpstream>()
            .get("everything")
            .await
            .expect("read")
            .status
            .is_none(),
        "the unwatched McpUpstream has no status"
    );
    assert!(
        outside
            .api::<Deployment>()
            .get_opt("everything")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        outside
            .api::<Service>()
            .get_opt("everything")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        outside
            .api::<ConfigMap>()
            .get_opt("everything-proxy")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        outside
            .api::<Secret>()
            .get_opt("everything-session-key")
            .await
            .expect("read")
            .is_none()
    );
    let metrics = operator.metrics.render();
    assert!(
        metrics.contains("berth_operator_reconciliations_total{result=\"error\"} 0"),
        "no request was refused: {metrics}"
    );

    operator.stop().await.expect("operator stops");
    delete_cluster_objects(&kubectl, &documents);
    for namespace in [first, second, outside, system] {
        namespace.delete().await;
    }
}
