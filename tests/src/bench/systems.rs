//! The systems `bench_proxy` compares, each an MCP endpoint on 127.0.0.1 in front of one of
//! three upstreams: server-everything over Streamable HTTP, server-everything over stdio (one
//! child per connection, spawned by the hop), and the in-repo Rust fixture.
//!
//! Peers are found where `tests/peers/bench/install.sh` puts them: the npm packages in
//! `tests/peers/bench/node_modules`, the Python venv named by `$BERTH_CACHE_DIR/bench-python`,
//! ToolHive's `thv` named by `$BERTH_CACHE_DIR/bench-thv`. One that is missing is reported as
//! skipped, with the reason.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tokio::process::{Child, Command};

use crate::{free_port, repo_root};

/// How long a system may take to listen (and, for Berth, to become ready).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// The upstream a system is in front of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Upstream {
    /// `@modelcontextprotocol/server-everything` over Streamable HTTP (stateful).
    EverythingHttp,
    /// `@modelcontextprotocol/server-everything stdio`, spawned by the hop.
    EverythingStdio,
    /// The in-repo Rust fixture (`berth_tests::fault`), answering `echo` with JSON.
    Fixture,
}

impl Upstream {
    /// Its name in the report.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::EverythingHttp => "server-everything, Streamable HTTP",
            Self::EverythingStdio => "server-everything, stdio",
            Self::Fixture => "Rust fixture, HTTP",
        }
    }
}

/// A running system: its endpoint and the process whose CPU and memory are its own.
pub struct System {
    /// Its name in the report, e.g. `berth Shared`.
    pub name: String,
    pub upstream: Upstream,
    /// Its MCP endpoint.
    pub url: String,
    /// The hop's process; `None` for a direct connection (no hop).
    pub pid: Option<u32>,
    _process: Option<Spawned>,
    _nginx: Option<crate::nginx::Nginx>,
    /// A home directory the hop writes to (ToolHive).
    _home: Option<tempfile::TempDir>,
}

impl System {
    /// The upstream itself, no hop.
    #[must_use]
    pub fn direct(upstream: Upstream, url: &str) -> Self {
        Self {
            name: "direct".to_owned(),
            upstream,
            url: url.to_owned(),
            pid: None,
            _process: None,
            _nginx: None,
            _home: None,
        }
    }
}

