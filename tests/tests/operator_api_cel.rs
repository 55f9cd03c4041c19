//! CEL and schema rules of the McpUpstream API (issues 4, 5 and 15) against the real API server:
//! every rejected shape is refused with HTTP 422 and a message naming the field, and the same
//! shapes within the rules are accepted.
//!
//! Needs `KUBECONFIG` pointing at `tests/controlplane/up.sh`'s cluster (`make test` does this).

use berth_crds::McpUpstream;
use berth_tests::cluster::{TestNamespace, client, rejected_naming, shared_operator};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};

/// A valid `spec.proxy.auth.oauth` in YAML flow style.
const OAUTH: &str = "{issuer: 'https://auth.example.com/', audience: 'https://m.example/mcp', requiredScopes: ['mcp:tools'], allowedAlgorithms: [RS256, ES256], jwksRefresh: 10m, clockSkew: 30s}";

const IMAGE: &str = "registry.example/acme/search-mcp@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// An McpUpstream `name` from a YAML `spec` body (indented two spaces).
fn upstream(name: &str, spec: &str) -> McpUpstream {
    serde_yaml::from_str(&format!(
        "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\nmetadata: {{name: {name}}}\nspec:\n{spec}"
    ))
    .unwrap_or_else(|err| panic!("fixture {name} parses: {err}"))
}

/// Creates `spec` and expects the API server to refuse it with a message containing `field`.
async fn assert_rejected(ns: &TestNamespace, case: &str, spec: &str, field: &str) {
    eprintln!("case: {case}");
    rejected_naming(ns, &upstream("bad", spec), field).await;
}

