//! End-to-end test harness: real MCP servers on loopback, the proxy in-process, a counting tap
//! between them, (in `cluster`) the real local control plane with the operator, and (in `node`)
//! the one-node cluster whose kubelet runs Berth's pods.
//!
//! Everything binds 127.0.0.1 only. Every wait has a deadline.

pub mod bench;
pub mod chaos;
pub mod cluster;
pub mod fault;
pub mod hydra;
pub mod jaeger;
pub mod nginx;
pub mod node;
pub mod peers;
pub mod prometheus;
pub mod proxy;
pub mod proxy_process;
pub mod rmcp_client;
pub mod stdio;
pub mod tap;

use std::time::Duration;

/// Polls `check` until it returns `Some` or `deadline` passes.
///
/// # Panics
/// When the deadline passes, with `what` in the message.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= end {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; fine for test servers started next).
///
/// # Panics
/// If no port can be bound.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// The repository root.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A Go-built tool the tests run: the path in `$env_var` when set, else `binary` in the
/// directory the (cached) build `script` prints on its last line, e.g.
/// `go_tool("BERTH_HYDRA", "tests/auth/build.sh", "hydra")`.
///
/// # Panics
/// When the build script cannot run or fails.
pub fn go_tool(env_var: &str, script: &str, binary: &str) -> std::path::PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return path.into();
    }
    let script = repo_root().join(script);
    let output = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
    assert!(output.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .expect("the build script prints the bin dir");
    std::path::PathBuf::from(dir.trim()).join(binary)
}
