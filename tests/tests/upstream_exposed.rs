//! The proxy's check whether its HTTP upstream also answers on the pod's own IP (issue 40,
//! item 3), in-process on loopback: the "pod IP" is the second loopback address 127.0.0.2,
//! the fault upstream listens on 127.0.0.1:PORT and, for an exposed server, on 127.0.0.2:PORT
//! as well (two listeners, both on loopback). The result is `exposed` on the admin port's
//! `/upstream` and the gauge `berth_proxy_upstream_exposed`.

use std::time::Duration;

use berth_crds::proxy_config::upstream::POD_IP_ENV;
use berth_proxy::RunningProxy;
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy::{config, sample, scrape, wait_ready};
use berth_tests::wait_for;
use serde_json::Value;
use tokio::net::TcpListener;

/// The address that plays the pod IP.
const POD_IP: &str = "127.0.0.2";
/// Deadline for the first check (it runs at start, once the upstream answers on loopback).
const CHECK_DEADLINE: Duration = Duration::from_secs(10);

/// Starts a fault upstream on 127.0.0.1 and, when `exposed`, a listener on the same port of
/// [`POD_IP`]; then a proxy told that [`POD_IP`] is its pod's IP.
async fn proxy_with_upstream(exposed: bool) -> (RunningProxy, FaultUpstream, Option<TcpListener>) {
    let loopback = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = loopback.local_addr().expect("addr").port();
    let on_pod_ip = if exposed {
        Some(
            TcpListener::bind((POD_IP, port))
                .await
                .expect("bind the same port on 127.0.0.2"),
        )
    } else {
        None
    };
    let upstream = FaultUpstream::builder().start_on(loopback);
    berth_proxy::install_crypto_provider();
    let config = config(&format!("http://127.0.0.1:{port}/mcp"), "5s");
    let env = |var: &str| (var == POD_IP_ENV).then(|| POD_IP.to_owned());
    let running = berth_proxy::start_with_env(&config, &env)
        .await
        .expect("proxy starts");
    wait_ready(&running, Duration::from_secs(30)).await;
    (running, upstream, on_pod_ip)
}

/// `exposed` of `/upstream` once the proxy has a result.
async fn exposed(running: &RunningProxy) -> bool {
    let url = format!("http://{}/upstream", running.admin_addr);
    wait_for("the exposure check", CHECK_DEADLINE, || {
        let url = url.clone();
        async move {
            let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            body.get("exposed")?.as_bool()
        }
    })
    .await
}

#[tokio::test]
async fn upstream_answering_on_the_pod_ip_is_reported_exposed() {
    let (running, _upstream, _on_pod_ip) = proxy_with_upstream(true).await;
    assert!(exposed(&running).await);
    let metrics = scrape(&running).await;
    assert_eq!(sample(&metrics, "berth_proxy_upstream_exposed"), 1.0);
    running.shutdown().await;
}

#[tokio::test]
async fn upstream_on_loopback_only_is_reported_not_exposed() {
    let (running, _upstream, _) = proxy_with_upstream(false).await;
    assert!(!exposed(&running).await);
    let metrics = scrape(&running).await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "berth_proxy_upstream_exposed 0"),
        "the gauge is exported as 0"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn upstream_without_pod_ip_is_not_checked() {
    let loopback = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = loopback.local_addr().expect("addr").port();
    let _upstream = FaultUpstream::builder().start_on(loopback);
    let running =
        berth_tests::proxy::start_ready(&config(&format!("http://127.0.0.1:{port}/mcp"), "5s"))
            .await;
    let url = format!("http://{}/upstream", running.admin_addr);
    let body: Value = reqwest::get(&url)
        .await
        .expect("/upstream")
        .json()
        .await
        .expect("json");
    assert_eq!(body.get("exposed"), Some(&Value::Null), "{body}");
    running.shutdown().await;
}
