"""An MCP "everything server" for the official conformance suite (@modelcontextprotocol/conformance),
written with the Python `mcp` SDK (2.x, `MCPServer`), for Berth's tests.

It implements the server contract the suite's scenarios check, for both protocol eras: the
initialize/session revisions (2025-06-18, 2025-11-25) and the stateless 2026-07-28 revision
(server/discover, per-request _meta, input_required results, caching hints, subscriptions/listen).
Behaviour is deterministic (only opaque values such as taskIds and sealed requestState differ
between runs); the little mutable state there is is listed at the end.

Usage:
  PORT=8931 python conformance_server.py [--transport http|stdio] [--era dual|legacy] [--port N]
  REQUEST_STATE_KEY=<32+ bytes>: seal requestState with this key (every instance alike) instead of a
  process-local one

  http:   Streamable HTTP on 127.0.0.1:$PORT at /mcp (PORT defaults to 8000; --port overrides),
          sessions on, SSE resumability (in-memory event store, retry 500 ms), Host/Origin must be
          loopback (DNS-rebinding protection).
  stdio:  newline-delimited JSON-RPC on stdin/stdout.
  --era dual (default) speaks every revision the SDK knows; --era legacy only the
  initialize-based ones: over HTTP a request with MCP-Protocol-Version 2026-07-28 gets 400 Bad
  Request, over stdio server/discover is -32601 and anything else before initialize -32602
  (see conformance/serving.py).

Tools (content / behaviour):
  test_simple_text             text "This is a simple text response for testing."
  test_image_content           a 1x1 PNG image block
  test_audio_content           a WAV audio block
  test_embedded_resource       an embedded text resource test://embedded-resource
  test_multiple_content_types  text + image + embedded JSON resource
  test_error_handling          always fails (isError: true)
  greet(name)                  "Hello, <name>!"
  json_schema_2020_12_tool     inputSchema is a raw JSON Schema 2020-12 document; echoes its arguments
  test_header_echo(region)     `region` is declared x-mcp-header "Region" (SEP-2243); echoes it
  test_tool_with_logging       three info log messages, 50 ms apart
  test_logging_tool            one info log message (2026-07-28: only if _meta asks for a logLevel)
  test_tool_with_progress      progress 0/50/100 of 100 against the request's progressToken
  test_reconnection            closes its SSE stream mid-call; the result arrives on the resumed stream
  test_trigger_tool_change     toggles test_dynamic_tool in/out of tools/list; sends tools/list_changed
  test_trigger_prompt_change   toggles test_dynamic_prompt in/out of prompts/list; sends prompts/list_changed
  test_sampling(prompt)        asks the client's LLM; "LLM response: <text>"          (SDK resolver)
  test_missing_capability      asks the client's LLM; -32021 if sampling is undeclared (SDK resolver)
  test_elicitation(message)    asks the user (form: response); reports action/content
  test_elicitation_sep1034_defaults  form whose fields all have defaults (SEP-1034)
  test_elicitation_sep1330_enums     form with the five enum shapes (SEP-1330)
  test_streaming_elicitation   reports progress, then asks the user to confirm
  test_input_required_result_elicitation    input user_name (elicitation); "Hello, <name>!"
  test_input_required_result_sampling       input capital_question (sampling)
  test_input_required_result_list_roots     input client_roots (roots/list); "Found N root(s)"
  test_input_required_result_request_state  input confirm + requestState; "state-ok" iff the state came back
  test_input_required_result_tampered_state as above; a modified requestState is -32602 (SDK boundary)
  test_input_required_result_multiple_inputs  user_name + greeting + client_roots in one round
  test_input_required_result_multi_round    step1 (name), then step2 (colour); state carries the name
  test_input_required_result_capabilities   asks only for what the client declared (elicitation/sampling)
  At 2026-07-28 "asks" means an input_required result answered by a retry with inputResponses; at the
  older revisions it means a server-to-client request during the call.

Tasks (extension io.modelcontextprotocol/tasks, SEP-2663, 2026-07-28 only; see conformance/tasks.py):
  tasks/get, tasks/update, tasks/cancel; a task-supporting tool runs as a task when the request's
  client capabilities declare the extension, otherwise synchronously (or -32021 if it requires a task).
  slow_compute(seconds, label)  sleeps, then "Computed <label> after <seconds>s"; cancellable
  failing_job                   task required; ends completed with isError after ~1 s
  protocol_error_job            ends failed with a -32603 error
  confirm_delete(filename)      asks to confirm (input confirm); "Deleted"/"Kept" <filename>
  multi_input                   asks two questions at once (inputs first, second)
  test_tool_with_task           task required; asks user_name synchronously (input_required), then runs as a task
  Inside a task, "asks" means status input_required with inputRequests until tasks/update answers.

Resources:
  test://static-text           text/plain
  test://static-binary         image/png (blob)
  test://template/{id}/data    template; application/json {"id", "templateTest": true, "data"}
  test://watched-resource      text/plain; resources/subscribe + unsubscribe accepted (legacy revisions)
  any other URI                -32602 with data.uri (SEP-2164)

Prompts:
  test_simple_prompt, test_prompt_with_arguments(arg1, arg2), test_prompt_with_embedded_resource(resourceUri),
  test_prompt_with_image, test_input_required_result_prompt (input user_context, then renders)

Also: completion/complete (prefix-filtered candidates for arg1, arg2, id), logging/setLevel (recorded),
ping, caching hints (tools/prompts lists ttl 0 since the triggers mutate them; static lists, reads and
server/discover 300 s), subscriptions/listen (2026-07-28 list-changed delivery, SDK default).

Mutable state: the two trigger tools (presence of test_dynamic_tool / test_dynamic_prompt), the
tasks (kept 10 min), the subscribed-URI set and the recorded log level. Start a fresh process per
suite run.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance import TASK_STORE, TasksExtension, build_tools, register_catalog, serve_http, serve_stdio  # noqa: E402
from mcp.server.caching import CacheHint  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp.shared.exceptions import MCPDeprecationWarning  # noqa: E402

# The fixture deliberately exercises features 2026-07-28 deprecates (logging, roots, sampling).
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

STATIC = CacheHint(ttl_ms=300_000, scope="public")
MUTABLE = CacheHint(ttl_ms=0, scope="public")


@asynccontextmanager
async def lifespan(server: MCPServer):
    async with TASK_STORE.running():  # background work of tasks outlives the request
        yield {}


async def announce_list_changes(ctx, call_next):
    """initialize middleware: the trigger tools do send list_changed, so say so (legacy revisions)."""
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        capabilities = result.get("capabilities", {})
        for name in ("tools", "prompts"):
            if isinstance(capabilities.get(name), dict):
                capabilities[name]["listChanged"] = True
    return result


def request_state_security() -> RequestStateSecurity | None:
    """A shared sealing key from REQUEST_STATE_KEY, as every instance of a multi-instance
    deployment needs (here: the stdio children a proxy starts per request); else the SDK's
    process-local key."""
    key = os.environ.get("REQUEST_STATE_KEY")
    return RequestStateSecurity(keys=[key]) if key else None


def build_server() -> MCPServer:
    server = MCPServer(
        "berth-conformance-fixture",
        version="1.0.0",
        tools=build_tools(),
        extensions=[TasksExtension()],
        lifespan=lifespan,
        middleware=[announce_list_changes],
        cache_hints={
            "server/discover": STATIC,
            "tools/list": MUTABLE,
            "prompts/list": MUTABLE,
            "resources/list": STATIC,
            "resources/templates/list": STATIC,
            "resources/read": CacheHint(ttl_ms=300_000, scope="private"),
        },
        log_level="WARNING",
        request_state_security=request_state_security(),
    )
    register_catalog(server)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--era", choices=["dual", "legacy"], default="dual")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    args = parser.parse_args()
    server = build_server()
    if args.transport == "stdio":
        serve_stdio(server, era=args.era)
    else:
        serve_http(server, host="127.0.0.1", port=args.port, era=args.era)


if __name__ == "__main__":
    main()
