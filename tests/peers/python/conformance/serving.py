"""Transports (Streamable HTTP, stdio) and protocol-era selection.

era "dual":   the SDK default. Streamable HTTP serves the initialize/session revisions
              (2024-11-05 .. 2025-11-25) and, for requests whose MCP-Protocol-Version header
              names 2026-07-28, the stateless per-request revision. stdio decides the era
              from the first request (`Server.run`, i.e. `serve_dual_era_loop`).
era "legacy": a server that only knows the initialize-based revisions. The SDK has no
              switch for this on HTTP (its session manager routes every unknown
              MCP-Protocol-Version to the modern entry), so `LegacyOnly` answers such
              requests the way a 2025-11-25 server must: 400 Bad Request. stdio runs the
              SDK's handshake-only loop (`serve_loop`), where `server/discover` is -32601
              and other requests before `initialize` are refused.
"""

from __future__ import annotations

import itertools
import json
from collections import deque

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import INVALID_REQUEST, JSONRPCMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

# DNS-rebinding protection: only loopback Host/Origin values are accepted.
SECURITY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)

# SSE `retry:` hint (ms) sent in priming events; clients reconnect this long after a stream closes.
RETRY_INTERVAL_MS = 500


class MemoryEventStore(EventStore):
    """Keeps the last `limit` SSE events so a client can resume a stream with Last-Event-ID."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: deque[tuple[str, str, JSONRPCMessage | None]] = deque(maxlen=limit)
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = f"{stream_id}:{next(self._ids)}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        events = list(self._events)
        start = next((i for i, (event_id, _, _) in enumerate(events) if event_id == last_event_id), None)
        if start is None:
            return None
        stream_id = events[start][1]
        for event_id, stream, message in events[start + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class LegacyOnly:
    """Refuses requests for protocol revisions newer than 2025-11-25 (legacy era only)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-protocol-version"), None)
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                request = Request(scope, receive)
                refused = await TransportSecurityMiddleware(SECURITY).validate_request(
                    request, is_post=request.method == "POST"
                )
                if refused is None:
                    supported = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
                    message = f"Bad Request: Unsupported protocol version: {version}. Supported versions: {supported}"
                    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
                    refused = Response(json.dumps(body), status_code=400, media_type="application/json")
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_http(server: MCPServer, *, host: str, port: int, era: str) -> None:
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/mcp",
        event_store=MemoryEventStore(),
        retry_interval=RETRY_INTERVAL_MS,
        transport_security=SECURITY,
        host=host,
    )
    if era == "legacy":
        app = LegacyOnly(app)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def serve_stdio(server: MCPServer, *, era: str) -> None:
    if era == "dual":
        server.run("stdio")
    else:
        anyio.run(_stdio_handshake_only, server)


async def _stdio_handshake_only(server: MCPServer) -> None:
    lowlevel = server._lowlevel_server  # noqa: SLF001 (no public accessor)
    async with stdio_server() as (read_stream, write_stream), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(lowlevel, read_stream, write_stream, lifespan_state=state)
