//! The production McpUpstream API (issue 5 "API") against the real local control plane: every
//! new field rendered into the children (CEL rejections: `operator_api_cel.rs`), pods admitted under
//! the "restricted" Pod Security Standard, the session-key Secret (field case BR-35), rolls on
//! spec edits only, repair of a deleted ConfigMap, and removal of everything on deletion.
//!
//! Needs `KUBECONFIG` pointing at `tests/controlplane/up.sh`'s cluster (`make test` does this).

use std::time::Duration;

use berth_crds::{McpUpstream, PROXY_CONFIG_KEY, ProxyConfig, SessionStrategy};
use berth_tests::cluster::{
    TEST_MANAGER, TestNamespace, client, eventually_get, eventually_gone, eventually_pods,
    shared_operator,
};
use berth_tests::wait_for;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

/// Deadline for the operator to create or repair objects.
const RECONCILE_DEADLINE: Duration = Duration::from_secs(30);
/// Deadline for the kube-controller-manager's controllers (the machine may be busy compiling).
const CONTROLLERS_DEADLINE: Duration = Duration::from_secs(60);
/// Deadline for garbage collection (the collector may need a discovery resync to notice a CRD
/// created after it started).
const GC_DEADLINE: Duration = Duration::from_secs(120);

const IMAGE: &str = "registry.example/acme/search-mcp@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const CONFIG_HASH: &str = "berth.dev/config-hash";

/// An McpUpstream `name` from a YAML `spec` body (indented two spaces).
fn upstream(name: &str, spec: &str) -> McpUpstream {
    serde_yaml::from_str(&format!(
        "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\nmetadata: {{name: {name}}}\nspec:\n{spec}"
    ))
    .unwrap_or_else(|err| panic!("fixture {name} parses: {err}"))
}

/// Every production field set; `priority` names a PriorityClass the test created.
fn full(priority: &str) -> McpUpstream {
    upstream(
        "search",
        &format!(
            "  replicas: 2
  upstream:
    image: '{IMAGE}'
    command: [node, dist/index.js]
    args: [--http]
    port: 7000
    envFrom: [{{secretRef: {{name: search-api}}}}]
    resources: {{requests: {{cpu: 100m, memory: 128Mi}}, limits: {{memory: 512Mi}}}}
    securityContext: {{runAsUser: 1000, runAsGroup: 1001, readOnlyRootFilesystem: true}}
  proxy:
    resources: {{requests: {{cpu: 50m, memory: 32Mi}}}}
    auth: {{bearerTokenSecretRef: {{name: search-clients, key: token}}}}
  pod:
    nodeSelector: {{kubernetes.io/os: linux}}
    tolerations: [{{key: dedicated, operator: Equal, value: mcp, effect: NoSchedule}}]
    affinity:
      podAntiAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector: {{matchLabels: {{app.kubernetes.io/instance: search}}}}
    priorityClassName: {priority}
    serviceAccountName: search-mcp
    imagePullSecrets: [{{name: regcred}}]
    labels: {{team: search}}
    annotations: {{example.com/owner: search-team}}
  networkPolicy:
    enabled: true
    egress: [{{cidr: 203.0.113.0/24, ports: [{{port: 443}}]}}]
  podDisruptionBudget: {{minAvailable: 1}}
"
        ),
    )
}

fn minimal(name: &str) -> McpUpstream {
    upstream(name, &format!("  upstream: {{image: '{IMAGE}'}}\n"))
}

async fn create(ns: &TestNamespace, upstream: &McpUpstream) {
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), upstream)
        .await
        .unwrap_or_else(|err| panic!("McpUpstream {} accepted: {err}", upstream.name_any()));
}

fn container<'a>(deployment: &'a Deployment, name: &str) -> &'a Container {
    let pod = deployment.spec.template.spec.as_ref().expect("pod spec");
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name}"))
}

fn secret_env(container: &Container, name: &str) -> Option<(String, String)> {
    let var = container.env.iter().flatten().find(|e| e.name == name)?;
    let source = var.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some((source.name.clone(), source.key.clone()))
}

fn config_hash(deployment: &Deployment) -> String {
    deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(CONFIG_HASH).cloned())
        .expect("config hash annotation")
}

fn rendered(config_map: &ConfigMap) -> ProxyConfig {
    let text = &config_map.data.as_ref().expect("data")[PROXY_CONFIG_KEY];
    ProxyConfig::from_yaml(text).expect("rendered config checks")
}

