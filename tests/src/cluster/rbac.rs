//! Helpers of the RBAC tests (issue 40, item 6; field case BR-32): the chart's RBAC, admission
//! policy and ServiceAccount rendered by the real `helm`, a client that authenticates as that
//! ServiceAccount only, `kubectl` runs, and the rules a Role or ClusterRole grants.
//!
//! Not responsible for: building helm and kubectl (tests/chart/build.sh,
//! tests/controlplane/build.sh, run here and cached after their first build).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Client, Config};
use serde_json::Value;

use crate::{repo_root, wait_for};

/// Deadline for a ServiceAccount token.
const DEADLINE: Duration = Duration::from_secs(90);

/// The last stdout line of `script` (the cached tool directory its build prints).
pub fn tool_dir(script: &str) -> PathBuf {
    let output = Command::new(repo_root().join(script))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("run {script}: {err}"));
    assert!(output.status.success(), "{script} failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(stdout.lines().last().expect("a tool directory").trim())
}

pub fn run(program: &PathBuf, args: &[&str], stdin: Option<&str>) -> (bool, String) {
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

/// The chart's RBAC, admission policy and ServiceAccount for `release` in `namespace`, as
/// `helm template` renders them with default values: the YAML and its documents.
pub fn render_rbac(helm: &PathBuf, release: &str, namespace: &str) -> (String, Vec<Value>) {
    render_rbac_with(helm, release, namespace, &[])
}

/// [`render_rbac`] with extra `helm template` arguments (e.g. `--set`).
pub fn render_rbac_with(
    helm: &PathBuf,
    release: &str,
    namespace: &str,
    extra: &[&str],
) -> (String, Vec<Value>) {
    let chart = repo_root().join("charts/berth");
    let mut args = vec![
        "template",
        release,
        chart.to_str().expect("utf-8 path"),
        "--namespace",
        namespace,
        "--show-only",
        "templates/rbac.yaml",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/admission-policy.yaml",
    ];
    args.extend_from_slice(extra);
    let (ok, yaml) = run(helm, &args, None);
    assert!(ok, "helm template failed: {yaml}");
    let documents = yaml
        .split("\n---")
        .filter_map(|doc| serde_yaml::from_str::<Value>(doc).ok())
        .filter(|doc| doc.is_object())
        .collect();
    (yaml, documents)
}

pub fn named<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("the chart renders a {kind}"))
}

/// A client config that authenticates as ServiceAccount `name` in `namespace` with a token from
/// the TokenRequest API, and nothing else (no client certificate).
pub async fn service_account_config(client: &Client, namespace: &str, name: &str) -> Config {
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
pub fn rules(cluster_role: &Value) -> Vec<(String, String, Option<String>, String)> {
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

/// Deletes the cluster-scoped objects `yaml` created.
pub fn delete_cluster_objects(kubectl: &PathBuf, documents: &[Value]) {
    for kind in [
        "ClusterRoleBinding",
        "ClusterRole",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        for document in documents.iter().filter(|d| d["kind"] == kind) {
            let name = document["metadata"]["name"].as_str().expect("name");
            let _ = run(
                kubectl,
                &["delete", &kind.to_lowercase(), name, "--ignore-not-found"],
                None,
            );
        }
    }
}
