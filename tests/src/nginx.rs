//! A real nginx (Debian `nginx-light`, installed by `make test`) as the reverse proxy or ingress
//! in front of berth proxies: default buffering (field case BR-17) and round-robin across
//! replicas without affinity (field case BR-35). Runs unprivileged on 127.0.0.1 from a
//! temporary prefix; killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, wait_for};

/// A running nginx.
pub struct Nginx {
    /// Its listen port on 127.0.0.1.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nginx is required (Debian package nginx-light; `make test` installs it)")
}

impl Nginx {
    /// Starts nginx proxying `/` round-robin to `backends` (`host:port` each) with nginx's
    /// default proxy settings (buffering on, HTTP/1.0 upstream unless `extra` says otherwise),
    /// plus `extra` directives inside the `location`.
    ///
    /// # Panics
    /// When nginx is missing or does not start within 10 s.
    pub async fn start(backends: &[String], extra: &str) -> Self {
        Self::start_with(backends, "", extra).await
    }

    /// As [`Self::start`], plus `upstream_extra` directives inside the `upstream` block (for
    /// example `keepalive 64;`).
    ///
    /// # Panics
    /// When nginx is missing or does not start within 10 s.
    pub async fn start_with(backends: &[String], upstream_extra: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let servers: String = backends
            .iter()
            .map(|b| format!("        server {b};\n"))
            .collect();
        let prefix = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n\
             error_log {prefix}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n    access_log off;\n    client_body_temp_path {prefix}/body;\n\
             proxy_temp_path {prefix}/proxy;\n    fastcgi_temp_path {prefix}/fastcgi;\n\
             uwsgi_temp_path {prefix}/uwsgi;\n    scgi_temp_path {prefix}/scgi;\n\
             upstream berth {{\n{servers}        {upstream_extra}\n    }}\n    server {{\n        listen 127.0.0.1:{port};\n\
             location / {{\n            proxy_pass http://berth;\n            {extra}\n        }}\n    }}\n}}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new(binary())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nginx");
        wait_for("nginx listening", Duration::from_secs(10), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Self {
            port,
            child,
            _dir: dir,
        }
    }

    /// The process id of nginx (one process: `master_process off`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The MCP endpoint through nginx.
    pub fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}
