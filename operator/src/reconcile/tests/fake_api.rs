//! The fake API server the reconcile tests run against: a `tower` service that records every
//! request and answers like the API server would.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::{Request, Response, StatusCode};
use berth_crds::McpUpstream;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request the fake API server saw.
#[derive(Clone, Debug)]
pub(super) struct Recorded {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: String,
    pub(super) body: Value,
}

/// A fake API server: echoes applied objects back (as server-side apply returns them) and
/// keeps them for later GETs (404 before), answers a status apply with the McpUpstream carrying
/// that status, accepts Events, and can refuse one path or attach a status to the Deployment it
/// returns.
#[derive(Clone, Default)]
pub(super) struct FakeApiServer {
    pub(super) requests: Arc<Mutex<Vec<Recorded>>>,
    pub(super) objects: Arc<Mutex<HashMap<String, Value>>>,
    /// Requests whose path contains `.0` get an error Status with code `.1`.
    pub(super) refuse: Option<(&'static str, StatusCode)>,
    pub(super) deployment_status: Option<Value>,
    /// The McpUpstream's status as the patches so far left it (each patch's top-level fields
    /// replace those of the ones before, as both a merge patch and an apply of them would).
    pub(super) status: Arc<Mutex<Value>>,
}

impl FakeApiServer {
    pub(super) fn client(&self) -> Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(request).await) }
        });
        Client::new(service, "default")
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Recorded {
                method: parts.method.to_string(),
                path: path.clone(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body: body.clone(),
            });
        if let Some((_, code)) = self.refuse.filter(|(part, _)| path.contains(part)) {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "refused by the fake", "reason": "Refused", "code": code.as_u16()});
            return respond(code, &status);
        }
        if parts.method == "GET" && (path.ends_with("/pods") || path.ends_with("/replicasets")) {
            // No controllers behind the fake: the Deployment has no ReplicaSets and no pods.
            let list = json!({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []});
            return respond(StatusCode::OK, &list);
        }
        if parts.method == "GET" {
            let stored = self
                .objects
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&path)
                .cloned();
            return match stored {
                Some(object) => respond(StatusCode::OK, &object),
                None => {
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "not found", "reason": "NotFound", "code": 404});
                    respond(StatusCode::NOT_FOUND, &status)
                }
            };
        }
        if path.ends_with("/status") {
            let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
            if !status.is_object() {
                *status = json!({});
            }
            for (field, value) in body["status"].as_object().into_iter().flatten() {
                status[field] = value.clone();
            }
            let mut upstream = serde_json::to_value(everything(None).as_ref()).unwrap_or_default();
            upstream["status"] = status.clone();
            return respond(StatusCode::OK, &upstream);
        }
        if let (true, Some(status), Some(object)) = (
            path.contains("/deployments/"),
            &self.deployment_status,
            body.as_object_mut(),
        ) {
            object.insert("status".to_owned(), status.clone());
        }
        if parts.method == "PATCH" {
            self.objects
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(path, body.clone());
        } else if let Some(name) = body["metadata"]["name"].as_str().map(str::to_owned) {
            // A create (POST to the collection): refused when the name is taken, else given a
            // uid, and later GETs find it by name.
            let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
            let key = format!("{path}/{name}");
            if objects.contains_key(&key) {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "already exists", "reason": "AlreadyExists", "code": 409});
                return respond(StatusCode::CONFLICT, &status);
            }
            body["metadata"]["uid"] = json!(format!("uid-{name}"));
            objects.insert(key, body.clone());
        }
        let code = if parts.method == "POST" {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        respond(code, &body)
    }

    pub(super) fn requests(&self) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The McpUpstream's status as the watch would hand it over now.
    pub(super) fn status(&self) -> Value {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every request but GETs (reads cost no write).
    pub(super) fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }
}

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response
}

/// The shipped example as the API server hands it to the operator.
pub(super) fn everything(status: Option<Value>) -> Arc<McpUpstream> {
    let mut upstream: McpUpstream =
        serde_yaml::from_str(include_str!("../../../../examples/everything.yaml")).expect("parses");
    upstream.metadata.namespace = Some("demo".to_owned());
    upstream.metadata.uid = Some("uid-1".to_owned());
    upstream.metadata.generation = Some(2);
    upstream.status = status.map(|s| serde_json::from_value(s).expect("status fixture"));
    Arc::new(upstream)
}
