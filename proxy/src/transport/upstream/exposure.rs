//! Whether an HTTP upstream on the pod's loopback also answers on the pod's own IP (issue 40,
//! item 3): a server bound to `0.0.0.0` can be called by any pod straight on `<podIP>:<port>`,
//! past authentication, grants, rate limits, drift checks and audit.
//!
//! The check is a TCP connect, nothing is sent: first to the upstream's loopback address (so a
//! server that is not listening yet is "not known", never "not exposed"), then to the same
//! port on the pod IP (`BERTH_POD_IP`, from the downward API). Each connect is bounded by
//! [`CONNECT_TIMEOUT`]. Until the loopback connect succeeds it is tried again every
//! [`RETRY_INTERVAL`]; after that the check repeats every [`RECHECK_INTERVAL`], so a server
//! that rebinds is seen within that. The result is served as `exposed` on the admin port's
//! `/upstream` and as the gauge `berth_proxy_upstream_exposed`.
//!
//! Not responsible for: stopping such calls (the NetworkPolicy the operator creates does) or
//! upstreams that are not on loopback (nothing to compare).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use prometheus::IntGauge;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Longest one connect of the check may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Wait before checking again while the upstream does not answer on loopback yet.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// Wait before checking again once a result is known.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(60);

const UNKNOWN: u8 = 0;
const EXPOSED: u8 = 1;
const LOOPBACK_ONLY: u8 = 2;

/// The addresses one check connects to: the upstream's loopback address and the same port on
/// the pod IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The upstream as the proxy reaches it, e.g. `127.0.0.1:3001`.
    pub loopback: SocketAddr,
    /// The same port on the pod IP, e.g. `10.244.0.7:3001`.
    pub pod: SocketAddr,
}

impl Probe {
    /// The probe of an upstream at `url` in a pod with IP `pod_ip` (the text of
    /// `BERTH_POD_IP`): `None` when the URL's host is not a loopback IP or `localhost`, it has
    /// no port, or `pod_ip` is unset, not an IP, or the loopback address itself.
    pub fn of(url: &reqwest::Url, pod_ip: Option<&str>) -> Option<Self> {
        let port = url.port_or_known_default()?;
        let host = url.host_str()?;
        let host: IpAddr = if host.eq_ignore_ascii_case("localhost") {
            IpAddr::from([127, 0, 0, 1])
        } else {
            // An IPv6 host keeps its brackets in a URL.
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .ok()?
        };
        let pod_ip: IpAddr = pod_ip?.trim().parse().ok()?;
        (host.is_loopback() && pod_ip != host).then_some(Self {
            loopback: SocketAddr::new(host, port),
            pod: SocketAddr::new(pod_ip, port),
        })
    }

    /// One check: `None` when the upstream does not answer on loopback (not listening yet),
    /// else whether it answers on the pod IP too.
    ///
    /// # Cancellation
    /// Safe to drop: it only connects, and drops what it connected.
    pub async fn check(&self) -> Option<bool> {
        if !answers(self.loopback).await {
            return None;
        }
        Some(answers(self.pod).await)
    }
}

/// Whether a TCP connect to `addr` succeeds within [`CONNECT_TIMEOUT`].
async fn answers(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// The last result of the check, shared with the admin endpoints.
#[derive(Debug)]
pub struct Exposure {
    state: AtomicU8,
    gauge: IntGauge,
}

impl Exposure {
    /// An exposure not known yet, published to `gauge` (`berth_proxy_upstream_exposed`: 1 when
    /// exposed, else 0).
    pub fn new(gauge: IntGauge) -> Self {
        gauge.set(0);
        Self {
            state: AtomicU8::new(UNKNOWN),
            gauge,
        }
    }

    /// `Some(true)` when the upstream's port answered on the pod IP at the last check,
    /// `Some(false)` when it answered on loopback only, `None` when not checked (stdio, an
    /// upstream not on loopback, no pod IP) or not answering on loopback yet.
    pub fn get(&self) -> Option<bool> {
        match self.state.load(Ordering::Relaxed) {
            EXPOSED => Some(true),
            LOOPBACK_ONLY => Some(false),
            _ => None,
        }
    }

    fn set(&self, exposed: Option<bool>) {
        let state = match exposed {
            Some(true) => EXPOSED,
            Some(false) => LOOPBACK_ONLY,
            None => UNKNOWN,
        };
        let before = self.state.swap(state, Ordering::Relaxed);
        self.gauge.set(i64::from(exposed == Some(true)));
        if state == EXPOSED && before != EXPOSED {
            tracing::warn!(
                "the upstream's port answers on the pod ip, so other pods can call it past the \
                 proxy; bind the server to 127.0.0.1"
            );
        }
    }

    /// Checks `probe` until `stop` fires: every [`RETRY_INTERVAL`] while the upstream does not
    /// answer on loopback, then every [`RECHECK_INTERVAL`].
    ///
    /// # Cancellation
    /// Safe to drop; ends soon after `stop` fires.
    pub async fn watch(&self, probe: Probe, stop: CancellationToken) {
        loop {
            let exposed = tokio::select! {
                exposed = probe.check() => exposed,
                () = stop.cancelled() => return,
            };
            self.set(exposed);
            let wait = if exposed.is_some() {
                RECHECK_INTERVAL
            } else {
                RETRY_INTERVAL
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).expect("url")
    }

    #[test]
    fn probe_of_loopback_url_pairs_its_port_with_the_pod_ip() {
        let probe = Probe::of(&url("http://127.0.0.1:3001/mcp"), Some("10.244.0.7"));
        assert_eq!(
            probe,
            Some(Probe {
                loopback: "127.0.0.1:3001".parse().expect("addr"),
                pod: "10.244.0.7:3001".parse().expect("addr"),
            })
        );
        let localhost = Probe::of(&url("http://localhost/mcp"), Some("fd00::7"));
        assert_eq!(
            localhost.map(|p| p.pod),
            Some("[fd00::7]:80".parse().expect("addr"))
        );
    }

    #[test]
    fn probe_of_remote_url_or_without_pod_ip_is_none() {
        assert_eq!(
            Probe::of(&url("http://api.example.com:3001/mcp"), Some("10.0.0.1")),
            None
        );
        assert_eq!(
            Probe::of(&url("http://10.0.0.2:3001/"), Some("10.0.0.1")),
            None
        );
        assert_eq!(Probe::of(&url("http://127.0.0.1:3001/"), None), None);
        assert_eq!(Probe::of(&url("http://127.0.0.1:3001/"), Some("pod")), None);
        assert_eq!(
            Probe::of(&url("http://127.0.0.1:3001/"), Some("127.0.0.1")),
            None
        );
    }
}
