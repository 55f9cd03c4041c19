//! A hop's own CPU time and memory, and its children's counted apart, from `/proc` (through the
//! `procfs` crate).

use anyhow::Context;
use procfs::process::{Process, all_processes};

/// CPU and memory of one process and of everything it spawned, at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User plus system CPU time of the process itself, in seconds.
    pub own_cpu: f64,
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
