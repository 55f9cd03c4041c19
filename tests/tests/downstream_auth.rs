//! Client bearer-token authentication on the proxy's MCP endpoint (`downstreamAuth`), with a
//! real MCP client (rmcp) and raw HTTP, in front of a recording fault upstream so the test can
//! see that the client's credential never travels upstream.

use std::collections::HashMap;

use berth_crds::DownstreamAuth;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, mcp_url, post_raw, sample, scrape, wait_ready};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

const TOKEN: &str = "client-token-7f3a9c";

async fn start_with_token(upstream_url: &str) -> berth_proxy::RunningProxy {
    let mut cfg = config(upstream_url, "60s");
    cfg.downstream_auth = Some(DownstreamAuth::bearer("BERTH_DOWNSTREAM_TOKEN"));
    let env: HashMap<&str, &str> = HashMap::from([("BERTH_DOWNSTREAM_TOKEN", TOKEN)]);
    berth_proxy::install_crypto_provider();
    let running = berth_proxy::start_with_env(&cfg, &|var| env.get(var).map(|v| (*v).to_owned()))
        .await
        .expect("proxy starts");
    wait_ready(&running, std::time::Duration::from_secs(30)).await;
    running
}

#[tokio::test]
async fn downstream_bearer_token_is_required_on_every_method_and_never_forwarded() {
    let upstream = FaultUpstream::builder().record(true).start().await;
    let proxy = start_with_token(&upstream.url).await;
    let url = mcp_url(&proxy);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();

    // No token, then a wrong one: 401 with a challenge and a JSON-RPC error, nothing upstream.
    let before = upstream.handle().received().len();
    let reply = post_raw(&url, None, &init).await;
    assert_eq!(reply.status, 401, "{reply:?}");
    assert_eq!(reply.last()["error"]["code"], json!(-32600));
    let http = reqwest::Client::new();
    let wrong = http
        .post(&url)
        .bearer_auth("client-token-7f3a9")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.clone())
        .send()
        .await
        .expect("post");
    assert_eq!(wrong.status(), 401);
    assert_eq!(
        wrong.headers()["www-authenticate"],
        "Bearer realm=\"berth\""
    );
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let reply = http
            .request(method.clone(), &url)
            .header("mcp-session-id", "any")
            .send()
            .await
            .expect("request");
        assert_eq!(reply.status(), 401, "{method} without a token");
    }
    assert_eq!(
        upstream.handle().received().len(),
        before,
        "refused requests reach nothing upstream"
    );

    // A real client with the token works end to end.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN),
    );
    let client = ().serve(transport).await.expect("rmcp client with the token connects");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(!tools.is_empty(), "tools listed");
    client.cancel().await.expect("client closes");

    let metrics = scrape(&proxy).await;
    let unauthorized = r#"berth_proxy_invalid_messages_total{reason="unauthorized"}"#;
    assert_eq!(sample(&metrics, unauthorized), 4.0, "{metrics}");
    // The upstream never sees the client's token (the proxy's credential is its own).
    for request in upstream.handle().received() {
        assert!(
            request
                .headers
                .iter()
                .all(|(name, value)| name != "authorization" && !value.contains(TOKEN)),
            "client credential forwarded upstream: {:?}",
            request.headers
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn downstream_auth_with_unset_token_variable_is_a_clear_start_error() {
    let upstream = FaultUpstream::start().await;
    let mut cfg = config(&upstream.url, "60s");
    cfg.downstream_auth = Some(DownstreamAuth::bearer("BERTH_TEST_UNSET_TOKEN"));
    for value in [None, Some("   ")] {
        let error = berth_proxy::start_with_env(&cfg, &|_| value.map(str::to_owned))
            .await
            .err()
            .expect("an unset or blank token must not start an open proxy");
        let text = error.to_string();
        assert!(
            text.contains("BERTH_TEST_UNSET_TOKEN")
                && text.contains("downstreamAuth.bearerTokenEnv"),
            "{text}"
        );
    }
}
