//! Stdio upstreams in tests: the scriptable fault child (`tests/peers/stdio/fault_child.py`),
//! proxy configs for stdio, and process checks (live children by marker, zombies).

use std::path::PathBuf;
use std::time::Duration;

use berth_crds::{ProxyConfig, SessionStrategy, Transport};
use berth_proxy::RunningProxy;

use crate::repo_root;

/// A unique marker file for one test's fault children: its path is on their command line (so
/// live children can be found) and they append `start <pid> <time>` and `initialize` to it.
pub struct Marker {
    /// The file.
    pub path: PathBuf,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Marker {
    /// A new marker under the system temp directory.
    ///
    /// # Panics
    /// When the directory cannot be made.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "berth-stdio-{name}-{}-{}",
            std::process::id(),
            uuid_like()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self {
            path: dir.join("count"),
            _dir: tempdir::Dir(dir),
        }
    }

    /// Lines of the marker file.
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// How many `initialize` requests the children answered.
    pub fn initializes(&self) -> usize {
        self.lines().iter().filter(|l| *l == "initialize").count()
    }

    /// Start times (seconds since the epoch) of every child, in order.
    pub fn starts(&self) -> Vec<f64> {
        self.lines()
            .iter()
            .filter_map(|l| l.strip_prefix("start "))
            .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
            .collect()
    }

    /// Live processes (not zombies) whose command line names this marker.
    pub fn live_processes(&self) -> usize {
        let needle = self.path.to_string_lossy().into_owned();
        processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && p.cmdline.contains(&needle))
            .count()
    }
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The fault child's argv with `flags`, marked with `marker`.
pub fn fault_child(marker: &Marker, flags: &[&str]) -> Vec<String> {
    let script = repo_root().join("tests/peers/stdio/fault_child.py");
    let mut argv = vec![
        "python3".to_owned(),
        script.to_string_lossy().into_owned(),
        "--count-file".to_owned(),
        marker.path.to_string_lossy().into_owned(),
    ];
    argv.extend(flags.iter().map(|f| (*f).to_owned()));
    argv
}

/// A loopback proxy config for a stdio `command` with `strategy`.
pub fn config(command: Vec<String>, strategy: SessionStrategy) -> ProxyConfig {
    let mut config = crate::proxy::config("http://unused", "10s");
    config.upstream.url = None;
    config.upstream.transport = Transport::Stdio;
    config.upstream.command = command;
    config.session.strategy = strategy;
    config
}

/// Starts the proxy on loopback with the proxy environment `env` (e.g. `BERTH_STDIO_GRACE`),
/// without waiting for readiness.
///
/// # Panics
/// When it cannot start.
pub async fn start(config: &ProxyConfig, env: &[(&str, &str)]) -> RunningProxy {
    berth_proxy::install_crypto_provider();
    let mcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let lookup = move |var: &str| env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone());
    berth_proxy::start_on(config, mcp, admin, &lookup)
        .await
        .expect("proxy starts")
}

/// `/readyz` status code.
///
/// # Panics
/// When the request fails.
pub async fn readyz(running: &RunningProxy) -> u16 {
    reqwest::get(format!("http://{}/readyz", running.admin_addr))
        .await
        .expect("readyz")
        .status()
        .as_u16()
}

/// One process from `/proc`.
#[derive(Debug)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
}

/// Every process visible in `/proc`.
pub fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let after = &stat[stat.rfind(')')? + 2..];
            let mut fields = after.split(' ');
            let state = fields.next()?.chars().next()?;
            let ppid = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline"))
                .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
                .unwrap_or_default();
            Some(Process {
                pid,
                ppid,
                state,
                cmdline,
            })
        })
        .collect()
}

/// Zombie children of this (test) process.
pub fn zombie_children() -> Vec<u32> {
    let me = std::process::id();
    processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.state == 'Z')
        .map(|p| p.pid)
        .collect()
}

/// Waits until `check` holds, polling every 20 ms, for at most `within`; returns the time it
/// took.
///
/// # Panics
/// When it does not hold in time, naming `what`.
pub async fn within<F, Fut>(what: &str, within: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