#[tokio::test]
async fn operator_api_full_spec_renders_every_field_and_pods_are_admitted_under_restricted() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-full").await;
    // The admission plugins refuse pods naming a PriorityClass or ServiceAccount that does not
    // exist, so the test makes both.
    let priority = format!("{}-mcp", ns.name);
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class: PriorityClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": priority}, "value": 1000,
    }))
    .expect("priority class");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("priority class created");
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "search-mcp"}}))
            .expect("service account");
    ns.api::<ServiceAccount>()
        .create(&PostParams::default(), &account)
        .await
        .expect("service account created");
    let spec = full(&priority);
    create(&ns, &spec).await;

    let deployment = eventually_get(&ns.api::<Deployment>(), "search", RECONCILE_DEADLINE).await;
    assert_eq!(deployment.spec.replicas, Some(2));
    let sidecar = container(&deployment, "upstream");
    assert_eq!(
        sidecar.command,
        Some(vec!["node".to_owned(), "dist/index.js".to_owned()])
    );
    assert_eq!(sidecar.args, Some(vec!["--http".to_owned()]));
    assert_eq!(
        sidecar.env_from.as_deref(),
        Some(spec.spec.upstream.env_from.as_slice())
    );
    let limits = sidecar.resources.as_ref().and_then(|r| r.limits.as_ref());
    assert_eq!(limits.map(|l| l["memory"].0.as_str()), Some("512Mi"));
    let security = sidecar.security_context.as_ref().expect("security");
    assert_eq!(
        (
            security.run_as_user,
            security.run_as_group,
            security.read_only_root_filesystem
        ),
        (Some(1000), Some(1001), Some(true))
    );
    let proxy = container(&deployment, "proxy");
    let requests = proxy.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(requests.map(|r| r["cpu"].0.as_str()), Some("50m"));
    assert_eq!(
        secret_env(proxy, "BERTH_DOWNSTREAM_TOKEN"),
        Some(("search-clients".to_owned(), "token".to_owned()))
    );
    assert_eq!(
        secret_env(proxy, "BERTH_SESSION_KEY"),
        Some(("search-session-key".to_owned(), "key".to_owned()))
    );
    let template = &deployment.spec.template;
    let metadata = template.metadata.as_ref().expect("template metadata");
    assert_eq!(metadata.labels.as_ref().expect("labels")["team"], "search");
    assert_eq!(
        metadata.annotations.as_ref().expect("annotations")["example.com/owner"],
        "search-team"
    );
    let pod = template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.priority_class_name.as_deref(), Some(priority.as_str()));
    assert_eq!(pod.service_account_name.as_deref(), Some("search-mcp"));
    assert_eq!(
        pod.node_selector
            .as_ref()
            .map(|n| n["kubernetes.io/os"].as_str()),
        Some("linux")
    );
    assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(1));
    assert!(
        pod.affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .is_some()
    );
    assert_eq!(
        pod.image_pull_secrets.as_ref().map(|s| s[0].name.as_str()),
        Some("regcred")
    );

    let config_map =
        eventually_get(&ns.api::<ConfigMap>(), "search-proxy", RECONCILE_DEADLINE).await;
    let config = rendered(&config_map);
    assert_eq!(
        config
            .downstream_auth
            .and_then(|a| a.bearer_token_env)
            .as_deref(),
        Some("BERTH_DOWNSTREAM_TOKEN")
    );
    assert_eq!(config.session_key_env.as_deref(), Some("BERTH_SESSION_KEY"));
    assert_eq!(config.session.strategy, SessionStrategy::Shared);
    let service = eventually_get(&ns.api::<Service>(), "search", RECONCILE_DEADLINE).await;
    assert_eq!(
        service
            .spec
            .as_ref()
            .and_then(|s| s.session_affinity.as_deref()),
        Some("None"),
        "no affinity: every replica accepts every session (BR-35)"
    );

    let policy = eventually_get(&ns.api::<NetworkPolicy>(), "search", RECONCILE_DEADLINE).await;
    let policy = policy.spec.expect("policy spec");
    let egress = policy.egress.expect("egress");
    assert_eq!(egress.len(), 2, "DNS and the listed range");
    assert_eq!(
        egress[1]
            .to
            .as_ref()
            .and_then(|t| t[0].ip_block.as_ref())
            .map(|b| b.cidr.as_str()),
        Some("203.0.113.0/24")
    );
    let ingress_ports: Vec<_> = policy.ingress.expect("ingress")[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.clone())
        .collect();
    assert_eq!(
        ingress_ports,
        [
            Some(IntOrString::String("mcp".to_owned())),
            Some(IntOrString::String("admin".to_owned()))
        ]
    );
    let budget = eventually_get(
        &ns.api::<PodDisruptionBudget>(),
        "search",
        RECONCILE_DEADLINE,
    )
    .await;
    assert_eq!(
        budget.spec.and_then(|s| s.min_available),
        Some(IntOrString::Int(1))
    );

    // The namespace enforces "restricted": both pods exist only because the API server
    // admitted them, with the user's non-default uid.
    let pods = eventually_pods(&ns, "search", 2, CONTROLLERS_DEADLINE).await;
    for pod in &pods {
        assert_eq!(pod.labels().get("team").map(String::as_str), Some("search"));
        let spec = pod.spec.as_ref().expect("pod spec");
        let sidecar = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == "upstream")
            .expect("sidecar");
        assert_eq!(
            sidecar
                .security_context
                .as_ref()
                .and_then(|s| s.run_as_user),
            Some(1000)
        );
    }
    let _ = classes.delete(&priority, &DeleteParams::default()).await;
    ns.delete().await;
}

