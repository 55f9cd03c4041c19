//! Unit tests of [`super`]: pod states from Pod YAML as a kubelet reports it, whom to ask, and
//! digests.

use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).expect("pod fixture parses")
}

const RUNNING_READY: &str = "metadata: {name: b}
status:
  podIP: 10.0.0.2
  conditions: [{type: Ready, status: 'True'}]
  initContainerStatuses:
  - {name: upstream, image: x, imageID: 'docker.io/mcp/everything@sha256:aa', ready: true, restartCount: 0}
  containerStatuses:
  - {name: proxy, image: y, imageID: 'ghcr.io/berth@sha256:bb', ready: true, restartCount: 0}
";

const RUNNING_NOT_READY: &str = "metadata: {name: a}
status:
  podIP: 10.0.0.1
  conditions: [{type: Ready, status: 'False'}]
";

const PENDING: &str = "metadata: {name: c}\nstatus: {phase: Pending}\n";

const TERMINATING: &str = "metadata: {name: d, deletionTimestamp: '2030-01-01T00:00:00Z'}
status: {podIP: 10.0.0.4, conditions: [{type: Ready, status: 'True'}]}
";

#[test]
fn pod_states_read_readiness_ip_and_sidecar_image_id_sorted_by_name() {
    let states = pod_states(&[pod(RUNNING_READY), pod(RUNNING_NOT_READY), pod(PENDING)]);
    let names: Vec<&str> = states.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(
        states[1],
        PodState {
            name: "b".to_owned(),
            ready: true,
            ip: Some("10.0.0.2".to_owned()),
            upstream_image_id: Some("docker.io/mcp/everything@sha256:aa".to_owned()),
        }
    );
    assert!(!states[0].ready);
    assert_eq!(states[2].ip, None);
}

#[test]
fn pod_states_skip_terminating_pods() {
    let states = pod_states(&[pod(TERMINATING), pod(PENDING)]);
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].name, "c");
}

#[test]
fn ask_whom_prefers_a_ready_pod_then_any_pod_with_an_ip() {
    let states = pod_states(&[pod(RUNNING_NOT_READY), pod(RUNNING_READY), pod(PENDING)]);
    assert_eq!(ask_whom(&states), Some(("b", "10.0.0.2")));
    let states = pod_states(&[pod(RUNNING_NOT_READY), pod(PENDING)]);
    assert_eq!(ask_whom(&states), Some(("a", "10.0.0.1")));
    assert_eq!(ask_whom(&pod_states(&[pod(PENDING)])), None);
}

#[test]
fn upstream_image_id_prefers_ready_pod() {
    let mut other = pod(RUNNING_NOT_READY);
    other
        .status
        .as_mut()
        .expect("status")
        .init_container_statuses = Some(vec![
        serde_yaml::from_str(
            "{name: upstream, image: x, imageID: 'old@sha256:00', ready: false, restartCount: 0}",
        )
        .expect("container status"),
    ]);
    let states = pod_states(&[other.clone(), pod(RUNNING_READY)]);
    assert_eq!(
        upstream_image_id(&states),
        Some("docker.io/mcp/everything@sha256:aa")
    );
    assert_eq!(
        upstream_image_id(&pod_states(&[other])),
        Some("old@sha256:00")
    );
}

#[test]
fn digest_of_reference_image_id_and_tag() {
    assert_eq!(digest("r/x@sha256:ab"), Some("sha256:ab"));
    assert_eq!(digest("docker-pullable://r/x@sha256:ab"), Some("sha256:ab"));
    assert_eq!(digest("sha256:ab"), Some("sha256:ab"));
    assert_eq!(digest("r/x:latest"), None);
}

#[test]
fn tools_summary_parses_the_proxy_admin_body() {
    let body = r#"{"count":2,"fingerprint":"sha256:ff","drifted":[],"missing":["nope"]}"#;
    let summary: ToolsSummary = serde_json::from_str(body).expect("summary parses");
    assert_eq!(summary.count, 2);
    assert_eq!(summary.fingerprint.as_deref(), Some("sha256:ff"));
    assert_eq!(summary.missing, ["nope"]);
}

/// A proxy that accepts TCP and never answers is `Timeout` (reason `ProxyReportTimeout`, field
/// case BR-19) even when the HTTP client's own per-request timeout expires in the same timer
/// tick as the overall one, which a paused clock makes certain.
#[tokio::test(start_paused = true)]
async fn br_19_admin_port_that_never_answers_is_a_timeout_not_a_failure() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = i32::from(listener.local_addr().expect("addr").port());
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let http = super::http_client().expect("client");
    let report = super::ask(&http, "pod-0", "127.0.0.1", port).await;
    held.abort();
    assert_eq!(
        report,
        ProxyReport::Timeout {
            pod: "pod-0".to_owned()
        }
    );
}

/// A refused connection is `Failed` with the client's message, not a timeout.
#[tokio::test]
async fn admin_port_that_refuses_is_a_failure_with_the_reason() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        i32::from(listener.local_addr().expect("addr").port())
    };
    let http = super::http_client().expect("client");
    let report = super::ask(&http, "pod-0", "127.0.0.1", port).await;
    let ProxyReport::Failed { pod, error } = report else {
        panic!("a refused connection is a failure: {report:?}");
    };
    assert_eq!(pod, "pod-0");
    assert!(!error.is_empty());
}
