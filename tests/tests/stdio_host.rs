//! `berth-proxy stdio-host` (the stdio pod's upstream sidecar) with the proxy connecting over
//! its Unix socket (`upstream.socket`): one child per connection, the `--max-children` refusal
//! as a JSON-RPC error with outcome `rejected`, disconnect and SIGTERM stopping children,
//! `copy-self`, and the socket kept for the proxy only (issue 40, item 7): a peer of another user
//! is refused, an abstract socket cannot be taken while the host runs.

use std::time::Duration;

use berth_crds::SessionStrategy;
use berth_proxy::transport::stdio::host::{Host, HostSettings};
use berth_tests::proxy::{call, mcp_url, open_session, post_raw, sample, scrape, wait_ready};
use berth_tests::stdio::{Marker, config, fault_child, start, within};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_host_serves_one_child_per_connection_and_refuses_past_max_children() {
    let marker = Marker::new("host");
    let socket = marker.path.with_file_name("host.sock");
    let host = Host::bind(HostSettings {
        socket: socket.clone(),
        // The in-process proxy runs as this test's user: served.
        allowed_uid: Some(own_uid()),
        max_children: 2,
        grace: Duration::from_millis(300),
        command: fault_child(&marker, &["--ignore-sigterm"]),
    })
    .expect("host binds");
    {
        use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
        let meta = std::fs::metadata(&socket).expect("socket exists");
        assert!(meta.file_type().is_socket());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o666,
            "connectable by a proxy running as another UID"
        );
    }
    let stop = CancellationToken::new();
    let hosting = tokio::spawn(host.run(stop.clone()));
    let mut cfg = config(Vec::new(), SessionStrategy::PerClient);
    cfg.upstream.socket = Some(socket.to_string_lossy().into_owned());
    let proxy = start(&cfg, &[]).await;
    wait_ready(&proxy, Duration::from_secs(20)).await;
    let url = mcp_url(&proxy);
    // The probe holds one child; one client session takes the second.
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"tag": "via host"})),
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("via host")
    );
    assert_eq!(marker.live_processes(), 2);
    // A third connection is refused at once: -32014, outcome rejected.
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let refused = post_raw(&url, None, &init.to_string()).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.last()["error"]["code"], json!(-32014));
    assert_eq!(
        refused.last()["error"]["data"]["outcome"],
        json!("rejected")
    );
    assert_eq!(
        sample(&scrape(&proxy).await, "berth_proxy_stdio_refusals_total"),
        1.0
    );
    // Ending the session disconnects; the host stops that child (it ignores SIGTERM: killed).
    let deleted = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status().as_u16(), 204);
    within(
        "the host to stop the child",
        Duration::from_secs(3),
        || async { marker.live_processes() == 1 },
    )
    .await;
    // SIGTERM to the host (its shutdown token) stops and reaps every child.
    proxy.shutdown().await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), hosting)
        .await
        .expect("host stops")
        .expect("join");
    assert_eq!(marker.live_processes(), 0);
    assert!(!socket.exists(), "the socket file is removed");
}

#[test]
fn stdio_copy_self_copies_the_running_executable_with_mode_0755() {
    use std::os::unix::fs::PermissionsExt;
    let marker = Marker::new("copyself");
    let dest = marker.path.with_file_name("berth-proxy");
    berth_proxy::transport::stdio::copy_self(&dest).expect("copy");
    let me = std::env::current_exe().expect("exe");
    let copied = std::fs::metadata(&dest).expect("copied");
    assert_eq!(copied.len(), std::fs::metadata(me).expect("me").len());
    assert_eq!(copied.permissions().mode() & 0o777, 0o755);
}

/// The user this test (and its in-process proxy) runs as: the owner of `/proc/self`.
fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").expect("/proc/self").uid()
}

/// An abstract socket name (`@...`) no other test or run uses.
fn abstract_name(tag: &str) -> std::path::PathBuf {
    format!(
        "@berth-test-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    )
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_host_refuses_a_peer_of_another_user_unanswered_and_counts_it() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let marker = Marker::new("peer");
    let socket = abstract_name("peer");
    // Allowed: a user this test is not, so the test's own connection is another user's.
    let other = own_uid() + 1;
    let host = Host::bind(HostSettings {
        socket: socket.clone(),
        allowed_uid: Some(other),
        max_children: 2,
        grace: Duration::from_millis(300),
        command: fault_child(&marker, &[]),
    })
    .expect("host binds");
    let metrics = host.metrics();
    let stop = CancellationToken::new();
    let hosting = tokio::spawn(host.run(stop.clone()));
    let mut stream =
        tokio::net::UnixStream::connect(berth_proxy::transport::stdio::host::address(&socket))
            .await
            .expect("connects");
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let _ = stream.write_all(format!("{init}\n").as_bytes()).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("closed within 5 s")
        .expect("read");
    assert!(
        answer.is_empty(),
        "nothing is said to a stranger: {answer:?}"
    );
    assert_eq!(metrics.peer_refusals.get(), 1);
    assert_eq!(marker.live_processes(), 0, "no child spawned for it");
    stop.cancel();
    hosting.await.expect("host stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_host_abstract_socket_cannot_be_taken_while_the_host_runs() {
    let marker = Marker::new("abstract");
    let socket = abstract_name("abstract");
    let settings = HostSettings {
        socket: socket.clone(),
        allowed_uid: Some(own_uid()),
        max_children: 2,
        grace: Duration::from_millis(300),
        command: fault_child(&marker, &[]),
    };
    let host = Host::bind(settings.clone()).expect("host binds");
    assert!(!socket.exists(), "no file a child could unlink or replace");
    // What a compromised child would try: bind the name itself.
    let second = Host::bind(settings);
    assert!(
        second.is_err(),
        "the name stays the running host's, never replaced"
    );
    // And the proxy reaches the host through it.
    let stop = CancellationToken::new();
    let hosting = tokio::spawn(host.run(stop.clone()));
    let mut cfg = config(Vec::new(), SessionStrategy::PerClient);
    cfg.upstream.socket = Some(socket.to_string_lossy().into_owned());
    let proxy = start(&cfg, &[]).await;
    wait_ready(&proxy, Duration::from_secs(20)).await;
    let url = mcp_url(&proxy);
    let session = open_session(&url).await;
    let reply = post_raw(
        &url,
        Some(&session),
        &call(json!(2), "echo", json!({"tag": "via abstract socket"})),
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        json!("via abstract socket")
    );
    proxy.shutdown().await;
    stop.cancel();
    hosting.await.expect("host stops");
}