fn session_key(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().expect("data")["key"].0.clone()
}

#[tokio::test]
async fn br_35_session_key_secret_is_created_once_and_never_rotated_by_reconciles() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-key").await;
    let mut spec = minimal("keyed");
    spec.spec.replicas = 2;
    create(&ns, &spec).await;
    let secrets = ns.api::<Secret>();
    let first = eventually_get(&secrets, "keyed-session-key", RECONCILE_DEADLINE).await;
    let key = session_key(&first);
    assert_eq!(key.len(), 64, "32 random bytes as hex");
    assert!(key.iter().all(u8::is_ascii_hexdigit));
    let owner = &first.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("McpUpstream", Some(true))
    );

    // A spec edit forces a reconcile that re-applies the Deployment...
    let deployments = ns.api::<Deployment>();
    let before = config_hash(&eventually_get(&deployments, "keyed", RECONCILE_DEADLINE).await);
    let edit = serde_json::json!({"spec": {"timeouts": {"call": "90s"}}});
    ns.api::<McpUpstream>()
        .patch("keyed", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("spec edited");
    wait_for(
        "the edit to reach the Deployment",
        RECONCILE_DEADLINE,
        || {
            let (deployments, before) = (deployments.clone(), before.clone());
            async move {
                let current = deployments.get("keyed").await.ok()?;
                (config_hash(&current) != before).then_some(())
            }
        },
    )
    .await;
    // ...and leaves the Secret exactly as created: same key, same resourceVersion.
    let after = secrets.get("keyed-session-key").await.expect("secret");
    assert_eq!(session_key(&after), key);
    assert_eq!(after.resource_version(), first.resource_version());
    // Both replicas read the one key (BR-35: any replica verifies any session id).
    let pods = eventually_pods(&ns, "keyed", 2, CONTROLLERS_DEADLINE).await;
    for pod in pods {
        let proxy = pod
            .spec
            .as_ref()
            .expect("spec")
            .containers
            .iter()
            .find(|c| c.name == "proxy")
            .cloned()
            .expect("proxy");
        assert_eq!(
            secret_env(&proxy, "BERTH_SESSION_KEY"),
            Some(("keyed-session-key".to_owned(), "key".to_owned()))
        );
    }
    ns.delete().await;
}

/// ReplicaSets of the Deployment `name`, by the config hash of their pod template.
async fn replica_set_hashes(ns: &TestNamespace, name: &str) -> Vec<String> {
    let list = ns
        .api::<ReplicaSet>()
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
        .await
        .expect("list replica sets");
    let mut hashes: Vec<String> = list
        .items
        .iter()
        .filter_map(|rs| {
            rs.spec
                .template
                .as_ref()?
                .metadata
                .as_ref()?
                .annotations
                .as_ref()?
                .get(CONFIG_HASH)
                .cloned()
        })
        .collect();
    hashes.sort();
    hashes
}

