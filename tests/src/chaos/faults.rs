//! The faults of a chaos run, in the order they are injected: for an HTTP upstream, kills and
//! restarts on the same port, a hung upstream, a black hole, forgotten sessions and 404 storms;
//! for stdio children, `SIGKILL`s.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::fault::{FaultHandle, RestartableUpstream};
use crate::stdio::processes;

/// One fault of an HTTP upstream.
#[derive(Clone, Copy, Debug)]
pub enum HttpFault {
    /// Killed (every connection closed), down for this long (refused), restarted on the same
    /// port with no sessions.
    Kill(Duration),
    /// Forgets every session, at least this long after the proxy recovered from the previous
    /// fault, just after
    /// the calls held for it were let go: the calls in flight get 404. (An upstream session
    /// lost within 10 s of its handshake is a quick loss, which the proxy paces with backoff,
    /// failing callers meanwhile; after a longer calm it re-initializes at once and replays the
    /// refused calls.)
    Forget(Duration),
    /// Killed, then accepts connections and never answers for this long, then restarted.
    Hang(Duration),
    /// Killed, then drops connection attempts for this long, then restarted.
    BlackHole(Duration),
    /// Every request (initialize included) gets 404 for this long.
    NotFound(Duration),
    /// `n` storms of 404 for `on`, `off` apart.
    NotFoundBursts {
        /// How many storms.
        n: u32,
        /// Length of each.
        on: Duration,
        /// Gap after each.
        off: Duration,
    },
}

/// The HTTP faults of one run, in order.
pub fn http_faults() -> Vec<HttpFault> {
    let ms = Duration::from_millis;
    vec![
        HttpFault::Kill(ms(1000)),
        HttpFault::Forget(ms(0)),
        HttpFault::Hang(ms(3000)),
        HttpFault::NotFound(ms(2000)),
        HttpFault::Kill(ms(0)),
        HttpFault::Forget(ms(12_000)),
        HttpFault::BlackHole(ms(3000)),
        HttpFault::NotFoundBursts {
            n: 5,
            on: ms(200),
            off: ms(300),
        },
        HttpFault::Kill(ms(1000)),
        HttpFault::NotFound(ms(2000)),
    ]
}

impl HttpFault {
    /// How long after the previous fault ended this one may begin at the earliest.
    pub fn calm_before(&self) -> Duration {
        match self {
            Self::Forget(calm) => *calm,
            _ => Duration::ZERO,
        }
    }

    /// What it does, for the report.
    pub fn describe(&self) -> String {
        let ms = |d: &Duration| d.as_millis();
        match self {
            Self::Kill(down) if down.is_zero() => "killed and restarted at once".to_owned(),
            Self::Kill(down) => format!("killed, down {} ms, restarted", ms(down)),
            Self::Forget(calm) if calm.is_zero() => "forgot every session".to_owned(),
            Self::Forget(calm) => {
                format!("forgot every session after {} ms without a fault", ms(calm))
            }
            Self::Hang(window) => format!("hung (accepts, never answers) {} ms", ms(window)),
            Self::BlackHole(window) => format!("black hole (SYN dropped) {} ms", ms(window)),
            Self::NotFound(window) => format!("404 storm {} ms", ms(window)),
            Self::NotFoundBursts { n, on, off } => {
                format!("{n} 404 storms of {} ms, {} ms apart", ms(on), ms(off))
            }
        }
    }

    /// Injects it into `upstream` and waits until it is over; `current` follows the serving
    /// incarnation's handle (`None` while none serves).
    pub async fn inject(
        &self,
        upstream: &mut RestartableUpstream,
        current: &Mutex<Option<FaultHandle>>,
    ) {
        let publish = |upstream: &RestartableUpstream| {
            *current.lock().unwrap_or_else(PoisonError::into_inner) = upstream.handle();
        };
        match *self {
            Self::Kill(down) => {
                upstream.kill();
                publish(upstream);
                tokio::time::sleep(down).await;
                upstream.restart().await;
            }
            Self::Forget(_) => {
                // The calls let go for this fault are on their way.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(handle) = upstream.handle() {
                    handle.expire_all();
                }
            }
            Self::Hang(window) => {
                upstream.silence().await;
                publish(upstream);
                tokio::time::sleep(window).await;
                upstream.restart().await;
            }
            Self::BlackHole(window) => {
                upstream.black_hole().await;
                publish(upstream);
                tokio::time::sleep(window).await;
                upstream.restart().await;
            }
            Self::NotFound(window) => {
                if let Some(handle) = upstream.handle() {
                    handle.not_found_for(window);
                }
                tokio::time::sleep(window).await;
            }
            Self::NotFoundBursts { n, on, off } => {
                for _ in 0..n {
                    if let Some(handle) = upstream.handle() {
                        handle.not_found_for(on);
                    }
                    tokio::time::sleep(on + off).await;
                }
            }
        }
        publish(upstream);
    }
}

/// One fault of a stdio upstream's children.
#[derive(Clone, Copy, Debug)]
pub enum StdioFault {
    /// `SIGKILL` to one child (the n-th by pid, cycling).
    KillOne,
    /// `SIGKILL` to every other child.
    KillHalf,
    /// `SIGKILL` to every child, the supervisor's included.
    KillAll,
}

/// The stdio faults of one run, in order.
pub fn stdio_faults() -> Vec<StdioFault> {
    use StdioFault::{KillAll, KillHalf, KillOne};
    vec![
        KillOne, KillOne, KillHalf, KillOne, KillAll, KillOne, KillHalf, KillOne,
    ]
}

impl StdioFault {
    /// What it does, for the report.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::KillOne => "SIGKILL one child",
            Self::KillHalf => "SIGKILL every other child",
            Self::KillAll => "SIGKILL every child",
        }
    }

    /// Sends `SIGKILL` to the chosen live children of `parent` (fault number `k` of the run);
    /// returns how many it killed.
    pub fn inject(&self, parent: u32, k: usize) -> usize {
        let mut children: Vec<u32> = processes()
            .into_iter()
            .filter(|p| p.ppid == parent && p.state != 'Z')
            .map(|p| p.pid)
            .collect();
        children.sort_unstable();
        let chosen: Vec<u32> = match self {
            Self::KillOne => children
                .get(k % children.len().max(1))
                .into_iter()
                .copied()
                .collect(),
            Self::KillHalf => children.into_iter().step_by(2).collect(),
            Self::KillAll => children,
        };
        chosen.iter().filter(|pid| kill(**pid)).count()
    }
}

/// `SIGKILL` to `pid`; whether it was sent.
fn kill(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .is_ok()
}

/// The serving handle, shared with the tasks that use it while faults swap incarnations.
pub type CurrentHandle = Arc<Mutex<Option<FaultHandle>>>;
