//! `chaos_proxy`: a chaos run that counts (issue 12, item 9). Not a timed test: for a fixed
//! number of calls it runs concurrent sessions through the real `berth-proxy` process while the
//! upstream is killed and restarted, hangs, is black-holed, forgets its sessions and answers 404
//! storms, one client leaves its standalone stream unread and sessions churn; then it prints calls
//! made and answered, answered to the wrong client and lost (both must be 0), the processes and
//! file descriptors left over (must be 0) and the proxy's memory before and after. A second run
//! does the same with a stdio upstream (`PerClient`, one Python child per session) whose children
//! are killed. See `berth_tests::chaos` for what each figure means.
//!
//! The proxy is `--proxy-bin PATH`, else `$BERTH_PROXY_BIN`, else the `berth-proxy` beside this
//! program, built first with cargo from this tree (a no-op when up to date).
//!
//! Run: `cargo run -p berth-tests --bin chaos_proxy` (20,000 calls over 64 sessions, 200 churned
//! sessions; then 2,000 calls over 16 stdio sessions, 20 churned), or `-- --quick` (2,000 and
//! 40; 300 and 8). Flags:
//! `--calls N`, `--sessions N`, `--churn N`, `--stdio-calls N` (0: no stdio run),
//! `--stdio-sessions N`, `--proxy-bin PATH`. Exits 1 when anything was answered to the wrong
//! client, lost or left over.

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use berth_tests::chaos::{self, Settings};
use berth_tests::proxy_process::proxy_bin;

struct Args {
    proxy_bin: Option<PathBuf>,
    http: Settings,
    stdio: Settings,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        proxy_bin: None,
        http: Settings {
            calls: 20_000,
            sessions: 64,
            churn: 200,
            warm_up: 10,
        },
        stdio: Settings {
            calls: 2_000,
            sessions: 16,
            churn: 20,
            warm_up: 5,
        },
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if flag == "--quick" {
            args.http.calls = 2_000;
            args.http.churn = 40;
            args.stdio.calls = 300;
            args.stdio.churn = 8;
            continue;
        }
        let value = argv
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--proxy-bin" => args.proxy_bin = Some(value.into()),
            "--calls" => args.http.calls = value.parse().context("--calls")?,
            "--sessions" => args.http.sessions = value.parse().context("--sessions")?,
            "--churn" => args.http.churn = value.parse().context("--churn")?,
            "--stdio-calls" => args.stdio.calls = value.parse().context("--stdio-calls")?,
            "--stdio-sessions" => {
                args.stdio.sessions = value.parse().context("--stdio-sessions")?;
            }
            _ => bail!(
                "unknown flag {flag} (known: --quick, --calls, --sessions, --churn, \
                 --stdio-calls, --stdio-sessions, --proxy-bin)"
            ),
        }
    }
    for settings in [&args.http, &args.stdio] {
        ensure!(
            (4..=512).contains(&settings.sessions),
            "sessions must be 4-512"
        );
        ensure!(
            settings.calls == 0 || settings.calls >= 100,
            "calls must be at least 100"
        );
    }
    ensure!(args.http.calls > 0, "--calls must be at least 100");
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    berth_proxy::install_crypto_provider();
    let bin = proxy_bin(args.proxy_bin.clone(), true)?;
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!("chaos_proxy: {profile} build, proxy {}", bin.display());
    let mut reports = vec![chaos::run_http(&bin, args.http).await?];
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    match (args.stdio.calls, python) {
        (0, _) => {}
        (_, false) => println!("no python3: the stdio run is skipped"),
        (_, true) => reports.push(chaos::run_stdio(&bin, args.stdio).await?),
    }
    println!();
    chaos::print(&reports);
    let failed = reports.iter().any(|r| !r.failures().is_empty());
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
