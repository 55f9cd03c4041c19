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
            blocked: None,
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
    let report = super::ask(&http, "pod-0", "127.0.0.1", port, "token").await;
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
    let report = super::ask(&http, "pod-0", "127.0.0.1", port, "token").await;
    let ProxyReport::Failed { pod, error } = report else {
        panic!("a refused connection is a failure: {report:?}");
    };
    assert_eq!(pod, "pod-0");
    assert!(!error.is_empty());
}

/// Pods and ReplicaSets with the given controller owner references (kind, uid).
fn owned(kind: &str, name: &str, uid: &str, controller: Option<(&str, &str)>) -> serde_json::Value {
    let owners: Vec<serde_json::Value> = controller
        .into_iter()
        .map(|(owner_kind, owner_uid)| {
            serde_json::json!({"apiVersion": "apps/v1", "kind": owner_kind, "name": "x",
                               "uid": owner_uid, "controller": true})
        })
        .collect();
    let api_version = if kind == "Pod" { "v1" } else { "apps/v1" };
    serde_json::json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "uid": uid, "ownerReferences": owners,
                     "labels": {"app.kubernetes.io/name": "berth-proxy",
                                "app.kubernetes.io/instance": "everything"}}})
}

#[test]
fn owned_pods_labelled_pod_not_of_our_replica_set_is_not_counted() {
    let deployment: Deployment = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "everything", "uid": "d1"}}),
    )
    .expect("deployment");
    let sets: Vec<ReplicaSet> = [
        owned("ReplicaSet", "ours", "rs1", Some(("Deployment", "d1"))),
        owned("ReplicaSet", "theirs", "rs2", Some(("Deployment", "d2"))),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("replica set"))
    .collect();
    let pods: Vec<Pod> = [
        owned("Pod", "ours-1", "p1", Some(("ReplicaSet", "rs1"))),
        owned("Pod", "their-set", "p2", Some(("ReplicaSet", "rs2"))),
        owned("Pod", "bare", "p3", None),
        owned("Pod", "named-like-ours", "p4", Some(("StatefulSet", "rs1"))),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("pod"))
    .collect();
    let names: Vec<String> = owned_pods(&deployment, &sets, pods)
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, ["ours-1"]);
}

/// Serves every request on `127.0.0.1` with `respond(path)`'s status line and body; a body of
/// `None` is endless (chunks of `x` until 64 MiB or the client goes away). Returns the port
/// and the count of body bytes written.
async fn admin_server(
    respond: fn(&str) -> (&'static str, Option<String>),
) -> (i32, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = i32::from(listener.local_addr().expect("addr").port());
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                let (status, body) = respond(&path);
                let Some(body) = body else {
                    let head = format!("HTTP/1.1 {status}\r\ntransfer-encoding: chunked\r\n\r\n");
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                    while counter.load(Ordering::Relaxed) < 64 << 20 {
                        if socket.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                        counter.fetch_add(0x10000, Ordering::Relaxed);
                    }
                    // Never ends the body.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return;
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, written)
}

/// Issue 40: a pod answering the admin port with an endless body cannot make the operator read
/// it to the end (it was read whole, without a limit, and OOM-killed the operator).
#[tokio::test]
async fn admin_answer_without_end_is_abandoned_past_one_mebibyte() {
    let (port, written) = admin_server(|_| ("200 OK", None)).await;
    let http = super::http_client().expect("client");
    let started = std::time::Instant::now();
    let report = super::ask(&http, "pod-0", "127.0.0.1", port, "token").await;
    let ProxyReport::Failed { error, .. } = &report else {
        panic!("an endless answer is a failure: {report:?}");
    };
    assert!(error.contains("more than 1048576 bytes"), "{error}");
    assert!(
        started.elapsed() < REPORT_TIMEOUT,
        "abandoned, not waited for"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = written.load(std::sync::atomic::Ordering::Relaxed);
    // Three answers (/tools, /readyz, /upstream), each abandoned past 1 MiB; what else was
    // written sits in socket buffers. Read to the end, they would have reached the 64 MiB cap.
    assert!(
        sent < 48 << 20,
        "the client stopped reading: {sent} bytes sent"
    );
}

/// Issue 40: what a proxy says reaches status cut to a bound, however long it is.
#[tokio::test]
async fn admin_long_reason_and_names_are_cut_to_the_bound() {
    let (port, _) = admin_server(|path| match path {
        "/tools" => {
            let names: Vec<String> = (0..1000)
                .map(|i| format!("\"{}{i}\"", "n".repeat(600)))
                .collect();
            let body = format!("{{\"count\":1,\"missing\":[{}]}}", names.join(","));
            ("200 OK", Some(body))
        }
        "/readyz" => ("503 Service Unavailable", Some("r".repeat(100_000))),
        _ => ("404 Not Found", Some(String::new())),
    })
    .await;
    let http = super::http_client().expect("client");
    let report = super::ask(&http, "pod-0", "127.0.0.1", port, "token").await;
    let ProxyReport::Answered {
        tools, not_ready, ..
    } = &report
    else {
        panic!("answered: {report:?}");
    };
    let reason = not_ready.as_deref().expect("not ready");
    assert_eq!(reason.chars().count(), MAX_REPORTED_CHARS);
    assert!(reason.ends_with('…'));
    assert_eq!(tools.missing.len(), MAX_REPORTED_NAMES);
    assert!(
        tools
            .missing
            .iter()
            .all(|name| name.chars().count() <= MAX_REPORTED_CHARS)
    );
}

#[test]
fn truncate_keeps_short_text_and_cuts_long_text_on_a_character() {
    assert_eq!(truncate("short"), "short");
    let long = "é".repeat(MAX_REPORTED_CHARS + 1);
    let cut = truncate(&long);
    assert_eq!(cut.chars().count(), MAX_REPORTED_CHARS);
    assert!(cut.ends_with('…'));
    assert_eq!(
        truncate(&"é".repeat(MAX_REPORTED_CHARS)).chars().count(),
        MAX_REPORTED_CHARS
    );
}
