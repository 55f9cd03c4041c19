//! One child process: spawned with piped stdin, stdout and stderr, and stopped in the order the
//! issue asks for: close stdin, wait the grace, SIGTERM, wait the grace, SIGKILL, and always
//! reap (no zombies; issue 4, "Shutdown").

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// A spawned child and its three pipes (taken by their owners).
pub struct Spawned {
    /// The process.
    pub child: Child,
    /// Its stdin (the writer's).
    pub stdin: ChildStdin,
    /// Its stdout (the reader's).
    pub stdout: ChildStdout,
    /// Its stderr (the drain's).
    pub stderr: ChildStderr,
}

/// Starts `argv[0]` with `argv[1..]`, every stdio stream piped. The child is killed if the
/// handle is dropped without [`stop`] (a last resort; [`stop`] is the orderly path).
///
/// # Errors
/// The OS error when the program cannot be started (not found, not executable), or
/// `InvalidInput` for an empty `argv`.
pub fn spawn(argv: &[String]) -> std::io::Result<Spawned> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let missing = || std::io::Error::other("child pipe missing");
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    Ok(Spawned {
        child,
        stdin,
        stdout,
        stderr,
    })
}

/// Stops `child` whose stdin the caller has already closed: waits `grace` for it to exit, then
/// sends SIGTERM, waits `grace` again, then SIGKILL, and reaps it. Returns its exit status
/// (`None` only if waiting failed, which the OS does not do for a child of ours).
///
/// # Cancellation
/// Dropping the future leaves the child to `kill_on_drop` (SIGKILL, reaped by tokio).
pub async fn stop(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Ok(status)) = tokio::time::timeout(grace, child.wait()).await {
        return Some(status);
    }
    signal(child, Signal::SIGTERM);
    if let Ok(Ok(status)) = tokio::time::timeout(grace, child.wait()).await {
        return Some(status);
    }
    signal(child, Signal::SIGKILL);
    child.wait().await.ok()
}

fn signal(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// The exit code label of `status`: `0`-`255`, or `signal`.
pub fn exit_code(status: &ExitStatus) -> String {
    status
        .code()
        .map_or_else(|| "signal".to_owned(), |c| c.to_string())
}
