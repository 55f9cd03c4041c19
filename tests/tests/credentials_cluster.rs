//! Upstream credentials and tool policy in the McpUpstream API, against the real control plane:
//! the API server rejects a header without a value source (naming the field), and the operator
//! hands a Secret-backed header to the proxy as an environment variable from the Secret, never
//! through the ConfigMap.

use std::time::Duration;

use berth_crds::{HeaderValueSource, McpUpstream, ProxyConfig, UpstreamHeader};
use berth_tests::cluster::{TestNamespace, client, rejected_naming, shared_operator};
use berth_tests::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, SecretKeySelector};
use kube::api::PostParams;

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");

fn everything() -> McpUpstream {
    serde_yaml::from_str(EVERYTHING).expect("examples/everything.yaml parses")
}

fn header(name: &str, value: Option<&str>, secret: Option<(&str, &str)>) -> UpstreamHeader {
    UpstreamHeader {
        name: name.to_owned(),
        value: value.map(str::to_owned),
        value_from: secret.map(|(secret, key)| HeaderValueSource {
            secret_key_ref: SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: None,
            },
        }),
    }
}

#[tokio::test]
async fn mcp_upstream_bad_headers_and_tool_policy_are_rejected_naming_the_field() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "cred-bad").await;
    let mut no_source = everything();
    no_source.spec.upstream.headers = vec![header("Authorization", None, None)];
    rejected_naming(&ns, &no_source, "spec.upstream.headers").await;
    let mut both = everything();
    both.spec.upstream.headers = vec![header("X-Key", Some("v"), Some(("s", "k")))];
    rejected_naming(&ns, &both, "spec.upstream.headers").await;
    let mut reserved = everything();
    reserved.spec.upstream.headers = vec![header("Mcp-Session-Id", Some("x"), None)];
    rejected_naming(&ns, &reserved, "spec.upstream.headers").await;
    let mut empty_allow = everything();
    empty_allow.spec.tools.allow = Some(Vec::new());
    rejected_naming(&ns, &empty_allow, "spec.tools.allow").await;
    ns.delete().await;
}

#[tokio::test]
async fn mcp_upstream_secret_header_reaches_the_proxy_as_env_not_configmap() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "cred-env").await;
    let mut upstream = everything();
    upstream.spec.upstream.headers = vec![
        header("Authorization", None, Some(("upstream-token", "token"))),
        header("X-Team", Some("search"), None),
    ];
    upstream.spec.tools.allow = Some(vec!["echo".to_owned()]);
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream)
        .await
        .expect("accepted");
    let deployments = ns.api::<Deployment>();
    let deployment = wait_for("the Deployment", Duration::from_secs(30), || {
        let api = deployments.clone();
        async move { api.get_opt("everything").await.ok().flatten() }
    })
    .await;
    let pod = deployment.spec.template.spec.expect("pod spec");
    let proxy = pod
        .containers
        .iter()
        .find(|c| c.name == "proxy")
        .expect("proxy container");
    let env = proxy.env.clone().unwrap_or_default();
    // The header's variable, besides the session key every proxy gets (BR-35).
    let header: Vec<_> = env
        .iter()
        .filter(|e| e.name.starts_with("BERTH_UPSTREAM_HEADER_"))
        .collect();
    assert_eq!(header.len(), 1, "{env:?}");
    let selector = header[0]
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("from the Secret");
    assert_eq!(
        (selector.name.as_str(), selector.key.as_str()),
        ("upstream-token", "token")
    );
    assert!(
        proxy
            .args
            .iter()
            .flatten()
            .all(|a| !a.contains("upstream-token"))
    );
    let config_maps = ns.api::<ConfigMap>();
    let config_map = config_maps
        .get("everything-proxy")
        .await
        .expect("ConfigMap");
    let text = config_map
        .data
        .and_then(|d| d.get(berth_crds::PROXY_CONFIG_KEY).cloned())
        .expect("proxy config");
    let config = ProxyConfig::from_yaml(&text).expect("parses");
    let auth = &config.upstream.headers[0];
    assert_eq!(auth.value, None);
    assert_eq!(auth.value_env.as_deref(), Some(header[0].name.as_str()));
    assert_eq!(config.upstream.headers[1].value.as_deref(), Some("search"));
    assert_eq!(config.tools.allow, Some(vec!["echo".to_owned()]));
    ns.delete().await;
}
