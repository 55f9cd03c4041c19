//! The proxy as an OAuth 2.1 resource server (`downstreamAuth.oauth`; MCP "Authorization",
//! issue 15) against a real authorization server the test starts: ORY Hydra issuing JWT access
//! tokens by the client-credentials grant. A real MCP client (rmcp) calls with Hydra's tokens;
//! raw HTTP checks each refusal's status and `WWW-Authenticate` parameters, which clients need
//! to re-authenticate; a recording fault upstream shows the client's token never goes upstream.

use berth_crds::{DurationString, ToolsPolicySpec};
use berth_tests::fault::FaultUpstream;
use berth_tests::hydra::Hydra;
use berth_tests::proxy::{call, config, post_with, sample, scrape, start_ready};
use berth_tests::rmcp_client;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

const AGENT: (&str, &str) = ("berth-agent", "agent-secret-0123456789");
const READER: (&str, &str) = ("berth-reader", "reader-secret-0123456789");

/// A proxy on a known port whose audience is its own `/mcp` URL, in front of `upstream_url`,
/// accepting `hydra`'s tokens with scope `mcp:tools`.
async fn oauth_proxy(
    hydra: &Hydra,
    upstream_url: &str,
    jwks_refresh: &str,
) -> (berth_proxy::RunningProxy, String) {
    oauth_proxy_with(
        hydra,
        upstream_url,
        jwks_refresh,
        ToolsPolicySpec::default(),
    )
    .await
}

/// As [`oauth_proxy`], with the tool policy `tools`.
async fn oauth_proxy_with(
    hydra: &Hydra,
    upstream_url: &str,
    jwks_refresh: &str,
    tools: ToolsPolicySpec,
) -> (berth_proxy::RunningProxy, String) {
    let port = berth_tests::free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let mut cfg = config(upstream_url, "30s");
    cfg.tools = tools;
    cfg.listen = format!("127.0.0.1:{port}");
    let mut auth = hydra.downstream_auth(&audience);
    if let Some(oauth) = &mut auth.oauth {
        oauth.jwks_refresh = Some(DurationString::new(jwks_refresh));
    }
    cfg.downstream_auth = Some(auth);
    (start_ready(&cfg).await, audience)
}

/// An rmcp client sending `token` lists the tools and calls `echo`.
async fn call_echo_with(url: &str, token: &str, message: &str) {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token),
    );
    let client = ().serve(transport).await.expect("rmcp client connects");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "echo"), "{tools:?}");
    let result = rmcp_client::call_tool(&client, "echo", json!({"message": message})).await;
    let text = serde_json::to_string(&result.content).expect("content");
    assert!(text.contains(message), "{text}");
    client.cancel().await.expect("client closes");
}

/// POSTs an `initialize` with `authorization` (if any); returns status, `WWW-Authenticate` and
/// the JSON body.
async fn post_initialize(url: &str, authorization: Option<&str>) -> (u16, String, Value) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&init);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let reply = request.send().await.expect("POST");
    let status = reply.status().as_u16();
    let challenge = reply
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    let body = reply.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

