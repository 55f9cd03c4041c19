"""A stateful MCP server written with the Python `mcp` SDK (2.x, `MCPServer`), for Berth's tests.

Serves Streamable HTTP on 127.0.0.1:$PORT at /mcp with sessions on (stateless_http=False).
Tools:
  echo(message)  -> "Echo: <message>"                 (readOnlyHint: true)
  add(a, b)      -> a + b                             (readOnlyHint: true)
  fail(reason)   -> raises, so the SDK answers a result with isError: true (no annotations)
  slow(sec)      -> sleeps `sec` seconds, reporting progress three times (no annotations)
"""

import os

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

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


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        streamable_http_path="/mcp",
        stateless_http=False,
    )


if __name__ == "__main__":
    main()
