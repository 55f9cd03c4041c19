//! Real MCP servers started as child processes on loopback.
//!
//! The Node reference server comes from `tests/peers/node` (installed by `make test` with
//! `npm ci`); `loopback.mjs` makes it bind 127.0.0.1 instead of every interface. The Python SDK
//! server is `tests/peers/python/server.py`, run by the venv `tests/peers/python/install.sh`
//! makes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{free_port, repo_root, wait_for};

/// A running MCP server; killed when dropped.
pub struct Peer {
    /// Its Streamable HTTP endpoint, e.g. `http://127.0.0.1:41234/mcp`.
    pub url: String,
    /// Its TCP port.
    pub port: u16,
    _child: Child,
}

/// Starts `@modelcontextprotocol/server-everything` in Streamable HTTP mode.
///
/// # Panics
/// When the package is not installed (run `make test`) or the server does not listen within
/// 30 s.
pub async fn everything() -> Peer {
    let dir = repo_root().join("tests/peers/node");
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "{} missing: run `make test` (it runs npm ci in tests/peers/node)",
        entry.display()
    );
    let mut command = Command::new("node");
    command
        .arg("--import")
        .arg(dir.join("loopback.mjs"))
        .arg(&entry)
        .arg("streamableHttp");
    serve_on_free_port(command, "server-everything").await
}

/// Spawns `command` with `PORT` set to a free loopback port and waits until it listens there.
///
/// # Panics
/// When the child exits before it listens (its port was taken meanwhile: the wait ends at
/// once, naming the exit, instead of running out or reaching another program's socket), or
/// it does not listen within 30 s.
async fn serve_on_free_port(mut command: Command, what: &str) -> Peer {
    let port = free_port();
    let mut child = command
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let child_ref = &mut child;
    wait_for(
        &format!("{what} to listen"),
        Duration::from_secs(30),
        || {
            if let Ok(Some(status)) = child_ref.try_wait() {
                panic!("{what} exited before it listened on port {port}: {status}");
            }
            async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
            }
        },
    )
    .await;
    Peer {
        url: format!("http://127.0.0.1:{port}/mcp"),
        port,
        _child: child,
    }
}

/// Starts `tests/peers/python/server.py` (a stateful server written with the Python `mcp` SDK)
/// in Streamable HTTP mode.
///
/// The interpreter is `$BERTH_PYTHON` when set, else the one `tests/peers/python/install.sh`
/// wrote to `${BERTH_CACHE_DIR:-$HOME/.cache/berth}/python-peer`.
///
/// # Panics
/// When neither names an interpreter (run `tests/peers/python/install.sh`) or the server does
/// not listen within 30 s.
pub async fn python_server() -> Peer {
    let script = repo_root().join("tests/peers/python/server.py");
    assert!(script.exists(), "{} missing", script.display());
    let mut command = Command::new(python_interpreter());
    command.arg(&script);
    serve_on_free_port(command, "the Python MCP server").await
}

/// As [`python_server`], with `MODERN_ONLY=1`: the server speaks only MCP 2026-07-28 and
/// refuses `initialize` (and every legacy request) with 400 and -32022, as a server without the
/// legacy revisions would.
///
/// # Panics
/// As [`python_server`].
pub async fn python_server_modern_only() -> Peer {
    let script = repo_root().join("tests/peers/python/server.py");
    let mut command = Command::new(python_interpreter());
    command.arg(&script).env("MODERN_ONLY", "1");
    serve_on_free_port(command, "the modern-only Python MCP server").await
}

/// Starts `tests/peers/python/traced_server.py` (the Python SDK peer with the OpenTelemetry
/// SDK) over Streamable HTTP, exporting its spans to the OTLP/HTTP endpoint `otlp` as service
/// `python-upstream`.
///
/// # Panics
/// As [`python_server`].
pub async fn python_traced_server(otlp: &str) -> Peer {
    let script = repo_root().join("tests/peers/python/traced_server.py");
    let mut command = Command::new(python_interpreter());
    command.arg(&script).env("BERTH_TRACED_OTLP_ENDPOINT", otlp);
    serve_on_free_port(command, "the traced Python MCP server").await
}

/// The Python interpreter of the peer venv (`BERTH_PYTHON`, else the path
/// `tests/peers/python/install.sh` recorded under the cache directory).
///
/// # Panics
/// When neither is set up.
pub fn python_interpreter() -> PathBuf {
    if let Some(python) = std::env::var_os("BERTH_PYTHON") {
        return python.into();
    }
    let cache = std::env::var_os("BERTH_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/berth")))
        .expect("BERTH_CACHE_DIR or HOME is set");
    let marker = cache.join("python-peer");
    let python = std::fs::read_to_string(&marker).unwrap_or_else(|_| {
        panic!(
            "{} missing: run tests/peers/python/install.sh (make test runs it)",
            marker.display()
        )
    });
    python.trim().into()
}

/// Runs the client `script` of `tests/peers/clients` with `program` (an interpreter: the peer
/// venv's python, or `node`) and `args`, and returns the one JSON line it printed.
///
/// # Panics
/// When it cannot be run, exits non-zero (its stderr is shown) or prints no JSON.
pub async fn run_client(
    program: &std::path::Path,
    script: &str,
    args: &[&str],
) -> serde_json::Value {
    let script = repo_root().join("tests/peers/clients").join(script);
    let output = Command::new(program)
        .arg(&script)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|err| panic!("failed to run {}: {err}", script.display()));
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the client prints one JSON line")
}
