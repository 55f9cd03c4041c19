//! RBAC proven (field case BR-32): the operator runs with exactly the chart's ClusterRole,
//! rendered by the real `helm`, bound to a ServiceAccount, and authenticates with that
//! ServiceAccount's token (TokenRequest API) against the real API server. It goes through
//! create, update, drift repair and delete without a single refused request; every rule of the
//! ClusterRole is checked with `kubectl auth can-i --as=system:serviceaccount:...`; and an
//! operator whose role lacks a verb reports `Ready=False` with reason `ApplyForbidden`, the API
//! server's message and a Warning Event, never a silent Pending.
//!
//! Needs `KUBECONFIG` (tests/controlplane/up.sh) plus helm (tests/chart/build.sh) and kubectl
//! (tests/controlplane/build.sh), both cached after their first build; `make test` builds them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use berth_crds::McpUpstream;
use berth_tests::cluster::operator::{Operator, settings};
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use berth_tests::{repo_root, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::Value;

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
const DEADLINE: Duration = Duration::from_secs(90);

/// The last stdout line of `script` (the cached tool directory its build prints).
fn tool_dir(script: &str) -> PathBuf {
    let output = Command::new(repo_root().join(script))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("run {script}: {err}"));
    assert!(output.status.success(), "{script} failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(stdout.lines().last().expect("a tool directory").trim())
}

fn run(program: &PathBuf, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {}: {err}", program.display()));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    let output = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The chart's RBAC and ServiceAccount for `release` in `namespace`, as `helm template`
/// renders them with default values: the YAML and its documents.
fn render_rbac(helm: &PathBuf, release: &str, namespace: &str) -> (String, Vec<Value>) {
    let chart = repo_root().join("charts/berth");
    let (ok, yaml) = run(
        helm,
        &[
            "template",
            release,
            chart.to_str().expect("utf-8 path"),
            "--namespace",
            namespace,
            "--show-only",
            "templates/rbac.yaml",
            "--show-only",
            "templates/serviceaccount.yaml",
        ],
        None,
    );
    assert!(ok, "helm template failed: {yaml}");
    let documents = yaml
        .split("\n---")
        .filter_map(|doc| serde_yaml::from_str::<Value>(doc).ok())
        .filter(|doc| doc.is_object())
        .collect();
    (yaml, documents)
}

fn named<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("the chart renders a {kind}"))
}

/// A client config that authenticates as ServiceAccount `name` in `namespace` with a token from
/// the TokenRequest API, and nothing else (no client certificate).
async fn service_account_config(client: &Client, namespace: &str, name: &str) -> Config {
    let accounts = kube::Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = wait_for("a token for the ServiceAccount", DEADLINE, || {
        let accounts = accounts.clone();
        let request = request.clone();
        async move {
            accounts
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .ok()?
                .status?
                .token
        }
    })
    .await;
    let token_file = std::env::temp_dir().join(format!("berth-sa-token-{namespace}-{name}"));
    std::fs::write(&token_file, token).expect("token written");
    let mut config = Config::infer().await.expect("kubeconfig");
    config.auth_info = kube::config::AuthInfo {
        token_file: Some(token_file.to_string_lossy().into_owned()),
        ..kube::config::AuthInfo::default()
    };
    config
}

/// Every `(verb, resource, subresource, group)` the ClusterRole grants.
fn rules(cluster_role: &Value) -> Vec<(String, String, Option<String>, String)> {
    let mut out = Vec::new();
    for rule in cluster_role["rules"].as_array().expect("rules") {
        let strings = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                let (resource, sub) = match resource.split_once('/') {
                    Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                    None => (resource, None),
                };
                for verb in strings("verbs") {
                    out.push((verb, resource.clone(), sub.clone(), group.clone()));
                }
            }
        }
    }
    out
}

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

/// Deletes the cluster-scoped objects `yaml` created.
fn delete_cluster_objects(kubectl: &PathBuf, documents: &[Value]) {
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        let name = named(documents, kind)["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let _ = run(
            kubectl,
            &["delete", &kind.to_lowercase(), &name, "--ignore-not-found"],
            None,
        );
    }
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
        // It gets and creates only its session-key Secrets; it never lists or changes Secrets.
        ("list", "secrets"),
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
