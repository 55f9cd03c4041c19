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

/// A free TCP port on 127.0.0.1 for a test server started next: in 20000–29999 (below the
/// kernel's ephemeral range, `/proc/sys/net/ipv4/ip_local_port_range`, and Kubernetes' NodePort
/// range), or, where the ephemeral range starts below 21000, above it.
///
/// A port the kernel handed to `bind(0)` and that was released again can be handed to the next
/// `bind(0)` (another test's proxy listener) or `connect` (a client's source port) before the
/// server meant for it binds; that server then fails, and a readiness wait may reach the other
/// socket instead. No `bind(0)` or `connect` takes a port outside the ephemeral range. Within
/// one process a counter never hands a port out twice; across processes (two test runs at
/// once), each port handed out is held by a lock on `$TMPDIR/berth-ports/<port>` until the
/// process ends, and a port another process holds is skipped.
///
/// # Panics
/// If no port in the range can be bound, or the kernel's ephemeral range leaves no range of
/// 1000 ports outside it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let (from, below) = port_range();
    let span = u32::from(below - from);
    let start = std::process::id().wrapping_mul(7_919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = from + u16::try_from(offset).expect("offset below the span");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() && hold(port) {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {from}..{below}");
}

/// The ports [`free_port`] hands out, `from..below`.
fn port_range() -> (u16, u16) {
    const FROM: u16 = 20_000;
    // 30000–32767 is Kubernetes' NodePort range, which the one-node cluster's kube-proxy serves.
    const BELOW: u16 = 30_000;
    let (low, high) = ephemeral_range();
    if low.min(BELOW).saturating_sub(FROM) >= 1_000 {
        return (FROM, low.min(BELOW));
    }
    let above = high.saturating_add(1);
    assert!(
        u16::MAX - above >= 1_000,
        "the ephemeral range {low}-{high} leaves no 1000 ports for test servers"
    );
    (above, u16::MAX)
}

/// The kernel's ephemeral port range (32768–60999 when it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| {
            let mut ends = range.split_whitespace().map(|end| end.parse().ok());
            Some((ends.next()??, ends.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// Takes `port` for this process: an exclusive lock on its file under `$TMPDIR/berth-ports`,
/// held until the process ends. False when another process holds it. When the file cannot be
/// opened (a directory another user made), the port is taken without a lock: two runs at once
/// are then kept apart by the bind check alone.
fn hold(port: u16) -> bool {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("berth-ports");
    let _ = std::fs::create_dir_all(&dir);
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(port.to_string()));
    let Ok(file) = opened else {
        return true;
    };
    if file.try_lock().is_err() {
        return false;
    }
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(file);
    true
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A port from `free_port` is one no `bind(0)` or `connect` can take before the server meant
    /// for it binds, one test process never gets twice, and one another process cannot take
    /// (its lock file is held: a second open of it cannot lock it).
    #[test]
    fn free_ports_are_outside_the_ephemeral_range_never_repeat_and_are_held() {
        let (low, high) = ephemeral_range();
        let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        assert!(
            ports.iter().all(|port| !(low..=high).contains(port)),
            "a port inside the ephemeral range {low}-{high}: {ports:?}"
        );
        for port in &ports[..10] {
            let path = std::env::temp_dir()
                .join("berth-ports")
                .join(port.to_string());
            let again = std::fs::File::open(&path).expect("the port's lock file");
            assert!(again.try_lock().is_err(), "port {port} is not held");
        }
    }
}
