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

/// A free TCP port on 127.0.0.1 for a test server started next, in 20000–29999: below the
/// kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`) and the NodePort range.
///
/// A port the kernel handed to `bind(0)` and that was released again can be handed to the next
/// `bind(0)` (another test's proxy listener) or `connect` (a client's source port) before the
/// server meant for it binds; that server then fails, and a readiness wait may reach the other
/// socket instead. No `bind(0)` or `connect` takes a port below the ephemeral range, and within
/// one test process the ports taken here are never handed out twice (a counter from a start
/// that differs per process), so only another program binding that very port could collide.
///
/// # Panics
/// If no port in the range can be bound.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let high = ephemeral_low().clamp(PORTS_FROM + 1_000, PORTS_BELOW);
    let span = u32::from(high - PORTS_FROM);
    let start = std::process::id().wrapping_mul(7_919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = PORTS_FROM + u16::try_from(offset).expect("offset below the span");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {PORTS_FROM}..{high}");
}

/// Lowest port [`free_port`] hands out.
const PORTS_FROM: u16 = 20_000;
/// [`free_port`] stays below this: 30000–32767 is Kubernetes' default NodePort range, which the
/// one-node cluster's kube-proxy serves.
const PORTS_BELOW: u16 = 30_000;

/// The lowest port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
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
    /// for it binds, and one test process never gets the same port twice.
    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_repeat() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        assert!(
            ports
                .iter()
                .all(|&port| (PORTS_FROM..low.min(PORTS_BELOW)).contains(&port)),
            "a port outside {PORTS_FROM}..{}: {ports:?}",
            low.min(PORTS_BELOW)
        );
        let kernel: Vec<u16> = (0..50)
            .map(|_| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind(0)");
                listener.local_addr().expect("local addr").port()
            })
            .collect();
        assert!(
            kernel.iter().all(|port| !ports.contains(port)),
            "bind(0) handed out a port free_port gave: {kernel:?}"
        );
    }
}
