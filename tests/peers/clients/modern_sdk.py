"""An MCP client of the Python SDK (mcp 2.x) in a given era, as a user's agent would run it (issue 13).

Usage: modern_sdk.py URL MODE [RESOURCE_URI]

MODE is the SDK's connect mode: "2026-07-28" (modern only: no handshake, the revision in every
request's `_meta`), "auto" (probes `server/discover` and stays modern if the server answers it)
or "legacy". Lists the tools, calls `echo` twice, and with RESOURCE_URI reads that resource.
Prints one JSON line: {"protocol_version", "server_name", "tools", "echo", "resource_text"}.
Exits non-zero with the SDK's error when any of it fails.
"""

import asyncio
import json
import sys

from mcp.client import Client


async def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    uri = sys.argv[3] if len(sys.argv) > 3 else None
    async with Client(url, mode=mode) as client:
        tools = await client.list_tools()
        echoes = []
        for n in range(2):
            result = await client.call_tool("echo", {"message": f"modern {n}"})
            if result.is_error:
                sys.exit(f"echo {n} failed: {result}")
            echoes.append(result.content[0].text)
        resource_text = None
        if uri:
            read = await client.read_resource(uri)
            resource_text = getattr(read.contents[0], "text", None)
        info = client.server_info
        print(json.dumps({
            "protocol_version": client.protocol_version,
            "server_name": info.name if info else None,
            "tools": sorted(tool.name for tool in tools.tools),
            "echo": echoes,
            "resource_text": resource_text,
        }))


asyncio.run(main())