#[tokio::test]
async fn operator_api_cel_rejections_name_the_field() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-cel").await;
    let up = |extra: &str| format!("  upstream: {{image: '{IMAGE}'{extra}}}\n");
    let cases = [
        (
            "stdio without command",
            up(", transport: Stdio"),
            "spec.upstream.command",
        ),
        (
            "empty command",
            up(", command: []"),
            "spec.upstream.command",
        ),
        (
            "empty program",
            up(", command: ['']"),
            "spec.upstream.command",
        ),
        (
            "stdio with headers",
            up(", transport: Stdio, command: [x], headers: [{name: X-Key, value: v}]"),
            "spec.upstream.headers",
        ),
        (
            "root user",
            up(", securityContext: {runAsUser: 0}"),
            "spec.upstream.securityContext.runAsUser",
        ),
        (
            "the proxy's user (issue 40, item 7)",
            up(", securityContext: {runAsUser: 65533}"),
            "spec.upstream.securityContext.runAsUser",
        ),
        (
            "privilege escalation",
            up(", securityContext: {allowPrivilegeEscalation: true}"),
            "spec.upstream.securityContext.allowPrivilegeEscalation",
        ),
        (
            "privileged",
            up(", securityContext: {privileged: true}"),
            "spec.upstream.securityContext.privileged",
        ),
        (
            "runAsNonRoot false",
            up(", securityContext: {runAsNonRoot: false}"),
            "spec.upstream.securityContext.runAsNonRoot",
        ),
        (
            "extra capability",
            up(", securityContext: {capabilities: {add: [SYS_ADMIN]}}"),
            "spec.upstream.securityContext.capabilities.add",
        ),
        (
            "selector label",
            format!(
                "{}  pod: {{labels: {{app.kubernetes.io/instance: other}}}}\n",
                up("")
            ),
            "spec.pod.labels",
        ),
        (
            "config hash annotation",
            format!(
                "{}  pod: {{annotations: {{berth.dev/config-hash: x}}}}\n",
                up("")
            ),
            "spec.pod.annotations",
        ),
        (
            "budget with both",
            format!(
                "{}  podDisruptionBudget: {{minAvailable: 1, maxUnavailable: 1}}\n",
                up("")
            ),
            "spec.podDisruptionBudget",
        ),
        (
            "budget with neither",
            format!("{}  podDisruptionBudget: {{}}\n", up("")),
            "spec.podDisruptionBudget",
        ),
        (
            "host bits in cidr",
            format!(
                "{}  networkPolicy: {{enabled: true, egress: [{{cidr: 10.0.0.1/8}}]}}\n",
                up("")
            ),
            "spec.networkPolicy.egress",
        ),
        (
            "not a cidr",
            format!(
                "{}  networkPolicy: {{enabled: true, egress: [{{cidr: example.com}}]}}\n",
                up("")
            ),
            "spec.networkPolicy.egress",
        ),
        (
            "zero replicas",
            format!("{}  replicas: 0\n", up("")),
            "spec.replicas",
        ),
        (
            "zero connect budget",
            format!("{}  timeouts: {{connect: 0s}}\n", up("")),
            "spec.timeouts.connect",
        ),
        (
            "zero idle timeout",
            format!("{}  session: {{idleTimeout: 0s}}\n", up("")),
            "spec.session.idleTimeout",
        ),
        (
            "replay buffer over 4 GiB",
            format!("{}  session: {{replayBufferMiB: 4097}}\n", up("")),
            "spec.session.replayBufferMiB",
        ),
        (
            "zero probe interval",
            format!(
                "{}  toolsProbe: {{policy: Interval, interval: 0s}}\n",
                up("")
            ),
            "spec.toolsProbe.interval",
        ),
        (
            "origin with a path",
            format!(
                "{}  proxy: {{requestOrigin: {{allowedOrigins: ['https://a.example/x']}}}}\n",
                up("")
            ),
            "spec.proxy.requestOrigin.allowedOrigins",
        ),
        (
            "host with a scheme",
            format!(
                "{}  proxy: {{requestOrigin: {{allowedHosts: ['https://a.example']}}}}\n",
                up("")
            ),
            "spec.proxy.requestOrigin.allowedHosts",
        ),
        (
            "auth with both",
            format!(
                "{}  proxy: {{auth: {{bearerTokenSecretRef: {{name: s, key: k}}, oauth: {OAUTH}}}}}\n",
                up("")
            ),
            "spec.proxy.auth",
        ),
        (
            "auth with neither",
            format!("{}  proxy: {{auth: {{}}}}\n", up("")),
            "spec.proxy.auth",
        ),
        (
            "issuer not a url",
            format!(
                "{}  proxy: {{auth: {{oauth: {{issuer: auth.example.com, audience: 'https://m.example/mcp'}}}}}}\n",
                up("")
            ),
            "spec.proxy.auth.oauth.issuer",
        ),
        (
            "audience with a fragment",
            format!(
                "{}  proxy: {{auth: {{oauth: {{issuer: 'https://a.example/', audience: 'https://m.example/mcp#x'}}}}}}\n",
                up("")
            ),
            "spec.proxy.auth.oauth.audience",
        ),
        (
            "scope with a space",
            format!(
                "{}  proxy: {{auth: {{oauth: {{issuer: 'https://a.example/', audience: 'https://m.example/mcp', requiredScopes: ['a b']}}}}}}\n",
                up("")
            ),
            "spec.proxy.auth.oauth.requiredScopes",
        ),
        (
            "key refresh too often",
            format!(
                "{}  proxy: {{auth: {{oauth: {{issuer: 'https://a.example/', audience: 'https://m.example/mcp', jwksRefresh: 1s}}}}}}\n",
                up("")
            ),
            "spec.proxy.auth.oauth.jwksRefresh",
        ),
        (
            "clock skew too large",
            format!(
                "{}  proxy: {{auth: {{oauth: {{issuer: 'https://a.example/', audience: 'https://m.example/mcp', clockSkew: 1h}}}}}}\n",
                up("")
            ),
            "spec.proxy.auth.oauth.clockSkew",
        ),
        (
            "grants without oauth",
            format!(
                "{}  tools: {{grants: [{{tools: [echo], subjects: [alice]}}]}}\n",
                up("")
            ),
            "spec.tools.grants",
        ),
        (
            "grant for nobody",
            format!(
                "{}  tools: {{grants: [{{tools: [echo]}}]}}\n  proxy: {{auth: {{oauth: {OAUTH}}}}}\n",
                up("")
            ),
            "spec.tools.grants",
        ),
        (
            "readOnly without a tools probe",
            format!(
                "{}  tools: {{readOnly: true}}\n  toolsProbe: {{policy: Never}}\n",
                up("")
            ),
            "spec.toolsProbe.policy",
        ),
        (
            "readOnly grant without a tools probe",
            format!(
                "{}  tools: {{grants: [{{tools: ['*'], readOnly: true, scopes: [s]}}]}}\n  toolsProbe: {{policy: Never}}\n  proxy: {{auth: {{oauth: {OAUTH}}}}}\n",
                up("")
            ),
            "spec.toolsProbe.policy",
        ),
        (
            "rate limit of zero calls",
            format!("{}  tools: {{rateLimits: [{{calls: 0}}]}}\n", up("")),
            "spec.tools.rateLimits[0].calls",
        ),
        (
            "rate limit window that is not a duration",
            format!(
                "{}  tools: {{rateLimits: [{{calls: 5, per: hourly}}]}}\n",
                up("")
            ),
            "spec.tools.rateLimits[0].per",
        ),
        (
            "rate limit with a zero burst",
            format!(
                "{}  tools: {{rateLimits: [{{calls: 5, burst: 0}}]}}\n",
                up("")
            ),
            "spec.tools.rateLimits[0].burst",
        ),
    ];
    for (case, spec, field) in &cases {
        assert_rejected(&ns, case, spec, field).await;
    }
    // The same shapes within the rules are accepted.
    ns.api::<McpUpstream>()
        .create(
        &PostParams::default(),
        &upstream(
            "good",
            &format!(
                "{}  networkPolicy: {{enabled: true, egress: [{{cidr: '2001:db8::/32'}}]}}\n  podDisruptionBudget: {{maxUnavailable: 25%}}\n  proxy: {{requestOrigin: {{allowedOrigins: ['*', 'https://inspector.example.com:8443'], allowedHosts: ['mcp.example.com', '*.svc.cluster.local', 'edge:8443']}}}}\n",
                up(", command: [srv], securityContext: {runAsUser: 1000, runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {add: [NET_BIND_SERVICE]}}")
            ),
        ),
    )
    .await
    .expect("shapes within the rules are accepted");
    // A stdio server has no port, so its unused default cannot clash with the proxy's.
    let stdio = upstream(
        "stdio",
        &format!(
            "{}  proxy: {{port: 3000}}\n",
            up(", transport: Stdio, command: [srv]")
        ),
    );
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &stdio)
        .await
        .expect("a stdio upstream's unused port does not clash");
    let oauth = upstream(
        "oauth",
        &format!(
            "{}  proxy: {{auth: {{oauth: {OAUTH}}}}}\n  tools: {{grants: [{{tools: ['*'], scopes: ['mcp:admin']}}, {{tools: [search, 'docs_*'], readOnly: true, groups: [support], subjects: [alice]}}]}}\n",
            up("")
        ),
    );
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &oauth)
        .await
        .expect("an OAuth resource server within the rules is accepted");
    // A value the typed client cannot even express: sent untyped, refused by the schema's enum.
    let raw: DynamicObject = serde_yaml::from_str(&format!(
        "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\nmetadata: {{name: hmac}}\nspec:\n{}  proxy: {{auth: {{oauth: {{issuer: 'https://a.example/', audience: 'https://m.example/mcp', allowedAlgorithms: [HS256]}}}}}}\n",
        up("")
    ))
    .expect("untyped fixture parses");
    let untyped: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::erase::<McpUpstream>(&()),
    );
    match untyped.create(&PostParams::default(), &raw).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status
                    .message
                    .contains("spec.proxy.auth.oauth.allowedAlgorithms")
                    && status.message.contains("HS256"),
                "{status:?}"
            );
        }
        other => panic!("HS256 must be refused by the API server: {other:?}"),
    }
    assert_rejected(
        &ns,
        "http port clash",
        &format!("{}  proxy: {{port: 3000}}\n", up("")),
        "spec.upstream.port",
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn operator_api_cel_telemetry_rejections_name_the_field() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-cel-telemetry").await;
    let with =
        |telemetry: &str| format!("  upstream: {{image: '{IMAGE}'}}\n  telemetry: {telemetry}\n");
    let cases = [
        (
            "endpoint without a scheme (a gRPC address)",
            with("{traces: {endpoint: 'otel-collector:4317'}}"),
            "spec.telemetry.traces.endpoint",
        ),
        (
            "empty endpoint",
            with("{traces: {endpoint: ''}}"),
            "spec.telemetry.traces.endpoint",
        ),
        (
            "sampling ratio above 1",
            with("{traces: {endpoint: 'http://otel-collector:4318', samplingRatio: 1.5}}"),
            "spec.telemetry.traces.samplingRatio",
        ),
        (
            "negative sampling ratio",
            with("{traces: {endpoint: 'http://otel-collector:4318', samplingRatio: -0.1}}"),
            "spec.telemetry.traces.samplingRatio",
        ),
        (
            "empty service name",
            with("{traces: {endpoint: 'http://otel-collector:4318', serviceName: ''}}"),
            "spec.telemetry.traces.serviceName",
        ),
    ];
    for (case, spec, field) in &cases {
        assert_rejected(&ns, case, spec, field).await;
    }
    let created = ns
        .api::<McpUpstream>()
        .create(
            &PostParams::default(),
            &upstream(
                "traced",
                &with(
                    "{traces: {endpoint: 'http://otel-collector.observability:4318', samplingRatio: 0.25, serviceName: berth-proxy, headersSecret: {name: otel-credentials, key: headers}}}",
                ),
            ),
        )
        .await
        .expect("telemetry within the rules is accepted");
    let traces = created.spec.telemetry.traces.expect("traces kept");
    assert_eq!(traces.sampling_ratio, 0.25);
    // The API server fills in the schema's defaults.
    let minimal = ns
        .api::<McpUpstream>()
        .create(
            &PostParams::default(),
            &upstream(
                "traced-defaults",
                &with("{traces: {endpoint: 'https://otlp.example.com'}}"),
            ),
        )
        .await
        .expect("an endpoint alone is accepted");
    let traces = minimal.spec.telemetry.traces.expect("traces kept");
    assert_eq!(
        (traces.sampling_ratio, traces.service_name.as_str()),
        (1.0, "berth-proxy")
    );
    ns.delete().await;
}