#[tokio::test]
async fn operator_api_spec_edit_rolls_pods_while_status_update_does_not() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-roll").await;
    create(&ns, &minimal("roll")).await;
    let deployments = ns.api::<Deployment>();
    let first = eventually_get(&deployments, "roll", RECONCILE_DEADLINE).await;
    let hash = config_hash(&first);
    wait_for("the first ReplicaSet", CONTROLLERS_DEADLINE, || {
        let ns = &ns;
        async move { (replica_set_hashes(ns, "roll").await.len() == 1).then_some(()) }
    })
    .await;
    let upstreams = ns.api::<McpUpstream>();
    wait_for("status from the operator", RECONCILE_DEADLINE, || {
        let upstreams = upstreams.clone();
        async move {
            let current = upstreams.get("roll").await.ok()?;
            current.status?.observed_generation.map(drop)
        }
    })
    .await;

    // An unrelated status update (another manager's condition) triggers a reconcile through the
    // watch but changes nothing the pods depend on.
    let status = serde_json::json!({
        "apiVersion": "berth.dev/v1alpha1", "kind": "McpUpstream",
        "status": {"conditions": [{
            "type": "ExampleAudit", "status": "True", "reason": "Checked", "message": "",
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]},
    });
    upstreams
        .patch_status(
            "roll",
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
        .expect("status patched");
    // Give the operator time to reconcile the change, then check nothing rolled.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let unchanged = deployments.get("roll").await.expect("deployment");
    assert_eq!(config_hash(&unchanged), hash);
    assert_eq!(unchanged.metadata.generation, first.metadata.generation);
    assert_eq!(
        replica_set_hashes(&ns, "roll").await,
        std::slice::from_ref(&hash)
    );

    // A spec edit changes the rendered config: the hash changes and a new ReplicaSet rolls out.
    let edit = serde_json::json!({"spec": {"session": {"idleTimeout": "10m"}}});
    upstreams
        .patch("roll", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("spec edited");
    let rolled = wait_for(
        "a second ReplicaSet with a new config hash",
        CONTROLLERS_DEADLINE,
        || {
            let ns = &ns;
            async move {
                let hashes = replica_set_hashes(ns, "roll").await;
                (hashes.len() == 2).then_some(hashes)
            }
        },
    )
    .await;
    assert!(rolled.contains(&hash), "{rolled:?}");
    let current = deployments.get("roll").await.expect("deployment");
    assert_ne!(config_hash(&current), hash);
    assert!(rolled.contains(&config_hash(&current)), "{rolled:?}");
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_deleted_config_map_is_repaired() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-cm").await;
    create(&ns, &minimal("repair")).await;
    let config_maps = ns.api::<ConfigMap>();
    let first = eventually_get(&config_maps, "repair-proxy", RECONCILE_DEADLINE).await;
    config_maps
        .delete("repair-proxy", &DeleteParams::background())
        .await
        .expect("config map deleted");
    let repaired = wait_for(
        "the operator to recreate the ConfigMap",
        RECONCILE_DEADLINE,
        || {
            let (config_maps, uid) = (config_maps.clone(), first.uid());
            async move {
                let current = config_maps.get_opt("repair-proxy").await.ok().flatten()?;
                (current.uid() != uid).then_some(current)
            }
        },
    )
    .await;
    assert_eq!(repaired.data, first.data);
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_turned_off_policy_and_budget_are_deleted() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-off").await;
    let mut spec = minimal("toggle");
    spec.spec.network_policy.enabled = true;
    spec.spec.pod_disruption_budget = Some(berth_crds::PodDisruptionBudgetSpec {
        min_available: None,
        max_unavailable: Some(IntOrString::Int(1)),
    });
    create(&ns, &spec).await;
    eventually_get(&ns.api::<NetworkPolicy>(), "toggle", RECONCILE_DEADLINE).await;
    eventually_get(
        &ns.api::<PodDisruptionBudget>(),
        "toggle",
        RECONCILE_DEADLINE,
    )
    .await;
    let off = serde_json::json!({"spec": {"networkPolicy": {"ingress": false, "enabled": false}, "podDisruptionBudget": null}});
    ns.api::<McpUpstream>()
        .patch("toggle", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .expect("turned off");
    eventually_gone(&ns.api::<NetworkPolicy>(), "toggle", RECONCILE_DEADLINE).await;
    eventually_gone(
        &ns.api::<PodDisruptionBudget>(),
        "toggle",
        RECONCILE_DEADLINE,
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_network_policy_is_on_by_default_and_opt_out_creates_none() {
    // Issue 40, item 3: ingress only to the proxy's ports unless the McpUpstream opts out.
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-netpol").await;
    create(&ns, &minimal("guarded")).await;
    let policy = eventually_get(&ns.api::<NetworkPolicy>(), "guarded", RECONCILE_DEADLINE).await;
    let spec = policy.spec.expect("policy spec");
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    assert_eq!(spec.egress, None, "egress is left alone by default");
    let ingress = &spec.ingress.expect("ingress")[0];
    assert_eq!(ingress.from, None);
    let ports: Vec<_> = ingress
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.clone())
        .collect();
    assert_eq!(
        ports,
        [
            Some(IntOrString::String("mcp".to_owned())),
            Some(IntOrString::String("admin".to_owned()))
        ]
    );

    let opted_out = upstream(
        "open",
        &format!("  upstream: {{image: '{IMAGE}'}}\n  networkPolicy: {{ingress: false}}\n"),
    );
    create(&ns, &opted_out).await;
    // Once the operator has applied the Deployment, it would have applied the policy too.
    eventually_get(&ns.api::<Deployment>(), "open", RECONCILE_DEADLINE).await;
    let upstreams = ns.api::<McpUpstream>();
    wait_for("status from the operator", RECONCILE_DEADLINE, || {
        let upstreams = upstreams.clone();
        async move {
            let current = upstreams.get("open").await.ok()?;
            current.status?.observed_generation.map(drop)
        }
    })
    .await;
    let none = ns
        .api::<NetworkPolicy>()
        .get_opt("open")
        .await
        .expect("get");
    assert!(none.is_none(), "opted out: {none:?}");
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_same_named_policy_it_does_not_own_is_left_alone() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-foreign").await;
    // A NetworkPolicy someone else made, named like the McpUpstream that opted out of one.
    let foreign: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mine"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }))
    .expect("policy");
    let policies = ns.api::<NetworkPolicy>();
    let made = policies
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign policy created");
    let mut mine = minimal("mine");
    mine.spec.network_policy.ingress = false;
    create(&ns, &mine).await;
    // Once the operator has reconciled (status observed), the policy is still there.
    let upstreams = ns.api::<McpUpstream>();
    wait_for("status from the operator", RECONCILE_DEADLINE, || {
        let upstreams = upstreams.clone();
        async move {
            let current = upstreams.get("mine").await.ok()?;
            current.status?.observed_generation.map(drop)
        }
    })
    .await;
    let still = policies.get("mine").await.expect("foreign policy kept");
    assert_eq!(still.uid(), made.uid());
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_deleting_the_upstream_removes_everything_it_created() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-gc").await;
    let mut spec = minimal("gone");
    spec.spec.network_policy.enabled = true;
    // One replica: `minAvailable: 1` would never allow a disruption (refused).
    spec.spec.pod_disruption_budget = Some(berth_crds::PodDisruptionBudgetSpec {
        min_available: None,
        max_unavailable: Some(IntOrString::Int(1)),
    });
    create(&ns, &spec).await;
    eventually_get(&ns.api::<Deployment>(), "gone", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<Service>(), "gone", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<ConfigMap>(), "gone-proxy", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<Secret>(), "gone-session-key", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<NetworkPolicy>(), "gone", RECONCILE_DEADLINE).await;
    eventually_get(&ns.api::<PodDisruptionBudget>(), "gone", RECONCILE_DEADLINE).await;
    eventually_pods(&ns, "gone", 1, CONTROLLERS_DEADLINE).await;

    ns.api::<McpUpstream>()
        .delete("gone", &DeleteParams::background())
        .await
        .expect("McpUpstream deleted");
    eventually_gone(&ns.api::<Deployment>(), "gone", GC_DEADLINE).await;
    eventually_gone(&ns.api::<Service>(), "gone", GC_DEADLINE).await;
    eventually_gone(&ns.api::<ConfigMap>(), "gone-proxy", GC_DEADLINE).await;
    eventually_gone(&ns.api::<Secret>(), "gone-session-key", GC_DEADLINE).await;
    eventually_gone(&ns.api::<NetworkPolicy>(), "gone", GC_DEADLINE).await;
    eventually_gone(&ns.api::<PodDisruptionBudget>(), "gone", GC_DEADLINE).await;
    wait_for("the pods to be deleted", GC_DEADLINE, || {
        let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/instance=gone"))
                .await
                .ok()?;
            list.items.is_empty().then_some(())
        }
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_shipped_examples_are_accepted_and_their_pods_admitted() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-examples").await;
    for (file, text) in [
        (
            "production.yaml",
            include_str!("../../examples/production.yaml"),
        ),
        (
            "time-stdio.yaml",
            include_str!("../../examples/time-stdio.yaml"),
        ),
        ("oauth.yaml", include_str!("../../examples/oauth.yaml")),
    ] {
        let example: McpUpstream =
            serde_yaml::from_str(text).unwrap_or_else(|err| panic!("{file} parses: {err}"));
        create(&ns, &example).await;
        let name = example.name_any();
        let replicas = usize::try_from(example.spec.replicas).expect("replicas");
        eventually_pods(&ns, &name, replicas, CONTROLLERS_DEADLINE).await;
    }
    ns.delete().await;
}
