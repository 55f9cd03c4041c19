//! RBAC proven (field case BR-32; issue 40, item 6): the operator runs with exactly the chart's
//! ClusterRole and admission policy, rendered by the real `helm`, bound to a ServiceAccount, and
//! authenticates with that ServiceAccount's token (TokenRequest API) against the real API
//! server. It goes through create, update, drift repair and delete without a single refused
//! request and without reading a Secret (no `get` on Secrets: the session-key Secret's uid is
//! recorded in status); every rule of the ClusterRole is checked with
//! `kubectl auth can-i --as=system:serviceaccount:...`; the admission policy lets the
//! ServiceAccount create only session-key Secrets, never a service-account token; and an
//! operator whose role lacks a verb reports `Ready=False` with reason `ApplyForbidden`, the API
//! server's message and a Warning Event, never a silent Pending. The namespaced install mode is
//! proven in `operator_rbac_namespaced.rs`.
//!
//! Needs `KUBECONFIG` (tests/controlplane/up.sh) plus helm (tests/chart/build.sh) and kubectl
//! (tests/controlplane/build.sh), both cached after their first build; `make test` builds them.

use std::time::Duration;

use berth_crds::McpUpstream;
use berth_tests::cluster::operator::{Operator, settings};
use berth_tests::cluster::rbac::{
    delete_cluster_objects, named, render_rbac, rules, run, service_account_config, tool_dir,
};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::{repo_root, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
const DEADLINE: Duration = Duration::from_secs(90);

fn upstream(name: &str) -> McpUpstream {
    let mut upstream: McpUpstream = serde_yaml::from_str(EVERYTHING).expect("example parses");
    upstream.metadata.name = Some(name.to_owned());
    upstream
}

async fn eventually_exists<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to exist"), DEADLINE, || async {
        api.get_opt(name).await.ok().flatten()
    })
    .await;
}

