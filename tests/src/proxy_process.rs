//! The `berth-proxy` binary as a child process on loopback, and what `/proc` says about it:
//! resident memory, CPU time, threads, open file descriptors (its TCP sockets sorted by what they
//! connect) and child processes. For the benchmarks and the chaos run, whose figures must be the
//! real process's. Linux only (`/proc`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use tokio::process::{Child, Command};

use crate::stdio::{Process, processes};

/// Deadline for the proxy to report ready.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// The proxy binary: `explicit` when given, else `$BERTH_PROXY_BIN`, else the `berth-proxy`
/// beside this program (for a test executable in `target/<profile>/deps`: in the profile's
/// directory above it), built with cargo in the same profile when missing or, with `rebuild`,
/// always (a no-op when it is up to date, so the proxy is built from this tree).
///
/// # Errors
/// When cargo fails or the binary is still missing.
pub fn proxy_bin(explicit: Option<PathBuf>, rebuild: bool) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit.or_else(|| std::env::var_os("BERTH_PROXY_BIN").map(Into::into)) {
        return Ok(path);
    }
    let me = std::env::current_exe().context("current exe")?;
    let mut dir = me.parent().context("exe has a directory")?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir.parent().context("deps/ has a parent")?;
    }
    let bin = dir.join("berth-proxy");
    if bin.exists() && !rebuild {
        return Ok(bin);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "-p", "berth-proxy", "--bin", "berth-proxy"])
        .current_dir(crate::repo_root());
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    eprintln!("building berth-proxy ({})", bin.display());
    let status = build.status().context("run cargo build")?;
    ensure!(
        status.success() && bin.exists(),
        "cargo build -p berth-proxy failed; pass --proxy-bin"
    );
    Ok(bin)
}

/// A `berth-proxy` child process on loopback; killed when dropped.
pub struct ProxyProcess {
    /// Its MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub mcp_url: String,
    /// The port of the MCP endpoint.
    pub mcp_port: u16,
    /// The port of `/metrics`, `/healthz` and `/readyz`.
    pub admin_port: u16,
    child: Child,
}

impl ProxyProcess {
    /// Starts `bin` with `args` (which choose the upstream: `--upstream-url U`, `--config F`),
    /// the environment `env`, stderr to `stderr`, on two free loopback ports, and waits until
    /// `/readyz` answers 200.
    ///
    /// # Errors
    /// When it cannot be spawned or is not ready within 30 s.
    pub async fn start(
        bin: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        stderr: Stdio,
        client: &reqwest::Client,
    ) -> anyhow::Result<Self> {
        Self::start_with_stdout(bin, args, env, Stdio::null(), stderr, client).await
    }

    /// As [`ProxyProcess::start`], with the proxy's stdout (its audit events) to `stdout`;
    /// [`ProxyProcess::take_stdout`] gives a piped one.
    ///
    /// # Errors
    /// As [`ProxyProcess::start`].
    pub async fn start_with_stdout(
        bin: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        stdout: Stdio,
        stderr: Stdio,
        client: &reqwest::Client,
    ) -> anyhow::Result<Self> {
        let mcp_port = crate::free_port();
        let admin_port = crate::free_port();
        let child = Command::new(bin)
            .args(args)
            .arg("--listen")
            .arg(format!("127.0.0.1:{mcp_port}"))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{admin_port}"))
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let proxy = Self {
            mcp_url: format!("http://127.0.0.1:{mcp_port}/mcp"),
            mcp_port,
            admin_port,
            child,
        };
        let deadline = Instant::now() + READY_DEADLINE;
        while !proxy.ready(client).await {
            ensure!(
                Instant::now() < deadline,
                "proxy not ready within {READY_DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(proxy)
    }

    /// Whether `/readyz` answers 200 now.
    pub async fn ready(&self, client: &reqwest::Client) -> bool {
        let ready = format!("http://127.0.0.1:{}/readyz", self.admin_port);
        let response = client.get(&ready).send().await;
        response.is_ok_and(|r| r.status().is_success())
    }

    /// The `/metrics` text.
    ///
    /// # Errors
    /// When the scrape fails.
    pub async fn metrics(&self, client: &reqwest::Client) -> anyhow::Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin_port);
        Ok(client.get(url).send().await?.text().await?)
    }

    /// Its stdout, when started with a piped one (once).
    pub fn take_stdout(&mut self) -> Option<tokio::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Its stderr, when started with a piped one (once).
    pub fn take_stderr(&mut self) -> Option<tokio::process::ChildStderr> {
        self.child.stderr.take()
    }

