// Source of the Prometheus Operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) that the
// chart tests install into the local control plane, so the chart's monitoring resources are
// checked by the API server against their real schemas. Nothing is built: ../../test.sh takes
// example/prometheus-operator-crd/ from the module the Go module proxy serves (verified against
// go.sum). Update by changing the version and running `go mod download -json` here.
module berth.local/tests/chart/tools/monitoring-crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