async fn eventually_gone<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be gone"), DEADLINE, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn br_32_operator_with_exactly_the_chart_cluster_role_creates_updates_repairs_and_deletes() {
    let client = client().await;
    ensure_crd(&client).await;
    let helm = tool_dir("tests/chart/build.sh").join("helm");
    let kubectl = tool_dir("tests/controlplane/build.sh").join("kubectl");
    let system = TestNamespace::create(&client, "op-rbac-sys").await;
    let team = TestNamespace::create(&client, "op-rbac").await;
    let release = format!("r{}", &system.name[system.name.len() - 8..]);
    let (yaml, documents) = render_rbac(&helm, &release, &system.name);
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
    let user = format!("system:serviceaccount:{}:{account}", system.name);

    // Every rule the ClusterRole grants holds for the ServiceAccount.
    let role = named(&documents, "ClusterRole");
    let granted = rules(role);
    assert!(granted.len() > 10, "{granted:?}");
    for (verb, resource, sub, group) in &granted {
        let target = if group.is_empty() {
            resource.clone()
        } else {
            format!("{resource}.{group}")
        };
        let mut args = vec![
            "auth",
            "can-i",
            verb.as_str(),
            target.as_str(),
            "-n",
            team.name.as_str(),
        ];
        let as_user = format!("--as={user}");
        args.push(&as_user);
        let sub_flag = sub.as_ref().map(|s| format!("--subresource={s}"));
        if let Some(flag) = &sub_flag {
            args.push(flag);
        }
        let (ok, out) = run(&kubectl, &args, None);
        assert!(ok, "{user} cannot {verb} {target} {sub:?}: {out}");
    }
    // And nothing the operator never does.
    for (verb, target) in [
        ("delete", "deployments.apps"),
        // It creates only its session-key Secrets; it never reads, lists or changes Secrets
        // (issue 40, item 6: no cluster-wide Secret get).
        ("get", "secrets"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("update", "secrets"),
        ("create", "pods"),
    ] {
        let as_user = format!("--as={user}");
        let (ok, _) = run(
            &kubectl,
            &["auth", "can-i", verb, target, "-n", &team.name, &as_user],
            None,
        );
        assert!(!ok, "{user} can {verb} {target}");
    }

    let config = service_account_config(&client, &system.name, &account).await;
    let operator = Operator::start_with(
        "berth-operator-rbac",
        settings(&team.name, Duration::from_secs(10)),
        Some(config),
    );

    // Create.
    let upstreams = team.api::<McpUpstream>();
    upstreams
        .create(&PostParams::default(), &upstream("everything"))
        .await
        .expect("McpUpstream accepted");
    let (config_maps, services, deployments) = (
        team.api::<ConfigMap>(),
        team.api::<Service>(),
        team.api::<Deployment>(),
    );
    eventually_exists(&config_maps, "everything-proxy").await;
    eventually_exists(&services, "everything").await;
    eventually_exists(&deployments, "everything").await;
    wait_for("status written as the ServiceAccount", DEADLINE, || async {
        let u = upstreams.get("everything").await.ok()?;
        u.status?.observed_generation
    })
    .await;
    // The session-key Secret was created (through the admission policy) without being read;
    // its uid is what the status records.
    let secret = team
        .api::<Secret>()
        .get("everything-session-key")
        .await
        .expect("the session-key Secret");
    let recorded = wait_for("status.sessionKeySecretUid", DEADLINE, || async {
        upstreams
            .get("everything")
            .await
            .ok()?
            .status?
            .session_key_secret_uid
    })
    .await;
    assert_eq!(Some(recorded), secret.uid());

    // Update: a spec edit reaches the rendered config.
    let edit = serde_json::json!({"spec": {"timeouts": {"call": "61s"}}});
    upstreams
        .patch("everything", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edited");
    wait_for("the edit in the ConfigMap", DEADLINE, || async {
        let cm = config_maps.get("everything-proxy").await.ok()?;
        cm.data?.values().any(|v| v.contains("61s")).then_some(())
    })
    .await;

    // Drift repair: a deleted ConfigMap is re-created.
    config_maps
        .delete("everything-proxy", &DeleteParams::default())
        .await
        .expect("ConfigMap deleted");
    wait_for("the ConfigMap re-created", DEADLINE, || async {
        let cm = config_maps
            .get_opt("everything-proxy")
            .await
            .ok()
            .flatten()?;
        cm.data?.values().any(|v| v.contains("61s")).then_some(())
    })
    .await;

    // Delete: the children go with it.
    upstreams
        .delete("everything", &DeleteParams::foreground())
        .await
        .expect("McpUpstream deleted");
    eventually_gone(&deployments, "everything").await;
    eventually_gone(&services, "everything").await;
    eventually_gone(&config_maps, "everything-proxy").await;

    let metrics = operator.metrics.render();
    assert!(operator.metrics.total_reconciliations() > 0, "{metrics}");
    assert!(
        metrics.contains("berth_operator_reconciliations_total{result=\"error\"} 0"),
        "no request was refused: {metrics}"
    );
    operator.stop().await.expect("operator stops");
    delete_cluster_objects(&kubectl, &documents);
    team.delete().await;
    system.delete().await;
}

#[tokio::test]
async fn br_32_operator_refused_by_rbac_reports_ready_false_with_api_message_and_warning() {
    let client = client().await;
    ensure_crd(&client).await;
    let helm = tool_dir("tests/chart/build.sh").join("helm");
    let kubectl = tool_dir("tests/controlplane/build.sh").join("kubectl");
    let system = TestNamespace::create(&client, "op-rbac-gap-sys").await;
    let team = TestNamespace::create(&client, "op-rbac-gap").await;
    let release = format!("g{}", &system.name[system.name.len() - 8..]);
    let (_, mut documents) = render_rbac(&helm, &release, &system.name);
    // The gap: the role may not create Deployments.
    for document in &mut documents {
        if document["kind"] == "ClusterRole" {
            for rule in document["rules"].as_array_mut().expect("rules") {
                if rule["apiGroups"][0] == "apps" {
                    rule["verbs"] = serde_json::json!(["get", "list", "watch", "patch"]);
                }
            }
        }
    }
    let yaml = documents
        .iter()
        .map(|d| serde_yaml::to_string(d).expect("yaml"))
        .collect::<Vec<_>>()
        .join("---\n");
    let (ok, out) = run(
        &kubectl,
        &["apply", "--server-side", "-f", "-"],
        Some(&yaml),
    );
    assert!(ok, "RBAC applied: {out}");
    let account = named(&documents, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .expect("ServiceAccount name")
        .to_owned();
    let config = service_account_config(&client, &system.name, &account).await;
    let operator = Operator::start_with(
        "berth-operator-rbac-gap",
        settings(&team.name, Duration::from_secs(10)),
        Some(config),
    );
    team.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream("everything"))
        .await
        .expect("McpUpstream accepted");

    let upstreams = team.api::<McpUpstream>();
    let ready = wait_for("Ready=False ApplyForbidden", DEADLINE, || async {
        let u = upstreams.get("everything").await.ok()?;
        u.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason == "ApplyForbidden")
    })
    .await;
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains("failed to apply Deployment everything"),
        "{ready:?}"
    );
    assert!(
        ready.message.contains("forbidden"),
        "the API server's message: {ready:?}"
    );
    let events = team.api::<Event>();
    let event = wait_for("a Warning Event ApplyForbidden", DEADLINE, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ApplyForbidden"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("forbidden")),
        "{event:?}"
    );

    operator.stop().await.expect("operator stops");
    delete_cluster_objects(&kubectl, &documents);
    team.delete().await;
    system.delete().await;
}

