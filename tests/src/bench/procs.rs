//! A hop's own CPU time and memory, and its children's counted apart, from `/proc` (through the
//! `procfs` crate).
//!
//! A process's own CPU time is read per thread in nanoseconds (`/proc/<pid>/task/*/schedstat`),
//! not only in the clock ticks of `/proc/<pid>/stat`: a tick is 10 ms, so a load of 5,000 calls
//! read in ticks knew CPU per call only to within 2 µs either way, a sixth of nginx's figure
//! (issue 14's ratios were lost in it).

use anyhow::Context;
use procfs::process::{Process, all_processes};

/// CPU and memory of one process and of everything it spawned, at one instant.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// User plus system CPU time of the process itself, in seconds (clock ticks: 10 ms steps).
    pub own_cpu: f64,
    /// CPU time of each of the process's live threads, in nanoseconds, by thread id; empty when
    /// the kernel does not give it. See [`own_cpu_between`].
    pub threads_ns: Vec<(i32, u64)>,
    /// CPU time of its live descendants plus what its reaped children (and theirs) used, in
    /// seconds.
    pub children_cpu: f64,
    /// Resident set of the process itself, in KiB.
    pub own_rss_kib: u64,
    /// Resident sets of its live descendants, summed, in KiB.
    pub children_rss_kib: u64,
    /// Live descendants.
    pub children: usize,
}

/// Reads the [`Usage`] of `pid` and its descendants now.
///
/// # Errors
/// When `pid` has exited or its `/proc` entries cannot be read.
pub fn usage(pid: u32) -> anyhow::Result<Usage> {
    let ticks = procfs::ticks_per_second() as f64;
    let root = Process::new(pid as i32).with_context(|| format!("process {pid}"))?;
    let stat = root.stat().context("stat")?;
    let mut usage = Usage {
        own_cpu: (stat.utime + stat.stime) as f64 / ticks,
        children_cpu: (stat.cutime + stat.cstime).max(0) as f64 / ticks,
        own_rss_kib: root.status().context("status")?.vmrss.unwrap_or(0),
        threads_ns: threads_ns(&root),
        ..Usage::default()
    };
    for process in descendants(pid)? {
        // A child may exit between the listing and the read; it is then in its parent's
        // cutime on the next reading.
        let (Ok(stat), Ok(status)) = (process.stat(), process.status()) else {
            continue;
        };
        let own = stat.utime + stat.stime;
        let reaped = (stat.cutime + stat.cstime).max(0) as u64;
        usage.children_cpu += (own + reaped) as f64 / ticks;
        usage.children_rss_kib += status.vmrss.unwrap_or(0);
        usage.children += 1;
    }
    Ok(usage)
}

/// The process's own CPU time from `before` to `after`, in seconds: from the threads'
/// nanosecond clocks when every thread alive at `before` is still alive at `after` (a thread
/// that ended took its time with it), else from the clock ticks.
pub fn own_cpu_between(before: &Usage, after: &Usage) -> f64 {
    let alive = |tid: &i32| after.threads_ns.iter().any(|(t, _)| t == tid);
    if before.threads_ns.is_empty()
        || after.threads_ns.is_empty()
        || !before.threads_ns.iter().all(|(tid, _)| alive(tid))
    {
        return after.own_cpu - before.own_cpu;
    }
    let at_start = |tid: &i32| {
        before
            .threads_ns
            .iter()
            .find(|(t, _)| t == tid)
            .map_or(0, |(_, ns)| *ns)
    };
    let total: u64 = after
        .threads_ns
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(at_start(tid)))
        .sum();
    total as f64 / 1e9
}

/// Each live thread's CPU time in nanoseconds; empty if any cannot be read.
fn threads_ns(process: &Process) -> Vec<(i32, u64)> {
    let Ok(tasks) = process.tasks() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks {
        // A thread that ends between the listing and the read is missed, and the reading
        // falls back to clock ticks.
        match task.map(|t| (t.tid, t.schedstat())) {
            Ok((tid, Ok(stat))) => found.push((tid, stat.sum_exec_runtime)),
            _ => return Vec::new(),
        }
    }
    found
}

/// The live processes below `pid` (children, their children, ...).
fn descendants(pid: u32) -> anyhow::Result<Vec<Process>> {
    let mut all: Vec<(i32, Process)> = Vec::new();
    for process in all_processes().context("list /proc")?.flatten() {
        if let Ok(stat) = process.stat() {
            all.push((stat.ppid, process));
        }
    }
    let mut parents = vec![pid as i32];
    let mut found = Vec::new();
    while let Some(parent) = parents.pop() {
        let (children, rest): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|(ppid, _)| *ppid == parent);
        all = rest;
        for (_, child) in children {
            parents.push(child.pid);
            found.push(child);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks_s: f64, threads_ns: &[(i32, u64)]) -> Usage {
        Usage {
            own_cpu: ticks_s,
            threads_ns: threads_ns.to_vec(),
            ..Usage::default()
        }
    }

    #[test]
    fn cpu_between_two_readings_is_read_in_nanoseconds_not_ticks() {
        // 2.5 ms of CPU on two threads, between readings whose clock ticks moved by 10 ms.
        let before = at(1.00, &[(10, 4_000_000), (11, 7_000_000)]);
        let after = at(1.01, &[(10, 5_500_000), (11, 8_000_000)]);
        assert!((own_cpu_between(&before, &after) - 0.0025).abs() < 1e-12);
    }

    #[test]
    fn a_thread_started_between_the_readings_counts_whole() {
        let before = at(1.0, &[(10, 4_000_000)]);
        let after = at(1.0, &[(10, 5_000_000), (12, 300_000)]);
        assert!((own_cpu_between(&before, &after) - 0.0013).abs() < 1e-12);
    }

    #[test]
    fn a_thread_that_ended_between_the_readings_falls_back_to_ticks() {
        let before = at(1.00, &[(10, 4_000_000), (11, 7_000_000)]);
        let after = at(1.02, &[(10, 5_000_000)]);
        assert!((own_cpu_between(&before, &after) - 0.02).abs() < 1e-9);
    }

    #[test]
    fn this_process_threads_are_read() {
        let usage = usage(std::process::id()).expect("own usage");
        let own_tid = procfs::process::Process::myself()
            .and_then(|p| p.task_main_thread())
            .expect("main thread")
            .tid;
        assert!(
            usage.threads_ns.iter().any(|(tid, _)| *tid == own_tid),
            "threads: {:?}",
            usage.threads_ns
        );
    }
}
