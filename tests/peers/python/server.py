"""A stateful MCP server written with the Python `mcp` SDK (2.x, `MCPServer`), for Berth's tests.

Serves Streamable HTTP on 127.0.0.1:$PORT at /mcp with sessions on (stateless_http=False).
Tools:
  echo(message)  -> "Echo: <message>"                 (readOnlyHint: true)
  add(a, b)      -> a + b                             (readOnlyHint: true)
  fail(reason)   -> raises, so the SDK answers a result with isError: true (no annotations)
  slow(sec)      -> sleeps `sec` seconds, reporting progress three times (no annotations)
  touch(uri)     -> announces notifications/resources/updated for `uri` on the MCP 2026-07-28
                    subscriptions/listen streams that asked for it
  greet()        -> asks the client for a name (elicitation), then "Hello, <name>!": over a
                    legacy session as a server request mid-call, over MCP 2026-07-28 as an
                    `input_required` result the client answers on its retry (MRTR)

With MODERN_ONLY=1 the server speaks only MCP 2026-07-28, as a server without the legacy
revisions would: `initialize` and any request without a modern `MCP-Protocol-Version` header
get 400 with -32022 naming the supported revisions; GET and DELETE get 405.
"""

import json
import os
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("berth-python-peer", version="0.1.0")

READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ_ONLY)
def echo(message: str) -> str:
    """Returns the message, prefixed with "Echo: "."""
    return f"Echo: {message}"


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def fail(reason: str = "asked to fail") -> str:
    """Always fails; the SDK turns the exception into a result with isError: true."""
    raise ToolError(reason)


@server.tool()
async def slow(sec: float, ctx: Context) -> str:
    """Sleeps `sec` seconds in three steps, reporting progress after each."""
    for step in range(1, 4):
        await anyio.sleep(sec / 3)
        await ctx.report_progress(step, 3, f"step {step} of 3")
    return f"slept {sec}s"


@server.resource("berth://note")
def note() -> str:
    """A resource clients may subscribe to; `touch` announces its updates."""
    return "a note"


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Announces that the resource `uri` was updated."""
    await ctx.notify_resource_updated(uri)
    return f"touched {uri}"


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@server.tool()
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Asks the client for a name, then greets it."""
    return f"Hello, {who.name}!"


MODERN = "2026-07-28"


def modern_only(app):
    """ASGI middleware: refuses every request that is not in the MCP 2026-07-28 form."""

    async def gate(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["method"] in ("GET", "DELETE"):
            return await respond(send, 405, None)
        headers = dict(scope["headers"])
        if headers.get(b"mcp-protocol-version", b"").decode() == MODERN:
            return await app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request_id = json.loads(body).get("id")
        except (ValueError, AttributeError):
            request_id = None
        error = {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": -32022,
                "message": "this server speaks only MCP 2026-07-28",
                "data": {"supported": [MODERN], "requested": headers.get(b"mcp-protocol-version", b"").decode() or None},
            },
        }
        await respond(send, 400, error)

    return gate


async def respond(send, status, body):
    payload = json.dumps(body).encode() if body is not None else b""
    headers = [(b"content-type", b"application/json")] if body is not None else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    if os.environ.get("MODERN_ONLY") == "1":
        import uvicorn

        app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=False)
        uvicorn.run(modern_only(app), host="127.0.0.1", port=port, log_level="warning")
        return
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        streamable_http_path="/mcp",
        stateless_http=False,
    )


if __name__ == "__main__":
    main()
