//! A real Prometheus server (built from the same Go module pin as `promtool`,
//! `tests/chart/build.sh`) that finds the proxy pods through the Kubernetes API the way an
//! in-cluster Prometheus does (`kubernetes_sd_configs`, role `pod`), scrapes them, and
//! evaluates the rule groups the chart renders. Its HTTP API listens on 127.0.0.1.
//!
//! [`Prometheus::start_static`] scrapes fixed targets instead (a proxy and an operator on
//! loopback), for the dashboard's queries.
//!
//! Not responsible for: rendering the rules (the caller passes the groups).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running Prometheus server; killed on drop.
pub struct Prometheus {
    /// Base URL of its HTTP API, e.g. `http://127.0.0.1:PORT`.
    pub url: String,
    child: Child,
    _dir: tempfile::TempDir,
}

/// Where the cluster's API server is and how to authenticate to it.
pub struct ApiAccess {
    /// `https://host:port`.
    pub server: String,
    /// PEM files: the cluster CA, a client certificate and its key.
    pub ca: PathBuf,
    /// Client certificate.
    pub cert: PathBuf,
    /// Client key.
    pub key: PathBuf,
}

impl Prometheus {
    /// Starts `binary` scraping the berth proxy pods of `namespace` every second, with the
    /// relabelling the chart's PodMonitor does (`namespace`, `mcpupstream`, `pod`), and
    /// evaluating `rule_groups` (the chart PrometheusRule's `spec`, as JSON) every second.
    ///
    /// # Panics
    /// When it cannot start or is not ready within 60 s.
    pub async fn start(
        binary: &Path,
        api: &ApiAccess,
        namespace: &str,
        rule_groups: &Value,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let rules = dir.path().join("rules.json");
        std::fs::write(&rules, rule_groups.to_string()).expect("write rules");
        let tls = format!(
            "{{ ca_file: {}, cert_file: {}, key_file: {} }}",
            api.ca.display(),
            api.cert.display(),
            api.key.display()
        );
        let config = format!(
            r#"global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}
rule_files: [{rules}]
scrape_configs:
  - job_name: berth-proxies
    kubernetes_sd_configs:
      - role: pod
        api_server: {server}
        tls_config: {tls}
        namespaces: {{ names: [{namespace}] }}
    relabel_configs:
      - {{ action: keep, source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name], regex: berth-proxy }}
      - {{ action: keep, source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_managed_by], regex: berth-operator }}
      - {{ action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: admin }}
      - {{ action: replace, source_labels: [__meta_kubernetes_namespace], target_label: namespace }}
      - {{ action: replace, source_labels: [__meta_kubernetes_pod_label_berth_dev_mcpupstream], target_label: mcpupstream }}
      - {{ action: replace, source_labels: [__meta_kubernetes_pod_name], target_label: pod }}
"#,
            rules = rules.display(),
            server = api.server,
        );
        Self::spawn(binary, dir, &config).await
    }

    /// Starts `binary` scraping `targets` (`host:port` of a `/metrics`, each its own job
    /// named by the pair's first element) every second, with no rules.
    ///
    /// # Panics
    /// When it cannot start or is not ready within 60 s.
    pub async fn start_static(binary: &Path, targets: &[(&str, String)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let jobs: String = targets
            .iter()
            .map(|(job, target)| {
                format!(
                    "  - {{ job_name: {job}, static_configs: [{{ targets: ['{target}'] }}] }}\n"
                )
            })
            .collect();
        let config = format!(
            "global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}\n\
             scrape_configs:\n{jobs}"
        );
        Self::spawn(binary, dir, &config).await
    }

    async fn spawn(binary: &Path, dir: tempfile::TempDir, config: &str) -> Self {
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write config");
        let port = crate::free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("failed to start {}: {err}", binary.display()));
        let prometheus = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            _dir: dir,
        };
        let ready = format!("{}/-/ready", prometheus.url);
        crate::wait_for("Prometheus to be ready", Duration::from_secs(60), || {
            let ready = ready.clone();
            async move {
                reqwest::get(&ready)
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())
            }
        })
        .await;
        prometheus
    }

    /// The result of the instant query `expr` (`data.result`: one object per series).
    ///
    /// # Errors
    /// When the request fails or Prometheus refuses the query (its error, e.g. a parse error).
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", expr)
            .finish();
        let body: Value = reqwest::Client::new()
            .get(format!("{}/api/v1/query?{query}", self.url))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The state (`pending` or `firing`) of the alert `name` whose labels include `labels`, or
    /// `None` while it is inactive.
    pub async fn alert_state(&self, name: &str, labels: &[(&str, &str)]) -> Option<String> {
        let body: Value = reqwest::get(format!("{}/api/v1/alerts", self.url))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        body["data"]["alerts"].as_array()?.iter().find_map(|alert| {
            let own = &alert["labels"];
            let matches = own["alertname"] == name
                && labels.iter().all(|(k, v)| own[*k].as_str() == Some(*v));
            matches.then(|| alert["state"].as_str().map(str::to_owned))?
        })
    }
}

/// The Prometheus server binary: `BERTH_PROMETHEUS`, else what `tests/chart/build.sh` builds
/// (cached).
///
/// # Panics
/// When the build script fails.
pub fn binary() -> PathBuf {
    crate::go_tool("BERTH_PROMETHEUS", "tests/chart/build.sh", "prometheus")
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
