//! Edge cases of token validation, with tokens signed by test keys (`testdata/`) and a key set
//! served on 127.0.0.1 by an axum router. The real authorization server (ORY Hydra) is in
//! `tests/tests/oauth.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use berth_crds::proxy_config::oauth::{JwsAlgorithm, OAuthSpec, all_algorithms};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::*;

const RSA_A: &str = include_str!("testdata/rsa-a.pem");
const RSA_A_PUBLIC: &str = include_str!("testdata/rsa-a.pub.pem");
const RSA_B: &str = include_str!("testdata/rsa-b.pem");
const EC: &str = include_str!("testdata/ec.pem");
const AUDIENCE: &str = "https://weather.example.com/mcp";

struct Issuer {
    url: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    fetches: Arc<AtomicUsize>,
    fetched_at: Arc<Mutex<Vec<std::time::Instant>>>,
    metadata_issuer: Arc<Mutex<Option<String>>>,
    /// While set, the key set answers 503.
    failing: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone)]
struct Served {
    url: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    fetches: Arc<AtomicUsize>,
    fetched_at: Arc<Mutex<Vec<std::time::Instant>>>,
    metadata_issuer: Arc<Mutex<Option<String>>>,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

async fn metadata(State(s): State<Served>) -> axum::Json<Value> {
    let issuer = s.metadata_issuer.lock().expect("lock").clone();
    axum::Json(json!({
        "issuer": issuer.unwrap_or_else(|| s.url.clone()),
        "jwks_uri": format!("{}jwks", s.url),
    }))
}

async fn jwks(State(s): State<Served>) -> Result<axum::Json<JwkSet>, axum::http::StatusCode> {
    s.fetches.fetch_add(1, Ordering::SeqCst);
    s.fetched_at
        .lock()
        .expect("lock")
        .push(std::time::Instant::now());
    if s.failing.load(Ordering::SeqCst) {
        return Err(axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
    let keys = s.keys.lock().expect("lock").clone();
    Ok(axum::Json(JwkSet { keys }))
}

async fn issuer() -> Issuer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    let served = Served {
        url: url.clone(),
        keys: Arc::default(),
        fetches: Arc::default(),
        fetched_at: Arc::default(),
        metadata_issuer: Arc::default(),
        failing: Arc::default(),
    };
    let app = Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/jwks", get(jwks))
        .with_state(served.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Issuer {
        url,
        keys: served.keys,
        fetches: served.fetches,
        fetched_at: served.fetched_at,
        metadata_issuer: served.metadata_issuer,
        failing: served.failing,
    }
}

fn encoding_key(pem: &str, alg: Algorithm) -> EncodingKey {
    match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .expect("a test key")
}

fn jwk(pem: &str, alg: Algorithm, kid: &str) -> Jwk {
    let mut jwk = Jwk::from_encoding_key(&encoding_key(pem, alg), alg).expect("a public JWK");
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn claims(issuer: &str) -> Value {
    json!({
        "iss": issuer, "aud": [AUDIENCE], "sub": "agent-7", "client_id": "weather-agent",
        "scp": ["mcp:tools"], "exp": now() + 300, "iat": now(), "nbf": now() - 1,
    })
}

fn sign(pem: &str, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &encoding_key(pem, alg)).expect("signs")
}

/// A served issuer whose key set holds RSA key "a" (RS256), with the crypto provider installed.
async fn issuer_with_key_a() -> Issuer {
    crate::install_crypto_provider();
    let issuer = issuer().await;
    issuer
        .keys
        .lock()
        .expect("lock")
        .push(jwk(RSA_A, Algorithm::RS256, "a"));
    issuer
}

fn server(issuer: &Issuer, scopes: &[&str], algorithms: Vec<JwsAlgorithm>) -> ResourceServer {
    server_with(issuer, scopes, algorithms, |_| {})
}

/// As [`server`], with `adjust` applied to the spec first.
fn server_with(
    issuer: &Issuer,
    scopes: &[&str],
    algorithms: Vec<JwsAlgorithm>,
    adjust: impl FnOnce(&mut OAuthSpec),
) -> ResourceServer {
    let mut spec = OAuthSpec {
        issuer: issuer.url.clone(),
        audience: AUDIENCE.into(),
        required_scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        allowed_algorithms: algorithms,
        jwks_refresh: None,
        clock_skew: Some(berth_crds::duration::DurationString::new("30s")),
        max_key_age: None,
        require_access_token_type: false,
    };
    adjust(&mut spec);
    let registry = prometheus::Registry::new();
    ResourceServer::new(
        &spec,
        reqwest::Client::new(),
        AuthMetrics::register(&registry),
    )
    .expect("a resource server")
    .with_min_refetch(Duration::from_millis(200))
}

fn invalid(result: Result<Principal, Rejection>) -> String {
    match result {
        Err(Rejection::InvalidToken(why)) => why,
        other => panic!("expected invalid_token, got {other:?}"),
    }
}

#[tokio::test]
async fn a_token_signed_by_the_issuer_for_this_audience_names_its_principal() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &["mcp:tools"], all_algorithms());
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    let principal = server.authenticate(&token).await.expect("accepted");
    assert_eq!(principal.subject.as_deref(), Some("agent-7"));
    assert_eq!(principal.client_id.as_deref(), Some("weather-agent"));
    assert_eq!(principal.scopes, ["mcp:tools"]);
    server.authenticate(&token).await.expect("accepted again");
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1, "keys are cached");
}

