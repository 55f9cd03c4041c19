//! The HTTP client under the Streamable HTTP upstream, chosen once per upstream URL:
//!
//! - **direct**: hyper's pooled HTTP/1.1 client, driven directly, for a plain `http://` upstream
//!   that the environment's proxy settings leave alone (the sidecar beside the proxy: the hot
//!   path). reqwest's layers above hyper (URL handling, the redirect and proxy layers,
//!   request/response wrappers) cost about a fifth of the proxy's allocations per call, so the
//!   hot path does without them (issue 14, docs/benchmarks.md).
//! - **reqwest**: everything else — an `https://` upstream (rustls with ring, reqwest's
//!   certificate handling), or one the environment sends through a proxy.
//!
//! The proxy settings are read as reqwest reads them on Linux (hyper-util's matcher over
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`, upper or lower case, ignored under CGI),
//! so which client carries a request never changes where it goes. Neither client follows
//! redirects, both set `TCP_NODELAY`, and both bound only the connect with the given timeout.
//!
//! Not responsible for: MCP headers, statuses and bodies (the parent module).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error from sending a request or reading its body, whichever client met it: shows as the
/// client's error, whose causes are its sources.
#[derive(Debug)]
pub struct HttpError(BoxError);

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl HttpError {
    pub(crate) fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }
}

/// A response body, whichever client read it.
pub type Body = BoxBody<Bytes, HttpError>;

/// How long an idle pooled connection to the upstream is kept: 4 s, below the 5 s keep-alive
/// timeout of Node's `http.Server` and of uvicorn (the servers under the TypeScript and Python
/// MCP SDKs), so the proxy lets a connection go before the server closes it and never writes a
/// request on one the server is closing (that request would be lost; hyper's and reqwest's
/// default, 90 s, allowed it). The first call after a longer pause opens a new connection (a
/// TCP handshake, on the pod's loopback for a sidecar upstream), and the pool's memory goes
/// back soon after a burst (docs/benchmarks.md, tenth run). Test: `upstream_keep_alive.rs`.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// Which client carries requests to one upstream URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// hyper directly: `http://`, and no proxy applies.
    Direct,
    /// reqwest: `https://`, or a proxy applies.
    Reqwest,
}

/// The route for `target` given the proxy settings `proxies`.
pub fn route(target: &Uri, proxies: &Matcher) -> Route {
    let plain = target.scheme_str() == Some("http");
    if plain && proxies.intercept(target).is_none() {
        Route::Direct
    } else {
        Route::Reqwest
    }
}

/// The client for one upstream URL (cheap to clone: the connection pool is shared).
#[derive(Clone)]
pub enum Client {
    /// hyper's pooled client (shared: a clone is one reference count).
    Direct(Arc<hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>>),
    /// reqwest's client.
    Reqwest(reqwest::Client),
}

impl Client {
    /// The client for `target`, routed by the environment's proxy settings. `connect` bounds
    /// the TCP (and TLS) connect only.
    ///
    /// # Errors
    /// When reqwest's client cannot be built (its TLS setup).
    pub fn new(target: &Uri, connect: Duration) -> Result<Self, reqwest::Error> {
        Self::routed(route(target, &Matcher::from_env()), connect)
    }

    /// The client for `route`.
    ///
    /// # Errors
    /// As [`Self::new`].
    fn routed(route: Route, connect: Duration) -> Result<Self, reqwest::Error> {
        Ok(match route {
            Route::Direct => {
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                connector.set_connect_timeout(Some(connect));
                Self::Direct(Arc::new(
                    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                        .pool_timer(TokioTimer::new())
                        .pool_idle_timeout(POOL_IDLE)
                        .build(connector),
                ))
            }
            Route::Reqwest => Self::Reqwest(
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .connect_timeout(connect)
                    .pool_idle_timeout(POOL_IDLE)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()?,
            ),
        })
    }

    /// Sends `request` (an absolute URI) and returns the response once its headers arrived.
    ///
    /// # Errors
    /// When the request could not be sent or no response head was received.
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future abandons the request.
    pub async fn send(&self, request: Request<Bytes>) -> Result<Response<Body>, HttpError> {
        match self {
            Self::Direct(client) => {
                let response = client
                    .request(request.map(Full::new))
                    .await
                    .map_err(HttpError::new)?;
                Ok(response.map(|body| body.map_err(HttpError::new).boxed()))
            }
            Self::Reqwest(client) => {
                let request = reqwest::Request::try_from(request).map_err(HttpError::new)?;
                let response = client.execute(request).await.map_err(HttpError::new)?;
                Ok(http::Response::from(response).map(|body| body.map_err(HttpError::new).boxed()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> Uri {
        text.parse().expect("uri")
    }

    #[test]
    fn a_plain_http_upstream_without_proxy_settings_is_direct() {
        let none = Matcher::builder().build();
        assert_eq!(
            route(&uri("http://127.0.0.1:3001/mcp"), &none),
            Route::Direct
        );
        assert_eq!(
            route(&uri("http://upstream.ns.svc:80/mcp"), &none),
            Route::Direct
        );
    }

    #[test]
    fn an_https_upstream_always_goes_through_reqwest_for_its_tls() {
        let none = Matcher::builder().build();
        assert_eq!(
            route(&uri("https://127.0.0.1:3001/mcp"), &none),
            Route::Reqwest
        );
    }

    #[test]
    fn a_proxy_that_applies_sends_the_upstream_through_reqwest() {
        let proxied = Matcher::builder().http("http://127.0.0.1:3128").build();
        assert_eq!(
            route(&uri("http://10.0.0.7:3001/mcp"), &proxied),
            Route::Reqwest
        );
        let all = Matcher::builder().all("http://127.0.0.1:3128").build();
        assert_eq!(
            route(&uri("http://10.0.0.7:3001/mcp"), &all),
            Route::Reqwest
        );
    }

    #[test]
    fn no_proxy_keeps_a_listed_upstream_direct() {
        let proxied = Matcher::builder()
            .http("http://127.0.0.1:3128")
            .no("127.0.0.1,.svc")
            .build();
        assert_eq!(
            route(&uri("http://127.0.0.1:3001/mcp"), &proxied),
            Route::Direct
        );
        assert_eq!(
            route(&uri("http://upstream.ns.svc/mcp"), &proxied),
            Route::Direct
        );
        assert_eq!(
            route(&uri("http://10.0.0.7:3001/mcp"), &proxied),
            Route::Reqwest
        );
    }

    #[test]
    fn an_https_only_proxy_leaves_a_plain_upstream_direct() {
        let https_only = Matcher::builder().https("http://127.0.0.1:3128").build();
        assert_eq!(
            route(&uri("http://10.0.0.7:3001/mcp"), &https_only),
            Route::Direct
        );
    }
}