    /// Its process id.
    ///
    /// # Errors
    /// When it has exited.
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("proxy exited")
    }

    /// How it exited, `None` while it runs.
    ///
    /// # Errors
    /// When its status cannot be read.
    pub fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// `VmRSS` of the process, in KiB.
    ///
    /// # Errors
    /// When `/proc/<pid>/status` cannot be read.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmRSS")
    }

    /// A `kB` line of `/proc/<pid>/status` such as `VmRSS` or `VmHWM` (peak RSS), in KiB.
    ///
    /// # Errors
    /// When the file cannot be read or has no such line.
    pub fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let value = self.status_field(field)?;
        Ok(value.trim_end_matches("kB").trim().parse()?)
    }

    /// How many threads the process has.
    ///
    /// # Errors
    /// When `/proc/<pid>/status` cannot be read.
    pub fn threads(&self) -> anyhow::Result<u64> {
        Ok(self.status_field("Threads")?.parse()?)
    }

    /// The names of the process's threads (`/proc/<pid>/task/*/comm`), sorted.
    ///
    /// # Errors
    /// When `/proc/<pid>/task` cannot be read.
    pub fn thread_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()?))? {
            // A thread that ended between the listing and the read is simply not named.
            if let Ok(name) = std::fs::read_to_string(task?.path().join("comm")) {
                names.push(name.trim_end().to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn status_field(&self, field: &str) -> anyhow::Result<String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .with_context(|| format!("no {field} line"))?;
        Ok(line.trim().to_owned())
    }

    /// Its open file descriptors, the TCP sockets sorted by what they connect; `upstream_port`
    /// names the port of an HTTP upstream.
    ///
    /// # Errors
    /// When `/proc/<pid>/fd` cannot be read.
    pub fn fds(&self, upstream_port: Option<u16>) -> anyhow::Result<Fds> {
        let pid = self.pid()?;
        let sockets = tcp_sockets(pid);
        let mut fds = Fds::default();
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
            // An fd closed between the listing and the readlink is simply not counted.
            let Ok(target) = std::fs::read_link(entry?.path()) else {
                continue;
            };
            fds.total += 1;
            let target = target.to_string_lossy();
            let inode = target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'));
            let Some(inode) = inode else {
                if target.starts_with("pipe:") {
                    fds.pipes += 1;
                } else {
                    fds.other += 1;
                }
                continue;
            };
            let tcp = sockets.get(inode);
            if tcp.is_some_and(|tcp| tcp.state == TCP_CLOSE_WAIT) {
                fds.close_wait += 1;
            }
            match tcp {
                Some(tcp) if tcp.state == TCP_LISTEN => fds.listening += 1,
                Some(tcp) if tcp.local_port == self.mcp_port => fds.from_clients += 1,
                Some(tcp) if tcp.local_port == self.admin_port => fds.admin += 1,
                Some(tcp) if Some(tcp.remote_port) == upstream_port => fds.to_upstream += 1,
                _ => fds.other_sockets += 1,
            }
        }
        Ok(fds)
    }

    /// Its child processes (zombies included).
    ///
    /// # Errors
    /// When it has exited.
    pub fn children(&self) -> anyhow::Result<Vec<Process>> {
        let pid = self.pid()?;
        Ok(processes().into_iter().filter(|p| p.ppid == pid).collect())
    }
}

/// Open file descriptors of a process, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fds {
    /// Every open descriptor.
    pub total: usize,
    /// Listening TCP sockets.
    pub listening: usize,
    /// TCP connections accepted on the proxy's MCP port.
    pub from_clients: usize,
    /// TCP connections accepted on the proxy's admin port.
    pub admin: usize,
    /// TCP connections to the HTTP upstream's port.
    pub to_upstream: usize,
    /// Other sockets (Unix, other TCP).
    pub other_sockets: usize,
    /// Pipes (to stdio children, the runtime's wake-ups).
    pub pipes: usize,
    /// Everything else (epoll, eventfd, files, `/dev/null`).
    pub other: usize,
    /// TCP sockets (of any kind above) the peer has closed and the process has not
    /// (`CLOSE_WAIT`): the usual shape of a leaked connection.
    pub close_wait: usize,
}

impl fmt::Display for Fds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} listening, {} from clients, {} admin, {} to the upstream, {} other sockets, \
             {} pipes, {} other; {} in CLOSE_WAIT)",
            self.total,
            self.listening,
            self.from_clients,
            self.admin,
            self.to_upstream,
            self.other_sockets,
            self.pipes,
            self.other,
            self.close_wait
        )
    }
}

/// `st` of a listening socket in `/proc/net/tcp`.
const TCP_LISTEN: u8 = 0x0A;
/// `st` of a socket whose peer closed while it did not.
const TCP_CLOSE_WAIT: u8 = 0x08;

/// One TCP socket from `/proc/<pid>/net/tcp{,6}`.
struct TcpSocket {
    local_port: u16,
    remote_port: u16,
    state: u8,
}

/// The TCP sockets of `pid`'s network namespace, by inode.
fn tcp_sockets(pid: u32) -> HashMap<String, TcpSocket> {
    let mut sockets = HashMap::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        // Columns: sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(remote), Some(state), Some(inode)) =
                (fields.get(1), fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let port = |address: &str| {
                let hex = address.rsplit_once(':')?.1;
                u16::from_str_radix(hex, 16).ok()
            };
            let (Some(local_port), Some(remote_port), Ok(state)) =
                (port(local), port(remote), u8::from_str_radix(state, 16))
            else {
                continue;
            };
            let socket = TcpSocket {
                local_port,
                remote_port,
                state,
            };
            sockets.insert((*inode).to_owned(), socket);
        }
    }
    sockets
}

/// User plus system CPU time process `pid` used so far, in seconds (`/proc/<pid>/stat`, fields
/// 14 and 15, in clock ticks of 1/100 s, the `USER_HZ` of Linux on every common architecture).
///
/// # Errors
/// When the file cannot be read or parsed.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; fields after it are separated by single spaces.
    let after_name = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields.get(i).context("short stat")?.parse::<f64>()?)
    };
    // After the name, state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