#[tokio::test]
async fn expired_wrong_audience_wrong_issuer_and_future_tokens_are_invalid() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms());
    let with = |key: &str, value: Value| {
        let mut c = claims(&issuer.url);
        c[key] = value;
        sign(RSA_A, Algorithm::RS256, Some("a"), &c)
    };
    let expired = with("exp", json!(now() - 31));
    assert!(invalid(server.authenticate(&expired).await).contains("expired"));
    let within_skew = with("exp", json!(now() - 5));
    server
        .authenticate(&within_skew)
        .await
        .expect("within the 30s clock skew");
    let audience = with("aud", json!(["https://other.example.com/mcp"]));
    assert!(invalid(server.authenticate(&audience).await).contains("audience"));
    let issuer_claim = with("iss", json!("https://evil.example.com/"));
    assert!(invalid(server.authenticate(&issuer_claim).await).contains("issuer"));
    let future = with("nbf", json!(now() + 120));
    assert!(invalid(server.authenticate(&future).await).contains("not valid yet"));
    let mut no_exp = claims(&issuer.url);
    no_exp.as_object_mut().expect("object").remove("exp");
    let no_exp = sign(RSA_A, Algorithm::RS256, Some("a"), &no_exp);
    assert!(invalid(server.authenticate(&no_exp).await).contains("exp"));
    let mut tampered = with("sub", json!("agent-7")).into_bytes();
    let last = tampered.len() - 3;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert!(invalid(server.authenticate(&tampered).await).contains("signature"));
}

#[tokio::test]
async fn alg_none_and_hmac_with_the_public_key_as_secret_are_refused() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms());
    use base64::Engine as _;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "kid": "a"})),
        b64(&claims(&issuer.url))
    );
    assert!(invalid(server.authenticate(&none).await).contains("not a signed JWT"));
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("a".into());
    let confused = jsonwebtoken::encode(
        &header,
        &claims(&issuer.url),
        &EncodingKey::from_secret(RSA_A_PUBLIC.as_bytes()).expect("a secret"),
    )
    .expect("signs");
    assert!(invalid(server.authenticate(&confused).await).contains("HS256"));
    assert!(invalid(server.authenticate("not-a-jwt").await).contains("not a signed JWT"));
}

#[tokio::test]
async fn a_key_bound_to_one_algorithm_refuses_tokens_of_another() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms());
    let pss = sign(RSA_A, Algorithm::PS256, Some("a"), &claims(&issuer.url));
    assert!(invalid(server.authenticate(&pss).await).contains("does not match"));
    let only_es = self::server(&issuer, &[], vec![JwsAlgorithm::ES256]);
    let rs = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    assert!(invalid(only_es.authenticate(&rs).await).contains("not allowed"));
}

