//! DNS rebinding protection (issue 13; MCP "Streamable HTTP", "Security"; the conformance
//! suite's `dns-rebinding-protection` scenario). A web page on evil.example whose name is
//! rebound to the proxy's address makes the browser send `Host: evil.example:<port>` and
//! `Origin: http://evil.example:<port>`. Before, the proxy served it and sent its own `Host`
//! upstream, so the upstream's own check could not see the attack either.

use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, mcp_url, start_ready};
use serde_json::{Value, json};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"browser","version":"0"}}}"#;

/// POSTs `initialize` to `url` with `headers` (set after the defaults); returns the status and
/// the JSON body.
async fn post(url: &str, headers: &[(&str, String)]) -> (u16, Value) {
    berth_proxy::install_crypto_provider();
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INIT);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("post");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let body = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .map_or_else(|| serde_json::from_str(&text), serde_json::from_str)
        .unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn dns_rebinding_foreign_origin_or_host_gets_403_and_reaches_nothing() {
    let upstream = FaultUpstream::builder().start().await;
    let mut settings = config(&upstream.url, "10s");
    settings.request_origin.allowed_origins = vec!["https://inspector.example.com".into()];
    let proxy = start_ready(&settings).await;
    let url = mcp_url(&proxy);
    let port = proxy.mcp_addr.port();
    let evil = format!("evil.example:{port}");
    let initializes = upstream.count("initialize");

    let (status, body) = post(
        &url,
        &[("host", evil.clone()), ("origin", format!("http://{evil}"))],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["id"], Value::Null);
    assert_eq!(body["error"]["code"], json!(-32600), "{body}");
    let get = reqwest::Client::new()
        .get(&url)
        .header("origin", format!("http://{evil}"))
        .send()
        .await
        .expect("get");
    assert_eq!(get.status().as_u16(), 403, "GET is checked too");

    for (case, headers) in [
        ("no Origin (not a browser)", vec![]),
        (
            "loopback origin",
            vec![("origin", format!("http://localhost:{port}"))],
        ),
        (
            "listed origin",
            vec![("origin", "https://inspector.example.com".to_owned())],
        ),
        ("any Host by default", vec![("host", evil.clone())]),
    ] {
        let (status, body) = post(&url, &headers).await;
        assert_eq!(status, 200, "{case}: {body}");
        assert!(
            body["result"]["protocolVersion"].is_string(),
            "{case}: {body}"
        );
    }
    assert_eq!(
        upstream.count("initialize"),
        initializes,
        "Shared: answered from the cached handshake, nothing new upstream"
    );
    let metrics = berth_tests::proxy::scrape(&proxy).await;
    assert_eq!(
        berth_tests::proxy::sample(
            &metrics,
            r#"berth_proxy_invalid_messages_total{reason="origin"}"#
        ),
        2.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn dns_rebinding_allowed_hosts_pin_the_names_an_ingress_sends() {
    let upstream = FaultUpstream::builder().start().await;
    let mut settings = config(&upstream.url, "10s");
    settings.request_origin.allowed_hosts = vec!["mcp.example.com".into()];
    let proxy = start_ready(&settings).await;
    let url = mcp_url(&proxy);
    let port = proxy.mcp_addr.port();
    let (refused, body) = post(&url, &[("host", format!("evil.example:{port}"))]).await;
    assert_eq!(refused, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("allowedHosts")),
        "{body}"
    );
    for host in [
        format!("mcp.example.com:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        let (status, body) = post(&url, &[("host", host.clone())]).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    proxy.shutdown().await;
}
