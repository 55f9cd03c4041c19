//! Leader election with two real `berth-operator` processes (issue 5, "Correctness and cost"):
//! exactly one reconciles, counted through each process's own `/metrics`
//! (`berth_operator_api_writes_total`, `berth_operator_reconciliations_total`,
//! `berth_operator_leader`); when the leader is killed (SIGKILL, so its Lease is not released)
//! the other takes over within the lease duration plus slack and reconciles; a leader stopped
//! with SIGTERM releases the Lease and exits 0.
//!
//! Needs `KUBECONFIG` (tests/controlplane/up.sh); the operator binary is this workspace's
//! ([`operator_bin`]).

use std::process::Stdio;
use std::time::{Duration, Instant};

use berth_crds::McpUpstream;
use berth_tests::cluster::operator::operator_bin;
use berth_tests::cluster::{PROXY_IMAGE, TestNamespace, client, ensure_crd};
use berth_tests::{free_port, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use tokio::process::{Child, Command};

const EVERYTHING: &str = include_str!("../../examples/everything.yaml");
/// Lease duration of the test replicas, in seconds.
const LEASE_SECONDS: u64 = 5;
/// Slack on top of the lease duration for a takeover (renew interval, watch latency, a busy
/// machine).
const TAKEOVER_SLACK: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_secs(90);

/// One `berth-operator run --leader-elect` process; killed when dropped.
struct Replica {
    metrics_url: String,
    child: Child,
}

impl Replica {
    fn start(namespace: &str, identity: &str) -> Self {
        let port = free_port();
        let child = Command::new(operator_bin())
            .args(["run", "--namespace", namespace, "--leader-elect"])
            .args(["--lease-namespace", namespace, "--lease-identity", identity])
            .args(["--lease-duration-seconds", &LEASE_SECONDS.to_string()])
            .args(["--lease-renew-grace-seconds", "2", "--resync-seconds", "5"])
            .args(["--proxy-image", PROXY_IMAGE])
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{port}"))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("berth-operator starts");
        Self {
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            child,
        }
    }

    /// `(writes, reconciles, leader)` from the process's `/metrics`, once it serves them.
    async fn counters(&self) -> (u64, u64, u64) {
        let url = self.metrics_url.clone();
        let text = wait_for("operator /metrics", DEADLINE, || {
            let url = url.clone();
            async move { reqwest::get(&url).await.ok()?.text().await.ok() }
        })
        .await;
        let sum = |prefix: &str| -> u64 {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
                .sum()
        };
        (
            sum("berth_operator_api_writes_total{"),
            sum("berth_operator_reconciliations_total{"),
            sum("berth_operator_leader "),
        )
    }
}

fn upstream(name: &str) -> McpUpstream {
    let mut upstream: McpUpstream = serde_yaml::from_str(EVERYTHING).expect("example parses");
    upstream.metadata.name = Some(name.to_owned());
    upstream
}

async fn eventually_holder(ns: &TestNamespace, identity: &str, deadline: Duration) {
    let leases = ns.api::<Lease>();
    wait_for(&format!("{identity} to hold the lease"), deadline, || {
        let leases = leases.clone();
        async move {
            let lease = leases.get_opt("berth-operator").await.ok().flatten()?;
            (lease.spec?.holder_identity? == identity).then_some(())
        }
    })
    .await;
}

async fn eventually_deployment(ns: &TestNamespace, name: &str) {
    let deployments = ns.api::<Deployment>();
    wait_for(&format!("deployment {name}"), DEADLINE, || {
        let deployments = deployments.clone();
        async move { deployments.get_opt(name).await.ok().flatten() }
    })
    .await;
}

#[tokio::test]
async fn operator_processes_one_leader_reconciles_and_successor_takes_over_after_kill() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "op-leader").await;
    let mut first = Replica::start(&ns.name, "replica-a");
    eventually_holder(&ns, "replica-a", DEADLINE).await;
    let mut second = Replica::start(&ns.name, "replica-b");
    let (_, _, second_leader) = second.counters().await;
    assert_eq!(second_leader, 0, "the follower waits");

    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream("one"))
        .await
        .expect("McpUpstream accepted");
    eventually_deployment(&ns, "one").await;
    // A resync period and more: every chance for the follower to (wrongly) reconcile too.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (writes, reconciles, leader) = first.counters().await;
    assert!(
        writes > 0 && reconciles > 0,
        "the leader reconciles: {writes} writes"
    );
    assert_eq!(leader, 1);
    assert_eq!(
        second.counters().await,
        (0, 0, 0),
        "the follower writes nothing"
    );

    // The leader dies without releasing the Lease: the follower waits for it to expire.
    let died = Instant::now();
    first.child.kill().await.expect("leader killed");
    eventually_holder(
        &ns,
        "replica-b",
        Duration::from_secs(LEASE_SECONDS) + TAKEOVER_SLACK,
    )
    .await;
    let takeover = died.elapsed();
    eprintln!("takeover {takeover:?} after SIGKILL (lease {LEASE_SECONDS}s)");
    ns.api::<McpUpstream>()
        .create(&PostParams::default(), &upstream("two"))
        .await
        .expect("McpUpstream accepted");
    eventually_deployment(&ns, "two").await;
    let successor = wait_for("the successor to reconcile", DEADLINE, || {
        let second = &second;
        async move {
            let counters = second.counters().await;
            (counters.0 > 0 && counters.1 > 0).then_some(counters)
        }
    })
    .await;
    assert_eq!(successor.2, 1, "the successor leads");

    // SIGTERM: the leader releases the Lease and exits cleanly.
    let pid = second.child.id().expect("running").to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(signalled.success());
    let exit = tokio::time::timeout(DEADLINE, second.child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait");
    assert!(exit.success(), "clean exit: {exit}");
    let lease = ns
        .api::<Lease>()
        .get("berth-operator")
        .await
        .expect("lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_ne!(
        holder.as_deref(),
        Some("replica-b"),
        "the lease was released"
    );
    ns.delete().await;
}