/// A child process in a process group of its own; the whole group is killed on drop, so a
/// hop's stdio children go with it.
struct Spawned {
    child: Child,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let group = nix::unistd::Pid::from_raw(-(pid as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Spawns `command` in its own process group, quiet, and waits until `port` accepts.
async fn spawn_listening(mut command: Command, port: u16, what: &str) -> anyhow::Result<Spawned> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {what}"))?;
    let mut spawned = Spawned { child };
    let deadline = tokio::time::Instant::now() + START_DEADLINE;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Some(status) = spawned.child.try_wait()? {
            bail!("{what} exited at start ({status}); run it by hand to see why");
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{what} did not listen on {port} within {START_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(spawned)
}

fn hop(name: &str, upstream: Upstream, url: String, process: Spawned) -> anyhow::Result<System> {
    let pid = process.child.id().context("exited at start")?;
    Ok(System {
        name: name.to_owned(),
        upstream,
        url,
        pid: Some(pid),
        _process: Some(process),
        _nginx: None,
        _home: None,
    })
}

/// server-everything's entry point (`tests/peers/node`).
///
/// # Errors
/// When `npm ci` has not run there.
pub fn everything_entry() -> anyhow::Result<PathBuf> {
    let entry = repo_root().join(
        "tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    ensure!(
        entry.exists(),
        "{} missing: run tests/peers/bench/install.sh",
        entry.display()
    );
    Ok(entry)
}

/// server-everything's stdio command line, as words.
///
/// # Errors
/// As [`everything_entry`].
pub fn everything_stdio() -> anyhow::Result<Vec<String>> {
    Ok(vec![
        "node".to_owned(),
        everything_entry()?.display().to_string(),
        "stdio".to_owned(),
    ])
}

/// The berth proxy (`bin`) with `args` choosing upstream and strategy; ready when `/readyz`
/// answers 200.
///
/// # Errors
/// When it cannot start or does not become ready.
pub async fn berth(
    bin: &Path,
    name: &str,
    upstream: Upstream,
    args: &[&str],
    client: &reqwest::Client,
) -> anyhow::Result<System> {
    let (port, admin) = (free_port(), free_port());
    let mut command = Command::new(bin);
    command
        .args(args)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{admin}"))
        .envs(image_env()?)
        .env("RUST_LOG", "warn");
    let process = spawn_listening(command, port, name).await?;
    let ready = format!("http://127.0.0.1:{admin}/readyz");
    let deadline = tokio::time::Instant::now() + START_DEADLINE;
    while !client
        .get(&ready)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{name} not ready within {START_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hop(
        name,
        upstream,
        format!("http://127.0.0.1:{port}/mcp"),
        process,
    )
}

/// The environment the proxy image sets (`ENV K=V ...` lines of images/proxy.Dockerfile), so
/// the benchmark runs the proxy as a pod does.
///
/// # Errors
/// When the Dockerfile cannot be read or an `ENV` word is not `K=V`.
pub fn image_env() -> anyhow::Result<Vec<(String, String)>> {
    let path = repo_root().join("images/proxy.Dockerfile");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    let mut env = Vec::new();
    for line in text.lines() {
        let Some(words) = line.strip_prefix("ENV ") else {
            continue;
        };
        for word in words.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .with_context(|| format!("{}: ENV {word:?} is not K=V", path.display()))?;
            env.push((key.to_owned(), value.to_owned()));
        }
    }
    Ok(env)
}

/// The berth stdio command line for server-everything, quoted for `--upstream-command`.
///
/// # Errors
/// As [`everything_entry`].
pub fn berth_stdio_command() -> anyhow::Result<String> {
    Ok(shell_words::join(everything_stdio()?))
}

/// `plain_hop` (`tests/src/bin/plain_hop.rs`, built beside `bench_proxy`): Berth's stack (axum,
/// hyper's pooled client, mimalloc, the image's environment) as a plain HTTP hop with no MCP work,
/// in front of `upstream_url`.
///
/// # Errors
/// When the binary is not beside this one or does not listen.
pub async fn plain_hop(upstream: Upstream, upstream_url: &str) -> anyhow::Result<System> {
    let bin = std::env::current_exe()?.with_file_name("plain_hop");
    ensure!(
        bin.exists(),
        "{} missing: cargo build --release -p berth-tests --bin plain_hop",
        bin.display()
    );
    let url = reqwest::Url::parse(upstream_url)?;
    let port = free_port();
    let mut command = Command::new(bin);
    command
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--upstream",
            &format!("{}://{}", url.scheme(), url.authority()),
        ])
        .envs(image_env()?);
    let process = spawn_listening(command, port, "plain_hop").await?;
    hop(
        "plain hop (axum + hyper, no MCP)",
        upstream,
        format!("http://127.0.0.1:{port}{}", url.path()),
        process,
    )
}

/// nginx (one worker, HTTP/1.1 keep-alive to the upstream) in front of `upstream_url`.
///
/// # Errors
/// When the URL has no host or port.
pub async fn nginx(upstream: Upstream, upstream_url: &str) -> anyhow::Result<System> {
    let url = reqwest::Url::parse(upstream_url)?;
    let backend = format!(
        "{}:{}",
        url.host_str().context("upstream host")?,
        url.port_or_known_default().context("upstream port")?
    );
    let nginx = crate::nginx::Nginx::start_with(
        &[backend],
        "keepalive 128;",
        "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off;",
    )
    .await;
    Ok(System {
        name: format!("nginx {}", nginx_version()),
        upstream,
        url: format!("http://127.0.0.1:{}{}", nginx.port, url.path()),
        pid: Some(nginx.pid()),
        _process: None,
        _nginx: Some(nginx),
        _home: None,
    })
}

/// `nginx -v`'s version, or `?`.
fn nginx_version() -> String {
    std::process::Command::new("/usr/sbin/nginx")
        .arg("-v")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stderr).ok())
        .and_then(|text| Some(text.trim().rsplit_once('/')?.1.to_owned()))
        .unwrap_or_else(|| "?".to_owned())
}

fn bench_peer(path: &str) -> anyhow::Result<PathBuf> {
    let path = repo_root()
        .join("tests/peers/bench/node_modules")
        .join(path);
    ensure!(
        path.exists(),
        "{} missing: run tests/peers/bench/install.sh",
        path.display()
    );
    Ok(path)
}