#[tokio::test]
async fn a_rotated_key_is_fetched_on_its_first_token_and_made_up_kids_are_rate_limited() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms());
    let old = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    server.authenticate(&old).await.expect("old key");
    tokio::time::sleep(Duration::from_millis(250)).await;
    {
        let mut keys = issuer.keys.lock().expect("lock");
        keys.push(jwk(RSA_B, Algorithm::RS256, "b"));
        keys.push(jwk(EC, Algorithm::ES256, "c"));
    }
    let new = sign(RSA_B, Algorithm::RS256, Some("b"), &claims(&issuer.url));
    server.authenticate(&new).await.expect("rotated key");
    let ec = sign(EC, Algorithm::ES256, Some("c"), &claims(&issuer.url));
    server.authenticate(&ec).await.expect("EC key, same fetch");
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2);
    // Made-up kids right after a fetch: the concurrent ones wait for one fetch together.
    let made_up = sign(RSA_B, Algorithm::RS256, Some("zzz"), &claims(&issuer.url));
    let verdicts = futures::future::join_all((0..5).map(|_| server.authenticate(&made_up))).await;
    for verdict in verdicts {
        assert!(invalid(verdict).contains("no signing key"));
    }
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        3,
        "concurrent unknown kids share one fetch"
    );
    // One after another: each waits out the interval, so fetches stay one per interval.
    for _ in 0..2 {
        assert!(invalid(server.authenticate(&made_up).await).contains("no signing key"));
    }
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 5);
    // The issuer saw fetches 3, 4 and 5 at least the interval apart (less the time a request
    // takes to arrive; without the limit they would be a few milliseconds apart).
    let at = issuer.fetched_at.lock().expect("lock").clone();
    for pair in at[2..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(150),
            "fetches at least the interval apart: {gap:?}"
        );
    }
}

#[tokio::test]
async fn a_key_created_just_after_a_fetch_is_accepted_after_the_interval() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms());
    server.refresh_keys().await;
    issuer
        .keys
        .lock()
        .expect("lock")
        .push(jwk(RSA_B, Algorithm::RS256, "b"));
    let new = sign(RSA_B, Algorithm::RS256, Some("b"), &claims(&issuer.url));
    server
        .authenticate(&new)
        .await
        .expect("the new key is fetched once the interval has passed");
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_missing_scope_is_insufficient_scope_naming_it() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &["mcp:tools", "mcp:write"], all_algorithms());
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    assert_eq!(
        server.authenticate(&token).await,
        Err(Rejection::InsufficientScope(vec!["mcp:write".into()]))
    );
    assert_eq!(
        server.metadata()["scopes_supported"],
        json!(["mcp:tools", "mcp:write"])
    );
    assert_eq!(server.metadata()["resource"], json!(AUDIENCE));
}