/// Issue 40: a PodDisruptionBudget that can never allow a disruption (every node drain would
/// block) is refused with a message naming the field; budgets that allow one are accepted.
#[tokio::test]
async fn operator_api_cel_budget_that_never_allows_a_disruption_is_rejected() {
    shared_operator().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "api-pdb").await;
    let up = format!("  upstream: {{image: '{IMAGE}'}}\n");
    let cases = [
        (
            "minAvailable equal to the default replicas",
            "  podDisruptionBudget: {minAvailable: 1}\n",
            "spec.podDisruptionBudget.minAvailable",
        ),
        (
            "minAvailable above replicas",
            "  replicas: 2\n  podDisruptionBudget: {minAvailable: 3}\n",
            "spec.podDisruptionBudget.minAvailable",
        ),
        (
            "minAvailable 100%",
            "  replicas: 3\n  podDisruptionBudget: {minAvailable: 100%}\n",
            "spec.podDisruptionBudget.minAvailable",
        ),
        (
            "maxUnavailable 0",
            "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 0}\n",
            "spec.podDisruptionBudget.maxUnavailable",
        ),
        (
            "maxUnavailable 0%",
            "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 0%}\n",
            "spec.podDisruptionBudget.maxUnavailable",
        ),
    ];
    for (case, budget, field) in cases {
        assert_rejected(&ns, case, &format!("{up}{budget}"), field).await;
    }
    let accepted = [
        "  replicas: 2\n  podDisruptionBudget: {minAvailable: 1}\n",
        "  replicas: 3\n  podDisruptionBudget: {minAvailable: 50%}\n",
        "  podDisruptionBudget: {maxUnavailable: 1}\n",
        "  podDisruptionBudget: {maxUnavailable: 10%}\n",
    ];
    for (i, budget) in accepted.into_iter().enumerate() {
        ns.api::<McpUpstream>()
            .create(
                &PostParams::default(),
                &upstream(&format!("good-{i}"), &format!("{up}{budget}")),
            )
            .await
            .unwrap_or_else(|err| panic!("{budget} is accepted: {err}"));
    }
    ns.delete().await;
}