/// `supergateway --stateful` (npm): stdio to Streamable HTTP, a child per session.
///
/// # Errors
/// When it is not installed or does not listen.
pub async fn supergateway() -> anyhow::Result<System> {
    let entry = bench_peer("supergateway/dist/index.js")?;
    let port = free_port();
    let mut command = Command::new("node");
    command
        .arg(entry)
        .arg("--stdio")
        .arg(shell_words::join(everything_stdio()?))
        .args(["--outputTransport", "streamableHttp", "--stateful"])
        .args(["--logLevel", "none", "--port", &port.to_string()]);
    let process = spawn_listening(command, port, "supergateway").await?;
    hop(
        &format!("supergateway {}", npm_version("supergateway")),
        Upstream::EverythingStdio,
        format!("http://127.0.0.1:{port}/mcp"),
        process,
    )
}

/// `mcp-proxy` (npm, TypeScript) in front of the stdio server.
///
/// # Errors
/// When it is not installed or does not listen.
pub async fn mcp_proxy_ts() -> anyhow::Result<System> {
    let entry = bench_peer("mcp-proxy/dist/bin/mcp-proxy.mjs")?;
    let port = free_port();
    let mut command = Command::new("node");
    command
        .arg(entry)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--server", "stream", "--"])
        .args(everything_stdio()?);
    let process = spawn_listening(command, port, "mcp-proxy (TypeScript)").await?;
    hop(
        &format!("mcp-proxy {} (TS)", npm_version("mcp-proxy")),
        Upstream::EverythingStdio,
        format!("http://127.0.0.1:{port}/mcp"),
        process,
    )
}

/// `mcp-proxy` (PyPI, Python) in front of the stdio server.
///
/// # Errors
/// When its venv is not installed or it does not listen.
pub async fn mcp_proxy_python() -> anyhow::Result<System> {
    let python = marker("bench-python")?;
    let program = python.with_file_name("mcp-proxy");
    ensure!(program.exists(), "{} missing", program.display());
    let port = free_port();
    let mut command = Command::new(&program);
    command
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--log-level", "WARNING", "--"])
        .args(everything_stdio()?);
    let process = spawn_listening(command, port, "mcp-proxy (Python)").await?;
    let version = std::process::Command::new(&program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.split_whitespace().last().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    hop(
        &format!("mcp-proxy {version} (Python)"),
        Upstream::EverythingStdio,
        format!("http://127.0.0.1:{port}/mcp"),
        process,
    )
}

/// ToolHive's `thv proxy` (a transparent HTTP proxy) in front of `upstream_url`.
///
/// # Errors
/// When `thv` is not installed or does not listen.
pub async fn toolhive(upstream_url: &str) -> anyhow::Result<System> {
    let thv = marker("bench-thv")?;
    let url = reqwest::Url::parse(upstream_url)?;
    let target = format!("{}://{}", url.scheme(), url.authority());
    let port = free_port();
    let home = tempfile::tempdir()?;
    let mut command = Command::new(&thv);
    command
        .args(["proxy", "bench", "--target-uri", &target])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // thv refuses to start without a container runtime unless told it runs under
        // Kubernetes; `thv proxy` itself uses none. No update check, no usage metrics.
        .env("TOOLHIVE_RUNTIME", "kubernetes")
        .env("TOOLHIVE_SKIP_UPDATE_CHECK", "true")
        .env("TOOLHIVE_USAGE_METRICS_ENABLED", "false")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env("XDG_DATA_HOME", home.path());
    let process = spawn_listening(command, port, "thv proxy").await?;
    let version = std::fs::read_to_string(thv.with_file_name("../version"))
        .map_or_else(|_| "?".to_owned(), |v| v.trim().to_owned());
    let mut system = hop(
        &format!("ToolHive thv proxy {version}"),
        Upstream::EverythingHttp,
        format!("http://127.0.0.1:{port}{}", url.path()),
        process,
    )?;
    system._home = Some(home);
    Ok(system)
}

/// The path a file under the cache directory names (written by `tests/peers/bench/install.sh`).
///
/// # Errors
/// When the file is missing, says the peer is unavailable, or names a path that does not exist.
pub fn marker(name: &str) -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("BERTH_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/berth")))
        .context("BERTH_CACHE_DIR or HOME")?;
    let file = cache.join(name);
    if let Ok(why) = std::fs::read_to_string(cache.join(format!("{name}.unavailable"))) {
        bail!("not installed: {}", why.trim().replace('\n', "; "));
    }
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: run tests/peers/bench/install.sh", file.display()))?;
    let path = PathBuf::from(text.trim());
    if !path.exists() {
        bail!("{} (named in {}) missing", path.display(), file.display());
    }
    Ok(path)
}

/// The version in an installed bench npm package's `package.json`, or `?`.
fn npm_version(package: &str) -> String {
    bench_peer(&format!("{package}/package.json"))
        .ok()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json.get("version")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
