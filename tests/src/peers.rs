//! Real MCP servers started as child processes on loopback.
//!
//! The Node reference server comes from `tests/peers/node` (installed by `make test` with
//! `npm ci`); `loopback.mjs` makes it bind 127.0.0.1 instead of every interface.

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
    let port = free_port();
    let child = Command::new("node")
        .arg("--import")
        .arg(dir.join("loopback.mjs"))
        .arg(&entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node");
    wait_for(
        "server-everything to listen",
        Duration::from_secs(30),
        || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
        },
    )
    .await;
    Peer {
        url: format!("http://127.0.0.1:{port}/mcp"),
        port,
        _child: child,
    }
}