/// A Secret `name` of `type_` as the ServiceAccount would send it, owned (as controller) by the
/// McpUpstream `owner` when given.
fn secret(name: &str, type_: &str, annotations: Value, owner: Option<&McpUpstream>) -> Secret {
    let owner_references: Vec<Value> = owner
        .into_iter()
        .map(|owner| {
            serde_json::json!({
                "apiVersion": "berth.dev/v1alpha1", "kind": "McpUpstream",
                "name": owner.name_any(), "uid": owner.uid().expect("uid"),
                "controller": true,
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": annotations,
                     "ownerReferences": owner_references},
        "type": type_,
        "stringData": {"key": "x"},
    }))
    .expect("secret object")
}

#[tokio::test]
async fn operator_service_account_may_create_only_session_key_secrets_never_a_token() {
    let client = client().await;
    ensure_crd(&client).await;
    let helm = tool_dir("tests/chart/build.sh").join("helm");
    let kubectl = tool_dir("tests/controlplane/build.sh").join("kubectl");
    let system = TestNamespace::create(&client, "op-vap-sys").await;
    let team = TestNamespace::create(&client, "op-vap").await;
    let release = format!("v{}", &system.name[system.name.len() - 8..]);
    let (yaml, documents) = render_rbac(&helm, &release, &system.name);
    named(&documents, "ValidatingAdmissionPolicy");
    named(&documents, "ValidatingAdmissionPolicyBinding");
    let (ok, out) = run(
        &kubectl,
        &["apply", "--server-side", "-f", "-"],
        Some(&yaml),
    );
    assert!(ok, "chart RBAC and admission policy applied: {out}");
    let account = named(&documents, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .expect("ServiceAccount name")
        .to_owned();
    let config = service_account_config(&client, &system.name, &account).await;
    let as_operator = Client::try_from(config).expect("client");
    let secrets = kube::Api::<Secret>::namespaced(as_operator, &team.name);
    // A token for the namespace's default ServiceAccount: RBAC allows the create; the policy
    // must refuse it. It takes effect within seconds of its creation, so retry until it does
    // (a token Secret made before then is deleted at once).
    let token = secret(
        "minted-token",
        "kubernetes.io/service-account-token",
        serde_json::json!({"kubernetes.io/service-account.name": "default"}),
        None,
    );
    let refusal = wait_for("the token Secret refused", DEADLINE, || async {
        match secrets.create(&PostParams::default(), &token).await {
            Ok(_) => {
                let _ = team
                    .api::<Secret>()
                    .delete("minted-token", &DeleteParams::default())
                    .await;
                None
            }
            Err(kube::Error::Api(status)) => Some(status),
            Err(_) => None,
        }
    })
    .await;
    assert!(
        refusal.message.contains(
            "the Berth operator may create only Opaque Secrets, not kubernetes.io/service-account-token"
        ),
        "{refusal:?}"
    );
    assert!(
        team.api::<Secret>()
            .get_opt("minted-token")
            .await
            .expect("read")
            .is_none()
    );

    // Opaque, but not a session key of an McpUpstream it controls: refused too.
    let upstreams = team.api::<McpUpstream>();
    let owner = upstreams
        .create(&PostParams::default(), &upstream("owner"))
        .await
        .expect("McpUpstream accepted");
    let none = serde_json::json!({});
    for (name, owner, why) in [
        ("owner-session-key", None, "no owner"),
        ("other", Some(&owner), "another name"),
        (
            "other-session-key",
            Some(&owner),
            "another McpUpstream's name",
        ),
    ] {
        let refused = secrets
            .create(
                &PostParams::default(),
                &secret(name, "Opaque", none.clone(), owner),
            )
            .await
            .expect_err(why);
        assert!(
            refused
                .to_string()
                .contains("the Berth operator may create only <McpUpstream>-session-key Secrets"),
            "{why}: {refused}"
        );
    }
    // What the operator creates passes.
    secrets
        .create(
            &PostParams::default(),
            &secret("owner-session-key", "Opaque", none.clone(), Some(&owner)),
        )
        .await
        .expect("a session-key Secret is allowed");
    // The policy binds only the operator: the admin's token Secret is not its business.
    team.api::<Secret>()
        .create(&PostParams::default(), &token)
        .await
        .expect("the admin is not restricted by the operator's policy");

    delete_cluster_objects(&kubectl, &documents);
    team.delete().await;
    system.delete().await;
}

#[tokio::test]
async fn image_registry_policy_example_refuses_an_mcp_upstream_from_another_registry() {
    let client = client().await;
    ensure_crd(&client).await;
    let kubectl = tool_dir("tests/controlplane/build.sh").join("kubectl");
    let team = TestNamespace::create(&client, "op-image-policy").await;
    let example = std::fs::read_to_string(repo_root().join("examples/image-registry-policy.yaml"))
        .expect("examples/image-registry-policy.yaml");
    let mut documents: Vec<Value> = example
        .split("\n---")
        .filter_map(|doc| serde_yaml::from_str::<Value>(doc).ok())
        .filter(Value::is_object)
        .collect();
    assert_eq!(documents.len(), 2, "a policy and its binding");
    // Other tests of this binary create McpUpstreams from docker.io at the same time: bind the
    // example to this test's namespace only, under names of its own.
    let suffix = &team.name[team.name.len() - 8..];
    let policy_name = format!("berth-upstream-image-registry-{suffix}");
    for document in &mut documents {
        document["metadata"]["name"] = Value::from(policy_name.clone());
        if document["kind"] == "ValidatingAdmissionPolicyBinding" {
            document["spec"]["policyName"] = Value::from(policy_name.clone());
            document["spec"]["matchResources"] = serde_json::json!({"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": team.name}}});
        }
    }
    let yaml = documents
        .iter()
        .map(|d| serde_yaml::to_string(d).expect("yaml"))
        .collect::<Vec<_>>()
        .join("---\n");
    let (ok, out) = run(
        &kubectl,
        &["apply", "--server-side", "-f", "-"],
        Some(&yaml),
    );
    assert!(ok, "the API server accepts the example policy: {out}");

    let upstreams = team.api::<McpUpstream>();
    let elsewhere = upstream("elsewhere");
    let refusal = wait_for("an image from docker.io refused", DEADLINE, || async {
        match upstreams.create(&PostParams::default(), &elsewhere).await {
            Ok(_) => {
                let _ = upstreams
                    .delete("elsewhere", &DeleteParams::default())
                    .await;
                None
            }
            Err(kube::Error::Api(status)) => Some(status),
            Err(_) => None,
        }
    })
    .await;
    assert!(
        refusal.message.contains(
            "spec.upstream.image docker.io/mcp/everything@sha256:3f1c6a1bd5bd4d0f8a5a2b8c63b2c4e7a9d0e1f2a3b4c5d6e7f8091a2b3c4d5e is not from the allowed registry registry.example.com/mcp/"
        ),
        "{refusal:?}"
    );
    let mut allowed = upstream("allowed");
    allowed.spec.upstream.image = format!(
        "registry.example.com/mcp/everything@sha256:{}",
        "0".repeat(64)
    );
    upstreams
        .create(&PostParams::default(), &allowed)
        .await
        .expect("an image from the allowed registry is accepted");
    // The prefix ends in '/': a look-alike host is refused.
    let mut look_alike = upstream("look-alike");
    look_alike.spec.upstream.image = format!(
        "registry.example.com.evil.io/mcp/everything@sha256:{}",
        "0".repeat(64)
    );
    upstreams
        .create(&PostParams::default(), &look_alike)
        .await
        .expect_err("a look-alike registry is refused");

    delete_cluster_objects(&kubectl, &documents);
    team.delete().await;
}
