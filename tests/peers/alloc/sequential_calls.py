"""Sequential MCP calls over one keep-alive connection, with the standard library only.

Usage: sequential_calls.py PORT CALLS

Opens a session on http://127.0.0.1:PORT/mcp (initialize, notifications/initialized), then
makes CALLS `tools/call echo` requests one after another and checks each answer. Used by
scripts/alloc-profile.sh, which counts the proxy's allocations per call.
"""

import http.client
import json
import sys

VERSION = "2025-06-18"


def main() -> None:
    port, calls = int(sys.argv[1]), int(sys.argv[2])
    connection = http.client.HTTPConnection("127.0.0.1", port)

    def post(body, session=None):
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        if session:
            headers["mcp-session-id"] = session
            headers["mcp-protocol-version"] = VERSION
        connection.request("POST", "/mcp", json.dumps(body), headers)
        response = connection.getresponse()
        return response, response.read()

    response, _ = post({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "alloc-profile", "version": "1"}},
    })
    session = response.getheader("mcp-session-id")
    if response.status != 200 or not session:
        sys.exit(f"initialize answered {response.status} without a session")
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    for i in range(calls):
        response, data = post({
            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "hello"}},
        }, session)
        if response.status != 200 or b"Echo: hello" not in data:
            sys.exit(f"call {i + 1} answered {response.status}: {data[:200]!r}")


if __name__ == "__main__":
    main()
