"""Sequential tools/call latency as a common Python client sees it (issue 12, item 0).

Usage: sequential_httpx.py URL CALLS

One MCP session over Python `httpx` (HTTP/1.1 keep-alive, the client most Python MCP code
uses): `initialize`, `notifications/initialized`, then CALLS `tools/call echo` one after the
other, each POST read to its end. Prints one JSON line: {"calls": N, "median_ms": ..,
"p90_ms": .., "max_ms": ..}. Exits non-zero when a call gets no result.
"""

import json
import statistics
import sys
import time

import httpx

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def messages(reply: httpx.Response) -> list:
    """The JSON-RPC messages of a reply: its JSON body, or each SSE `data:` line."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
    return [reply.json()] if reply.content else []


def main() -> None:
    url, calls = sys.argv[1], int(sys.argv[2])
    with httpx.Client(timeout=30.0) as client:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "sequential-httpx", "version": "0"}}}
        reply = client.post(url, headers=HEADERS, json=init)
        reply.raise_for_status()
        headers = dict(HEADERS)
        session = reply.headers.get("mcp-session-id")
        if session:
            headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = messages(reply)[-1]["result"]["protocolVersion"]
        client.post(url, headers=headers,
                    json={"jsonrpc": "2.0", "method": "notifications/initialized"}).raise_for_status()
        took = []
        for n in range(calls):
            call = {"jsonrpc": "2.0", "id": n + 2, "method": "tools/call",
                    "params": {"name": sys.argv[3] if len(sys.argv) > 3 else "echo",
                               "arguments": json.loads(sys.argv[4]) if len(sys.argv) > 4
                               else {"message": f"call {n}"}}}
            started = time.perf_counter()
            reply = client.post(url, headers=headers, json=call)
            reply.read()
            took.append((time.perf_counter() - started) * 1000.0)
            answer = messages(reply)
            if reply.status_code != 200 or not answer or "result" not in answer[-1]:
                sys.exit(f"call {n}: {reply.status_code} {reply.text[:300]}")
    took.sort()
    print(json.dumps({"calls": calls, "median_ms": statistics.median(took),
                      "p90_ms": took[int(len(took) * 0.9)], "max_ms": took[-1]}))


if __name__ == "__main__":
    main()
