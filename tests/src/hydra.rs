//! A real OAuth 2.1 authorization server for the auth tests (issue 15): ORY Hydra, built by
//! `tests/auth/build.sh` from the Go tool pinned in `tests/auth/hydra/go.mod`, with an in-memory
//! store, JWT access tokens and the client-credentials grant. Its public and admin APIs listen
//! on 127.0.0.1.
//!
//! The binary comes from `BERTH_HYDRA` (`make test` sets it), else the build script is run
//! (cached, so only the first run builds).
//!
//! Not responsible for: what the proxy does with the tokens (the tests check that).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A running Hydra; killed on drop.
pub struct Hydra {
    /// The issuer identifier and public API base, `http://127.0.0.1:PORT/` (trailing slash, as
    /// in the tokens' `iss`).
    pub issuer: String,
    /// The admin API base, `http://127.0.0.1:PORT`.
    pub admin: String,
    http: reqwest::Client,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The Hydra binary: `BERTH_HYDRA`, else what `tests/auth/build.sh` builds (cached).
///
/// # Panics
/// When the build script fails.
pub fn binary() -> PathBuf {
    crate::go_tool("BERTH_HYDRA", "tests/auth/build.sh", "hydra")
}

impl Hydra {
    /// Starts Hydra on two free ports and waits until its admin API is ready.
    ///
    /// # Panics
    /// When it cannot start or is not ready within 60 s.
    pub async fn start() -> Self {
        berth_proxy::install_crypto_provider();
        let dir = tempfile::tempdir().expect("temp dir");
        let (public, admin) = (crate::free_port(), crate::free_port());
        let issuer = format!("http://127.0.0.1:{public}/");
        // `dsn: memory` keeps clients and keys in this process only; `strategies.access_token:
        // jwt` makes access tokens RFC 9068 JWTs signed with the `hydra.jwt.access-token` keys.
        let config = format!(
            "dsn: memory\n\
             serve:\n  public: {{host: 127.0.0.1, port: {public}}}\n  admin: {{host: 127.0.0.1, port: {admin}}}\n\
             urls: {{self: {{issuer: '{issuer}'}}}}\n\
             secrets: {{system: [berth-tests-system-secret-0123456789]}}\n\
             strategies: {{access_token: jwt}}\n\
             log: {{level: warn}}\n"
        );
        let config_path = dir.path().join("hydra.yml");
        std::fs::write(&config_path, config).expect("write hydra.yml");
        let log = std::fs::File::create(dir.path().join("hydra.log")).expect("log file");
        let binary = binary();
        let child = Command::new(&binary)
            .args(["serve", "all", "--dev", "--config"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("failed to start {}: {err}", binary.display()));
        let hydra = Self {
            issuer,
            admin: format!("http://127.0.0.1:{admin}"),
            // No idle connections kept: Hydra may close one just as it is reused, which fails
            // the next request with `IncompleteMessage` (seen on a token request made seconds
            // after the readiness poll).
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_else(|err| panic!("failed to build the Hydra client: {err}")),
            child,
            _dir: dir,
        };
        let ready = format!("{}/health/ready", hydra.admin);
        let public_ready = format!("{}health/ready", hydra.issuer);
        // The key set too: Hydra makes its signing keys (RSA) when first asked, which on a
        // loaded machine outlasts a request's time there; here a slow first answer is retried.
        let keys = format!("{}.well-known/jwks.json", hydra.issuer);
        crate::wait_for("Hydra to be ready", Duration::from_secs(60), || {
            let (ready, public_ready, keys) = (ready.clone(), public_ready.clone(), keys.clone());
            let http = &hydra.http;
            async move {
                for url in [ready, public_ready, keys] {
                    if !http.get(&url).send().await.ok()?.status().is_success() {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await;
        hydra
    }

    /// The proxy's client authentication against this issuer: JWT access tokens for
    /// `audience` carrying the scope `mcp:tools`, any asymmetric algorithm, every other OAuth
    /// setting at its default.
    pub fn downstream_auth(&self, audience: &str) -> berth_crds::DownstreamAuth {
        berth_crds::DownstreamAuth {
            bearer_token_env: None,
            oauth: Some(berth_crds::proxy_config::oauth::OAuthSpec {
                issuer: self.issuer.clone(),
                audience: audience.to_owned(),
                required_scopes: vec!["mcp:tools".into()],
                allowed_algorithms: berth_crds::proxy_config::oauth::all_algorithms(),
                jwks_refresh: None,
                clock_skew: None,
                max_key_age: None,
                require_access_token_type: false,
            }),
        }
    }

    /// Registers a client-credentials client that may ask for `scope` (space-separated) and
    /// the audiences `audience`.
    ///
    /// # Panics
    /// When Hydra refuses.
    pub async fn create_client(&self, id: &str, secret: &str, scope: &str, audience: &[&str]) {
        let body = json!({
            "client_id": id,
            "client_secret": secret,
            "grant_types": ["client_credentials"],
            "scope": scope,
            "audience": audience,
            "token_endpoint_auth_method": "client_secret_post",
            "access_token_strategy": "jwt",
        });
        let reply = self
            .http
            .post(format!("{}/admin/clients", self.admin))
            .json(&body)
            .send()
            .await
            .expect("POST /admin/clients");
        let status = reply.status();
        assert!(
            status.is_success(),
            "creating client {id}: {status} {}",
            reply.text().await.unwrap_or_default()
        );
    }

    /// An access token (a JWT) from the client-credentials grant for `scope` and `audience`.
    ///
    /// # Panics
    /// When Hydra refuses.
    pub async fn token(&self, id: &str, secret: &str, scope: &str, audience: &str) -> String {
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", id),
            ("client_secret", secret),
            ("scope", scope),
            ("audience", audience),
        ];
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        // A token request changes nothing at Hydra, so one whose connection closed unanswered
        // (Hydra busy making keys) is sent again.
        let mut tries = 0;
        let reply = loop {
            tries += 1;
            let sent = self
                .http
                .post(format!("{}oauth2/token", self.issuer))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(reply) => break reply,
                Err(error) if tries < 3 => eprintln!("POST /oauth2/token, try {tries}: {error}"),
                Err(error) => panic!("POST /oauth2/token: {error:?}"),
            }
        };
        let status = reply.status();
        let body: Value = reply.json().await.expect("token response is JSON");
        assert!(status.is_success(), "token for {id}: {status} {body}");
        body["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned()
    }

    /// Rotates the access-token signing keys: a new RS256 key `kid` joins the key set and signs
    /// every token issued from now on.
    ///
    /// # Panics
    /// When Hydra refuses.
    pub async fn rotate_access_token_keys(&self, kid: &str) {
        let reply = self
            .http
            .post(format!("{}/admin/keys/hydra.jwt.access-token", self.admin))
            .json(&json!({"alg": "RS256", "use": "sig", "kid": kid}))
            .send()
            .await
            .expect("POST /admin/keys");
        let status = reply.status();
        assert!(
            status.is_success(),
            "rotating keys: {status} {}",
            reply.text().await.unwrap_or_default()
        );
    }
}

impl Drop for Hydra {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