#[tokio::test]
async fn unreachable_or_mismatched_issuer_metadata_is_unavailable_not_invalid() {
    let issuer = issuer_with_key_a().await;
    *issuer.metadata_issuer.lock().expect("lock") = Some("https://elsewhere.example.com/".into());
    let server = server(&issuer, &[], all_algorithms());
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    match server.authenticate(&token).await {
        Err(Rejection::Unavailable(why)) => assert!(why.contains("elsewhere"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 0);
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let gone = Issuer {
        url: format!("http://{}/", closed.local_addr().expect("addr")),
        keys: Arc::default(),
        fetches: Arc::default(),
        fetched_at: Arc::default(),
        metadata_issuer: Arc::default(),
        failing: Arc::default(),
    };
    drop(closed);
    let server = self::server(&gone, &[], all_algorithms());
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&gone.url));
    assert!(matches!(
        server.authenticate(&token).await,
        Err(Rejection::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_huge_kid_is_not_echoed_in_the_refusal() {
    let issuer = issuer_with_key_a().await;
    // A token size limit this high lets the token reach the key lookup.
    let server = server(&issuer, &[], all_algorithms()).with_max_token_bytes(1 << 20);
    let kid = "k".repeat(300_000);
    let token = sign(RSA_A, Algorithm::RS256, Some(&kid), &claims(&issuer.url));
    let why = invalid(server.authenticate(&token).await);
    assert!(why.len() < 256, "a bounded reason: {} bytes", why.len());
    assert!(!why.contains("kkkk"), "the kid is not echoed: {why}");
}

#[tokio::test]
async fn a_token_over_max_token_bytes_is_refused_before_it_is_parsed() {
    let issuer = issuer_with_key_a().await;
    let server = server(&issuer, &[], all_algorithms()).with_max_token_bytes(1024);
    let fetches = issuer.fetches.load(Ordering::SeqCst);
    let token = sign(
        RSA_A,
        Algorithm::RS256,
        Some(&"k".repeat(2000)),
        &claims(&issuer.url),
    );
    let why = invalid(server.authenticate(&token).await);
    assert!(why.contains("limits.maxTokenBytes"), "{why}");
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        fetches,
        "no key fetched for it"
    );
}

#[tokio::test]
async fn a_key_set_without_end_is_refused_once_past_the_limit_not_at_the_timeout() {
    crate::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    let issuer_url = url.clone();
    let endless = || async {
        // Spaces, then never a key set: only a reader that stops at the limit ends early.
        let chunk = axum::body::Bytes::from(vec![b' '; 64 * 1024]);
        let stream = futures::stream::repeat(Ok::<_, std::convert::Infallible>(chunk));
        axum::body::Body::from_stream(stream)
    };
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || {
                let url = issuer_url.clone();
                async move { axum::Json(json!({"issuer": url, "jwks_uri": format!("{url}jwks")})) }
            }),
        )
        .route("/jwks", get(endless));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let spec = OAuthSpec {
        issuer: url.clone(),
        audience: AUDIENCE.into(),
        required_scopes: Vec::new(),
        allowed_algorithms: all_algorithms(),
        jwks_refresh: None,
        clock_skew: None,
        max_key_age: None,
        require_access_token_type: false,
    };
    let server = ResourceServer::new(
        &spec,
        reqwest::Client::new(),
        AuthMetrics::register(&prometheus::Registry::new()),
    )
    .expect("server");
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&url));
    let started = std::time::Instant::now();
    let verdict = server.authenticate(&token).await;
    assert!(
        matches!(verdict, Err(Rejection::Unavailable(_))),
        "{verdict:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at the size limit, not at the fetch timeout: {:?}",
        started.elapsed()
    );
}

/// Issue 39, item 8: keys whose every refresh has failed stop being trusted after
/// `maxKeyAge`: the proxy fails closed (unavailable, not accepted) until a fetch succeeds.
#[tokio::test]
async fn keys_stop_being_trusted_after_max_key_age_while_every_fetch_fails() {
    let issuer = issuer_with_key_a().await;
    let server = server_with(&issuer, &[], all_algorithms(), |spec| {
        spec.max_key_age = Some(berth_crds::duration::DurationString::new("1s"));
    });
    let token = sign(RSA_A, Algorithm::RS256, Some("a"), &claims(&issuer.url));
    server.authenticate(&token).await.expect("fresh keys");
    issuer.failing.store(true, Ordering::SeqCst);
    server.refresh_keys().await;
    server
        .authenticate(&token)
        .await
        .expect("a failed refresh keeps keys younger than maxKeyAge");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let verdict = server.authenticate(&token).await;
    assert!(
        matches!(verdict, Err(Rejection::Unavailable(_))),
        "stale keys are not trusted: {verdict:?}"
    );
    issuer.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server
        .authenticate(&token)
        .await
        .expect("a fetch that succeeds trusts the keys again");
}

/// Issue 39, item 8: with `requireAccessTokenType`, only tokens typed `at+jwt` (RFC 9068) are
/// access tokens; without it, the usual `JWT` type is accepted.
#[tokio::test]
async fn require_access_token_type_accepts_only_at_jwt() {
    let issuer = issuer_with_key_a().await;
    let strict = server_with(&issuer, &[], all_algorithms(), |spec| {
        spec.require_access_token_type = true;
    });
    let typed = |typ: &str| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("a".to_owned());
        header.typ = Some(typ.to_owned());
        jsonwebtoken::encode(
            &header,
            &claims(&issuer.url),
            &encoding_key(RSA_A, Algorithm::RS256),
        )
        .expect("signs")
    };
    let why = invalid(strict.authenticate(&typed("JWT")).await);
    assert!(why.contains("at+jwt"), "{why}");
    strict
        .authenticate(&typed("at+jwt"))
        .await
        .expect("an access token");
    strict
        .authenticate(&typed("application/AT+JWT"))
        .await
        .expect("the media type form, any case");
    let lax = server(&issuer, &[], all_algorithms());
    lax.authenticate(&typed("JWT"))
        .await
        .expect("JWT accepted by default");
}
