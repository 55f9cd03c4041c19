//! `spec.telemetry`: opt-in OpenTelemetry traces of the proxy (issue 16).
//!
//! Not responsible for: exporting spans (the proxy, from the standard `OTEL_*` variables) or
//! rendering those variables (the operator's `build::deployment`).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::proxy_auth::SecretKeyReference;

/// `OTEL_SERVICE_NAME` of the proxy when `spec.telemetry.traces.serviceName` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "berth-proxy";

/// What the proxy exports besides its Prometheus metrics. Default: nothing (traces off).
///
/// Example:
/// `{traces: {endpoint: http://otel-collector.observability.svc:4318, samplingRatio: 0.1}}`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TelemetrySpec {
    /// OpenTelemetry traces of the proxy (spans of the MCP requests it serves and of its calls
    /// to the upstream, named after the MCP semantic conventions), exported with OTLP over HTTP
    /// with protobuf (a collector's port 4318; OTLP over gRPC, port 4317, is not supported).
    /// Present means on: the operator sets the standard `OTEL_*` environment variables of the
    /// proxy container. A collector that is down never slows a call: spans that cannot be
    /// exported are dropped and counted. Default: none (traces off, no `OTEL_*` variables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traces: Option<TracesSpec>,
}

/// Where and how much the proxy exports traces: OTLP over HTTP with protobuf (`http/protobuf`,
/// a collector's port 4318); OTLP over gRPC (port 4317) is not supported.
///
/// Example: `{endpoint: http://otel-collector.observability.svc:4318, samplingRatio: 0.25,
/// headersSecret: {name: otel-credentials, key: headers}}`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracesSpec {
    /// Base URL of the collector's OTLP/HTTP receiver, `http://` or `https://`, usually port
    /// 4318, for example `http://otel-collector.observability.svc:4318`. The proxy appends
    /// `/v1/traces` and POSTs protobuf (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`); give the
    /// base URL, not the `/v1/traces` path. A gRPC receiver (port 4317) does not work. The proxy
    /// container's `OTEL_EXPORTER_OTLP_ENDPOINT`. At most 2048 characters. Required. With
    /// `spec.networkPolicy` enabled, its egress must allow the collector.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#\\\\s]+(/[^?#\\\\s]*)?$')").message("spec.telemetry.traces.endpoint must be an http:// or https:// URL (OTLP over HTTP, usually port 4318)"))]
    pub endpoint: String,
    /// Fraction of new traces the proxy samples, from `0` (none) to `1` (all), for example
    /// `0.25`. Parent-based: a request that carries a W3C trace context (`traceparent`) keeps
    /// its client's sampled or unsampled decision; the ratio applies only to requests that
    /// arrive without one (`OTEL_TRACES_SAMPLER=parentbased_traceidratio`,
    /// `OTEL_TRACES_SAMPLER_ARG`). Default `1`.
    #[serde(default = "default_sampling_ratio")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub sampling_ratio: f64,
    /// `service.name` of the proxy's spans (`OTEL_SERVICE_NAME`), 1-255 characters. Their
    /// resource also carries `k8s.namespace.name`, `k8s.pod.name` and `berth.mcpupstream` (the
    /// McpUpstream's name; `OTEL_RESOURCE_ATTRIBUTES`). Default `berth-proxy`.
    #[serde(default = "default_service_name")]
    #[schemars(length(min = 1, max = 255))]
    pub service_name: String,
    /// A key of a Secret in the McpUpstream's namespace whose value the proxy sends as headers
    /// of every export (`OTEL_EXPORTER_OTLP_HEADERS`), for collectors that need credentials:
    /// comma-separated `name=value` pairs, for example `authorization=Bearer abc,x-team=mcp`.
    /// The kubelet passes it to the proxy as an environment variable; it never appears in the
    /// ConfigMap, status, Events or logs. Changing the Secret's value takes effect when the pods
    /// restart. Default: none (no extra headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret: Option<SecretKeyReference>,
}

fn default_sampling_ratio() -> f64 {
    1.0
}

fn default_service_name() -> String {
    DEFAULT_SERVICE_NAME.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_traces_with_only_an_endpoint_get_defaults() {
        let telemetry: TelemetrySpec =
            serde_yaml::from_str("traces: {endpoint: 'http://otel-collector:4318'}")
                .expect("parses");
        let traces = telemetry.traces.expect("traces set");
        assert_eq!(traces.endpoint, "http://otel-collector:4318");
        assert_eq!(traces.sampling_ratio, 1.0);
        assert_eq!(traces.service_name, "berth-proxy");
        assert_eq!(traces.headers_secret, None);
    }

    /// The CEL rule of `endpoint` as the CRD carries it, run as a regex (CEL's `matches` is
    /// RE2, which the `regex` crate follows for this pattern).
    fn endpoint_rule() -> regex::Regex {
        use kube::core::crd::CustomResourceExt;
        let crd = serde_json::to_value(crate::McpUpstream::crd()).expect("crd serializes");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let endpoint = &schema["properties"]["spec"]["properties"]["telemetry"]["properties"]["traces"]
            ["properties"]["endpoint"];
        let rule = endpoint["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .expect("endpoint has a CEL rule");
        let pattern = rule
            .strip_prefix("self.matches('")
            .and_then(|r| r.strip_suffix("')"))
            .expect("a matches() rule");
        regex::Regex::new(&pattern.replace("\\\\", "\\")).expect("pattern compiles")
    }

    #[test]
    fn telemetry_endpoint_rule_wants_an_http_url() {
        let rule = endpoint_rule();
        for good in [
            "http://otel-collector.observability.svc:4318",
            "https://otlp.example.com",
            "https://otlp.example.com/otlp/",
            "http://10.0.0.7:4318",
        ] {
            assert!(rule.is_match(good), "{good} accepted");
        }
        for bad in [
            "otel-collector:4317",
            "grpc://otel-collector:4317",
            "http://",
            "http://collector:4318/?x=1",
            "http://collector :4318",
            "",
        ] {
            assert!(!rule.is_match(bad), "{bad:?} rejected");
        }
    }

    #[test]
    fn telemetry_rule_messages_name_the_fields() {
        let yaml = crate::crd_yaml().expect("crd renders");
        assert!(yaml.contains("spec.telemetry.traces.endpoint must be an http:// or https:// URL"));
    }

    #[test]
    fn telemetry_absent_is_off() {
        let telemetry: TelemetrySpec = serde_yaml::from_str("{}").expect("parses");
        assert_eq!(telemetry, TelemetrySpec::default());
        assert_eq!(telemetry.traces, None);
    }
}
