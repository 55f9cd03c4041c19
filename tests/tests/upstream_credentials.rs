//! Upstream credentials: a header from the proxy config (literal, or an environment variable as
//! the operator fills it from a Secret) reaches the upstream on every request and appears in no
//! log line, even at trace level. Its own test binary, because it installs a global tracing
//! subscriber that captures everything.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use berth_crds::HeaderSource;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{call, config, mcp_url, open_session, post_raw};
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_all_logs() -> Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .init();
        captured
    })
    .clone()
}

const SECRET: &str = "s3cr3t-token-value-4242";

#[tokio::test]
async fn upstream_header_from_env_reaches_upstream_and_no_log_line() {
    let logs = capture_all_logs();
    let upstream = FaultUpstream::start().await;
    let mut cfg = config(&upstream.url, "10s");
    cfg.upstream.headers = vec![
        HeaderSource {
            name: "Authorization".into(),
            value: None,
            value_env: Some("BERTH_TEST_UPSTREAM_TOKEN".into()),
        },
        HeaderSource {
            name: "X-Team".into(),
            value: Some("search".into()),
            value_env: None,
        },
    ];
    berth_proxy::install_crypto_provider();
    let env = |var: &str| (var == "BERTH_TEST_UPSTREAM_TOKEN").then(|| format!("Bearer {SECRET}"));
    let proxy = berth_proxy::start_with_env(&cfg, &env)
        .await
        .expect("proxy starts");
    berth_tests::proxy::wait_ready(&proxy, std::time::Duration::from_secs(30)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(1), "echo", json!({"message": "hi"})),
    )
    .await;
    assert!(reply.last().get("result").is_some());
    let received = upstream.received();
    assert!(!received.is_empty());
    for request in &received {
        let header = |name: &str| {
            request
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            header("authorization"),
            Some(format!("Bearer {SECRET}")),
            "{request:?}"
        );
        assert_eq!(header("x-team").as_deref(), Some("search"));
    }
    proxy.shutdown().await;
    let text = String::from_utf8_lossy(&logs.0.lock().expect("log buffer")).into_owned();
    assert!(
        text.contains("upstream session initialized"),
        "logs were captured"
    );
    assert!(
        !text.contains(SECRET),
        "the credential leaked into a log line"
    );
}

/// An upstream that answers with a redirect to another origin never gets the proxy to carry its
/// credential headers there: the proxy follows no redirect (reqwest would drop `Authorization`
/// on a cross-origin hop but keep a custom header such as `X-Api-Key`), reports the status as
/// its last upstream error and stays not ready.
#[tokio::test]
async fn upstream_redirect_is_not_followed_so_credentials_stay_with_the_configured_upstream() {
    use axum::http::{StatusCode, header};
    let target = FaultUpstream::start().await;
    let location = target.url.clone();
    let redirector = axum::Router::new().fallback(move || {
        let location = location.clone();
        async move {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let redirector_url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, redirector).await });

    let mut cfg = config(&redirector_url, "10s");
    cfg.upstream.headers = vec![HeaderSource {
        name: "X-Api-Key".into(),
        value: Some(SECRET.into()),
        value_env: None,
    }];
    berth_proxy::install_crypto_provider();
    let proxy = berth_proxy::start_with_env(&cfg, &|_: &str| None)
        .await
        .expect("proxy starts");
    let state_url = format!("http://{}/upstream", proxy.admin_addr);
    let state: serde_json::Value = berth_tests::wait_for(
        "the redirect reported as the last upstream error",
        std::time::Duration::from_secs(15),
        || {
            let state_url = state_url.clone();
            async move {
                let state: serde_json::Value =
                    reqwest::get(&state_url).await.ok()?.json().await.ok()?;
                state["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("307"))
                    .then_some(state)
            }
        },
    )
    .await;
    assert_eq!(state["ready"], json!(false), "{state}");
    assert!(
        target.received().is_empty(),
        "the redirect target received {:?}",
        target.received()
    );
    proxy.shutdown().await;
    server.abort();
}

/// Credentials in the upstream URL's userinfo (`http://user:password@host/...`) never reach a
/// log line: the start-up line and every handshake retry show the URL redacted.
#[tokio::test]
async fn upstream_url_userinfo_appears_in_no_log_line() {
    const PASSWORD: &str = "url-pa55word-9731";
    let logs = capture_all_logs();
    // Nothing listens there, so the proxy logs its start and a few failed handshakes.
    let port = berth_tests::free_port();
    let mut cfg = config(
        &format!("http://admin:{PASSWORD}@127.0.0.1:{port}/mcp"),
        "10s",
    );
    cfg.timeouts.connect = berth_crds::DurationString::new("300ms");
    berth_proxy::install_crypto_provider();
    let proxy = berth_proxy::start_with_env(&cfg, &|_: &str| None)
        .await
        .expect("proxy starts");
    berth_tests::wait_for(
        "a failed handshake logged",
        std::time::Duration::from_secs(10),
        || async {
            let text = String::from_utf8_lossy(&logs.0.lock().expect("log buffer")).into_owned();
            text.contains("upstream handshake").then_some(())
        },
    )
    .await;
    proxy.shutdown().await;
    let text = String::from_utf8_lossy(&logs.0.lock().expect("log buffer")).into_owned();
    assert!(
        text.contains("redacted@127.0.0.1"),
        "the URL is shown, redacted"
    );
    assert!(
        !text.contains(PASSWORD),
        "the URL password leaked into a log line"
    );
}