#[tokio::test]
async fn oauth_hydra_tokens_are_accepted_and_every_refusal_says_how_to_authenticate() {
    let upstream = FaultUpstream::builder().record(true).start().await;
    // The audience is the proxy's own URL, so Hydra's clients are registered once it is up.
    let hydra = Hydra::start().await;
    let (proxy, audience) = oauth_proxy(&hydra, &upstream.url, "5m").await;
    hydra
        .create_client(
            AGENT.0,
            AGENT.1,
            "mcp:tools profile",
            &[&audience, "https://elsewhere.example/mcp"],
        )
        .await;
    hydra
        .create_client(READER.0, READER.1, "profile", &[&audience])
        .await;
    let url = audience.clone();
    let metadata_url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        proxy.mcp_addr
    );

    // A valid token from Hydra: a real client works end to end.
    let token = hydra.token(AGENT.0, AGENT.1, "mcp:tools", &audience).await;
    call_echo_with(&url, &token, "hello through oauth").await;

    // No token: 401 naming the metadata and the scope, and a JSON-RPC error.
    let (status, challenge, body) = post_initialize(&url, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"mcp:tools\"")
    );
    assert_eq!(body["error"]["code"], json!(-32600), "{body}");

    // Not a JWT, and a real token for another audience: 401 invalid_token, with the metadata.
    let other = hydra
        .token(
            AGENT.0,
            AGENT.1,
            "mcp:tools",
            "https://elsewhere.example/mcp",
        )
        .await;
    for (case, value) in [
        ("garbage", "Bearer not-a-jwt".to_owned()),
        ("other audience", format!("Bearer {other}")),
    ] {
        let (status, challenge, body) = post_initialize(&url, Some(&value)).await;
        assert_eq!(status, 401, "{case}: {body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata_url}\""))
                && challenge.contains("scope=\"mcp:tools\""),
            "{case}: {challenge}"
        );
    }

    // A valid token without the required scope: 403 insufficient_scope naming it.
    let reader = hydra.token(READER.0, READER.1, "profile", &audience).await;
    let (status, challenge, body) = post_initialize(&url, Some(&format!("Bearer {reader}"))).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:tools\"")
            && challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );

    // The protected resource metadata, unauthenticated, at both well-known forms.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let document: Value = reqwest::get(format!("http://{}{path}", proxy.mcp_addr))
            .await
            .expect("GET metadata")
            .error_for_status()
            .expect("metadata is served without a token")
            .json()
            .await
            .expect("JSON");
        assert_eq!(document["resource"], json!(audience), "{path}: {document}");
        assert_eq!(
            document["authorization_servers"],
            json!([hydra.issuer]),
            "{path}: {document}"
        );
        assert_eq!(document["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }

    let metrics = scrape(&proxy).await;
    let count = |reason: &str| {
        sample(
            &metrics,
            &format!("berth_proxy_invalid_messages_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(count("unauthorized"), 3.0, "{metrics}");
    assert_eq!(count("insufficient_scope"), 1.0, "{metrics}");
    // The upstream never sees a client's token or its Authorization header.
    let received = upstream.handle().received();
    assert!(
        !received.is_empty(),
        "the accepted calls reached the upstream"
    );
    for request in received {
        assert!(
            request
                .headers
                .iter()
                .all(|(name, value)| name != "authorization"
                    && !value.contains(&token)
                    && !value.contains(&reader)),
            "client credential forwarded upstream: {:?}",
            request.headers
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn oauth_issuer_key_rotation_keeps_calls_working_without_a_restart() {
    let upstream = FaultUpstream::start().await;
    let hydra = Hydra::start().await;
    // A long scheduled refresh: only a token's unknown `kid` can make the proxy learn the key.
    let (proxy, audience) = oauth_proxy(&hydra, &upstream.url, "24h").await;
    hydra
        .create_client("rotating-agent", AGENT.1, "mcp:tools", &[&audience])
        .await;
    let before = hydra
        .token("rotating-agent", AGENT.1, "mcp:tools", &audience)
        .await;
    call_echo_with(&audience, &before, "before rotation").await;
    let fetches = |metrics: &str| sample(metrics, r#"berth_proxy_jwks_fetches_total{result="ok"}"#);
    let fetched_before = fetches(&scrape(&proxy).await);

    hydra.rotate_access_token_keys("berth-test-rotated").await;
    let after = hydra
        .token("rotating-agent", AGENT.1, "mcp:tools", &audience)
        .await;
    assert_eq!(
        kid(&after),
        "berth-test-rotated",
        "Hydra signs with the new key"
    );
    assert_ne!(kid(&before), kid(&after));
    call_echo_with(&audience, &after, "after rotation").await;
    // Tokens signed before the rotation stay valid while the issuer still publishes their key.
    call_echo_with(&audience, &before, "old token after rotation").await;

    let metrics = scrape(&proxy).await;
    assert!(
        fetches(&metrics) > fetched_before,
        "the unknown kid made the proxy fetch the keys again: {metrics}"
    );
    proxy.shutdown().await;
}

/// The `kid` of a JWT's header.
fn kid(token: &str) -> String {
    let header = token.split('.').next().expect("a JWT has a header");
    let header =
        jsonwebtoken::decode_header(token).unwrap_or_else(|err| panic!("header {header}: {err}"));
    header.kid.expect("Hydra's tokens name their key")
}

#[tokio::test]
async fn oauth_tool_grants_give_each_caller_its_tools_and_a_session_stays_with_its_caller() {
    let upstream = FaultUpstream::builder().record(true).start().await;
    let hydra = Hydra::start().await;
    // Hydra's client-credentials tokens name the client as `sub`.
    let tools: ToolsPolicySpec = serde_yaml::from_str(
        "{grants: [{tools: [echo], subjects: [grant-agent]}, {tools: ['*'], scopes: ['mcp:admin']}]}",
    )
    .expect("grants parse");
    let (proxy, audience) = oauth_proxy_with(&hydra, &upstream.url, "5m", tools).await;
    hydra
        .create_client("grant-agent", AGENT.1, "mcp:tools", &[&audience])
        .await;
    hydra
        .create_client("grant-admin", AGENT.1, "mcp:tools mcp:admin", &[&audience])
        .await;
    let agent = hydra
        .token("grant-agent", AGENT.1, "mcp:tools", &audience)
        .await;
    let admin = hydra
        .token("grant-admin", AGENT.1, "mcp:tools mcp:admin", &audience)
        .await;

    // Each caller lists its own tools: the agent only echo, the admin every tool.
    let names = |token: &str| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(audience.clone()).auth_header(token),
        );
        async move {
            let client = ().serve(transport).await.expect("rmcp client connects");
            let mut names: Vec<String> = client
                .list_all_tools()
                .await
                .expect("tools/list")
                .into_iter()
                .map(|tool| tool.name.to_string())
                .collect();
            names.sort();
            client.cancel().await.expect("client closes");
            names
        }
    };
    assert_eq!(names(&agent).await, ["echo"]);
    let everything = names(&admin).await;
    assert!(
        everything.len() > 1 && everything.contains(&"slow".to_owned()),
        "{everything:?}"
    );
    call_echo_with(&audience, &agent, "granted").await;

    // A call to a tool the agent has no grant for: a JSON-RPC error, nothing upstream.
    let bearer = |token: &str| format!("Bearer {token}");
    let agent_auth = bearer(&agent);
    let as_agent = [("authorization", agent_auth.as_str())];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let opened = post_with(&audience, None, &as_agent, &init).await;
    let session = opened.session.clone().expect("a session id");
    let before = upstream.handle().received().len();
    let denied = post_with(
        &audience,
        Some(&session),
        &as_agent,
        &call(json!(7), "slow", json!({"ms": 1})),
    )
    .await;
    let error = &denied.last()["error"];
    assert_eq!(denied.last()["id"], json!(7), "{denied:?}");
    assert_eq!(error["code"], json!(-32602), "{denied:?}");
    assert_eq!(error["data"]["outcome"], json!("denied"), "{denied:?}");
    assert!(
        upstream.handle().received_since(before).is_empty(),
        "a denied call reaches nothing upstream"
    );

    // The agent's session is unknown to the admin, even with a valid token of its own.
    let admin_auth = bearer(&admin);
    let as_admin = [("authorization", admin_auth.as_str())];
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let hijack = post_with(&audience, Some(&session), &as_admin, &list).await;
    assert_eq!(hijack.status, 404, "{hijack:?}");
    let own = post_with(&audience, Some(&session), &as_agent, &list).await;
    assert_eq!(own.status, 200, "{own:?}");
    assert_eq!(
        own.last()["result"]["tools"].as_array().map(Vec::len),
        Some(1)
    );
    let delete = reqwest::Client::new()
        .delete(&audience)
        .header("mcp-session-id", &session)
        .header("authorization", &admin_auth)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(
        delete.status(),
        404,
        "another identity cannot end the session"
    );
    let still = post_with(&audience, Some(&session), &as_agent, &list).await;
    assert_eq!(still.status, 200, "{still:?}");

    let metrics = scrape(&proxy).await;
    let denied_calls = r#"berth_proxy_tool_calls_total{outcome="denied",tool="slow"}"#;
    assert_eq!(sample(&metrics, denied_calls), 1.0, "{metrics}");
    proxy.shutdown().await;
}

/// A replica on a fresh port accepting `hydra`'s tokens for `audience`, signing session ids with
/// `key` (shared by every replica of one McpUpstream, as the operator sets it).
async fn oauth_replica(
    hydra: &Hydra,
    upstream_url: &str,
    audience: &str,
    key: &str,
    session: impl FnOnce(&mut berth_crds::SessionSpec),
) -> (berth_proxy::RunningProxy, String) {
    const KEY_VAR: &str = "BERTH_SESSION_KEY";
    let port = berth_tests::free_port();
    let mut cfg = config(upstream_url, "30s");
    session(&mut cfg.session);
    cfg.listen = format!("127.0.0.1:{port}");
    cfg.session_key_env = Some(KEY_VAR.to_owned());
    cfg.downstream_auth = Some(hydra.downstream_auth(audience));
    berth_proxy::install_crypto_provider();
    let running =
        berth_proxy::start_with_env(&cfg, &|var| (var == KEY_VAR).then(|| key.to_owned()))
            .await
            .expect("replica starts");
    berth_tests::proxy::wait_ready(&running, std::time::Duration::from_secs(30)).await;
    (running, format!("http://127.0.0.1:{port}/mcp"))
}

/// Issue 39, item 9: a session belongs to its identity on every replica. Another identity's
/// DELETE on a replica that has not yet adopted the session used to answer 204 and end it there,
/// so its owner got 404 on that replica from then on.
#[tokio::test]
async fn oauth_another_identity_cannot_end_a_session_on_a_replica_that_never_held_it() {
    let upstream = FaultUpstream::builder().start().await;
    let hydra = Hydra::start().await;
    let audience = "https://berth.test/replicated/mcp";
    let key = "a-session-key-shared-by-both-replicas";
    let (first, first_url) = oauth_replica(&hydra, &upstream.url, audience, key, |_| {}).await;
    let (second, second_url) = oauth_replica(&hydra, &upstream.url, audience, key, |_| {}).await;
    hydra
        .create_client("owner-agent", AGENT.1, "mcp:tools", &[audience])
        .await;
    hydra
        .create_client("other-agent", READER.1, "mcp:tools", &[audience])
        .await;
    let owner = format!(
        "Bearer {}",
        hydra
            .token("owner-agent", AGENT.1, "mcp:tools", audience)
            .await
    );
    let other = format!(
        "Bearer {}",
        hydra
            .token("other-agent", READER.1, "mcp:tools", audience)
            .await
    );
    let as_owner = [("authorization", owner.as_str())];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let opened = post_with(&first_url, None, &as_owner, &init).await;
    let session = opened.session.clone().expect("a session id");

    let delete = reqwest::Client::new()
        .delete(&second_url)
        .header("mcp-session-id", &session)
        .header("authorization", &other)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(
        delete.status(),
        404,
        "another identity's DELETE on the replica that never held the session"
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    for url in [&second_url, &first_url] {
        let own = post_with(url, Some(&session), &as_owner, &list).await;
        assert_eq!(
            own.status, 200,
            "the owner keeps its session at {url}: {own:?}"
        );
    }
    let delete = reqwest::Client::new()
        .delete(&second_url)
        .header("mcp-session-id", &session)
        .header("authorization", &owner)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(delete.status(), 204, "the owner may end its own session");
    first.shutdown().await;
    second.shutdown().await;
}

/// Issue 39, item 5: one identity cannot hold every session slot nor end another's session to
/// make room. With `maxSessionsPerIdentity: 2`, a caller's third session ends its own least
/// recently active idle one; another caller's session is untouched; with both of its sessions
/// busy (open streams), the caller's next `initialize` is refused naming the field.
#[tokio::test]
async fn oauth_session_quota_per_identity_ends_only_the_callers_own_idle_session() {
    let upstream = FaultUpstream::builder().start().await;
    let hydra = Hydra::start().await;
    let audience = "https://berth.test/quota/mcp";
    let (proxy, url) = oauth_replica(
        &hydra,
        &upstream.url,
        audience,
        "a-session-key-for-the-quota-test",
        |session| session.max_sessions_per_identity = Some(2),
    )
    .await;
    hydra
        .create_client("busy-agent", AGENT.1, "mcp:tools", &[audience])
        .await;
    hydra
        .create_client("quiet-agent", READER.1, "mcp:tools", &[audience])
        .await;
    let busy = format!(
        "Bearer {}",
        hydra
            .token("busy-agent", AGENT.1, "mcp:tools", audience)
            .await
    );
    let quiet = format!(
        "Bearer {}",
        hydra
            .token("quiet-agent", READER.1, "mcp:tools", audience)
            .await
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let open = |token: &str| {
        let headers = [("authorization", token.to_owned())];
        let (url, init) = (url.clone(), init.clone());
        async move {
            let headers = [(headers[0].0, headers[0].1.as_str())];
            let reply = post_with(&url, None, &headers, &init).await;
            let body = reply.last().clone();
            (reply.status, reply.session, body)
        }
    };
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let (_, quiet_session, _) = open(&quiet).await;
    let quiet_session = quiet_session.expect("the quiet caller's session");
    let mut mine = Vec::new();
    for _ in 0..3 {
        let (status, session, body) = open(&busy).await;
        assert_eq!(status, 200, "{body}");
        mine.push(session.expect("a session id"));
    }
    let as_busy = [("authorization", busy.as_str())];
    let first = post_with(&url, Some(&mine[0]), &as_busy, &list).await;
    assert_eq!(
        first.status, 404,
        "the caller's oldest idle session made room: {first:?}"
    );
    let as_quiet = [("authorization", quiet.as_str())];
    let other = post_with(&url, Some(&quiet_session), &as_quiet, &list).await;
    assert_eq!(
        other.status, 200,
        "another caller's session is untouched: {other:?}"
    );

    // Both remaining sessions busy: the next initialize is refused, naming the quota.
    let mut streams = Vec::new();
    for session in &mine[1..] {
        let response = reqwest::Client::new()
            .get(&url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("authorization", &busy)
            .send()
            .await
            .expect("GET stream");
        assert_eq!(response.status(), 200);
        streams.push(response);
    }
    let (status, _, body) = open(&busy).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["error"]["data"]["limit"],
        json!("maxSessionsPerIdentity"),
        "{body}"
    );
    let (status, _, body) = open(&quiet).await;
    assert_eq!(status, 200, "another caller still gets a session: {body}");
    let metrics = scrape(&proxy).await;
    let refused = r#"berth_proxy_session_limit_refusals_total{limit="maxSessionsPerIdentity"}"#;
    assert_eq!(sample(&metrics, refused), 1.0, "{metrics}");
    drop(streams);
    proxy.shutdown().await;
}

/// Issue 39, item 5: a caller opening sessions in a loop is held to
/// `session.newSessionsPerMinute` (429, `Retry-After`, the field named, nothing upstream);
/// another caller opens its session as usual.
#[tokio::test]
async fn oauth_new_sessions_per_minute_holds_one_callers_loop_and_not_the_others() {
    let upstream = FaultUpstream::builder().start().await;
    let hydra = Hydra::start().await;
    let audience = "https://berth.test/rate/mcp";
    let (proxy, url) = oauth_replica(
        &hydra,
        &upstream.url,
        audience,
        "a-session-key-for-the-rate-test",
        |session| session.new_sessions_per_minute = 3,
    )
    .await;
    hydra
        .create_client("looping-agent", AGENT.1, "mcp:tools", &[audience])
        .await;
    hydra
        .create_client("calm-agent", READER.1, "mcp:tools", &[audience])
        .await;
    let bearer = |token: String| format!("Bearer {token}");
    let looping = bearer(
        hydra
            .token("looping-agent", AGENT.1, "mcp:tools", audience)
            .await,
    );
    let calm = bearer(
        hydra
            .token("calm-agent", READER.1, "mcp:tools", audience)
            .await,
    );
    let init = json!({"jsonrpc": "2.0", "id": 5, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let reply = post_with(&url, None, &[("authorization", &looping)], &init).await;
        statuses.push(reply.status);
        last = Some(reply);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429],
        "a burst of 3, then held"
    );
    let refused = last.expect("a reply");
    assert_eq!(refused.last()["id"], json!(5), "{refused:?}");
    assert_eq!(
        refused.last()["error"]["data"]["limit"],
        json!("newSessionsPerMinute"),
        "{refused:?}"
    );
    let retry_after: u64 = refused
        .retry_after
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=20).contains(&retry_after), "{retry_after}");
    let other = post_with(&url, None, &[("authorization", &calm)], &init).await;
    assert_eq!(other.status, 200, "another caller's own bucket: {other:?}");
    let metrics = scrape(&proxy).await;
    let series = r#"berth_proxy_session_limit_refusals_total{limit="newSessionsPerMinute"}"#;
    assert_eq!(sample(&metrics, series), 2.0, "{metrics}");
    proxy.shutdown().await;
}
