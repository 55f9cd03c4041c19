"""An MCP client of the Python SDK (mcp 2.x) that answers elicitation, in a given era (issue 13).

Usage: elicit_sdk.py URL MODE NAME [TOOL]

MODE is the SDK's connect mode ("2026-07-28", "auto" or "legacy"). Calls TOOL (default
`greet`), which asks for a name; answers every elicitation by accepting {"name": NAME}. Over a legacy
session the SDK answers the server's `elicitation/create` request mid-call; in the modern
mode it answers the `input_required` result and retries (MRTR). Prints one JSON line:
{"protocol_version", "text" (the result's text contents, joined by newlines), "is_error",
"elicitations" (the messages asked)}. Exits non-zero with the SDK's error
when the call fails.
"""

import asyncio
import json
import sys

from mcp import types
from mcp.client import Client

asked = []


async def main() -> None:
    url, mode, name = sys.argv[1], sys.argv[2], sys.argv[3]
    tool = sys.argv[4] if len(sys.argv) > 4 else "greet"

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": name})

    async with Client(url, mode=mode, elicitation_callback=answer) as client:
        result = await client.call_tool(tool, {})
        text = "\n".join(c.text for c in result.content if getattr(c, "text", None))
        print(json.dumps({
            "protocol_version": client.protocol_version,
            "text": text,
            "is_error": bool(result.is_error),
            "elicitations": asked,
        }))


asyncio.run(main())
