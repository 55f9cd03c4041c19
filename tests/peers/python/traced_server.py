"""The Python SDK peer (server.py) with the OpenTelemetry SDK exporting its spans, for the
tracing tests (issue 16).

The `mcp` SDK opens a server span per request itself (its OpenTelemetryMiddleware), parented on
the request's `params._meta.traceparent` (SEP-414); this script only installs a tracer provider
that exports those spans over OTLP/HTTP to $BERTH_TRACED_OTLP_ENDPOINT (a simple processor: each
span is sent when it ends), under the service name $BERTH_TRACED_SERVICE (default
`python-upstream`, whatever OTEL_SERVICE_NAME says: a stdio child inherits the proxy's
environment).

One more tool:
  trace_context() -> JSON {"header": the request's `traceparent` header (None over stdio),
                           "meta": its `params._meta.traceparent`}: what the proxy sent

Usage: traced_server.py [http|stdio]  (http: Streamable HTTP on 127.0.0.1:$PORT/mcp)
"""

import json
import os
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from server import Context, server

endpoint = os.environ["BERTH_TRACED_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
provider = TracerProvider(
    resource=Resource.create(
        {"service.name": os.environ.get("BERTH_TRACED_SERVICE", "python-upstream")}
    )
)
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
trace.set_tracer_provider(provider)


@server.tool()
def trace_context(ctx: Context) -> str:
    """The trace context the request arrived with, as JSON."""
    headers = ctx.headers or {}
    meta = ctx.request_context.meta or {}
    return json.dumps({"header": headers.get("traceparent"), "meta": meta.get("traceparent")})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(os.environ.get("PORT", "8000")),
            streamable_http_path="/mcp",
            stateless_http=False,
        )
