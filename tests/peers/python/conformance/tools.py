"""The fixture's tools. Every tool works in both protocol eras (see asking.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.tools import Tool
from mcp_types import (
    AudioContent,
    CallToolResult,
    CreateMessageResult,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    ListRootsResult,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)
from pydantic import Field

from . import content as c
from .asking import ask, describe, elicit, form_value, is_modern, list_roots, load_state, sample, sampled_text, supports

Result = CallToolResult | InputRequiredResult


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def _image() -> ImageContent:
    return ImageContent(type="image", data=c.PNG_BASE64, mime_type="image/png")


def _resource(uri: str, text: str, mime_type: str) -> EmbeddedResource:
    return EmbeddedResource(type="resource", resource=TextResourceContents(uri=uri, mime_type=mime_type, text=text))


# ----- content -------------------------------------------------------------------------------


def test_simple_text() -> Result:
    """Returns one text block."""
    return _text(c.SIMPLE_TEXT)


def test_image_content() -> Result:
    """Returns one PNG image block."""
    return CallToolResult(content=[_image()])


def test_audio_content() -> Result:
    """Returns one WAV audio block."""
    return CallToolResult(content=[AudioContent(type="audio", data=c.WAV_BASE64, mime_type="audio/wav")])


def test_embedded_resource() -> Result:
    """Returns one embedded text resource."""
    return CallToolResult(
        content=[_resource("test://embedded-resource", "This is an embedded resource content.", "text/plain")]
    )


def test_multiple_content_types() -> Result:
    """Returns a text, an image and an embedded JSON resource block."""
    return CallToolResult(
        content=[
            TextContent(type="text", text="Multiple content types test:"),
            _image(),
            _resource("test://mixed-content-resource", c.MIXED_JSON, "application/json"),
        ]
    )


def greet(name: str) -> Result:
    """Returns "Hello, <name>!" (never runs as a task)."""
    return _text(f"Hello, {name}!")


def test_error_handling() -> Result:
    """Always fails: the result has isError: true."""
    raise ToolError("This tool intentionally returns an error for testing")


def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, Any] | None = None,
    contactMethod: str | None = None,  # noqa: N803 (wire name)
    phone: str | None = None,
    email: str | None = None,
) -> Result:
    """Publishes a JSON Schema 2020-12 inputSchema (see content.py); echoes the arguments it was given.

    Calls are validated against these (looser) parameters, not the schema's conditional keywords.
    """
    given = {"name": name, "address": address, "contactMethod": contactMethod, "phone": phone, "email": email}
    args = {k: v for k, v in given.items() if v is not None}
    return _text(f"JSON Schema 2020-12 tool called with: {json.dumps(args, sort_keys=True)}")


def test_header_echo(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> Result:
    """Echoes `region`, which clients also send as the Mcp-Param-Region header (SEP-2243)."""
    return _text(f"Region: {region}")


# ----- notifications -------------------------------------------------------------------------


async def test_tool_with_logging(ctx: Context) -> Result:
    """Sends three info log messages while running (at 2026-07-28 only if the request asked for logs)."""
    for i, message in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
        if i:
            await anyio.sleep(0.05)
        await ctx.info(message)
    return _text("Tool with logging executed successfully")


async def test_logging_tool(ctx: Context) -> Result:
    """Sends one info log message (at 2026-07-28 only if the request's _meta set a logLevel)."""
    await ctx.info("Diagnostic trace logging activated")
    return _text("Logging evaluated")


async def test_tool_with_progress(ctx: Context) -> Result:
    """Reports progress 0, 50 and 100 of 100 against the request's progressToken."""
    for step in (0, 50, 100):
        if step:
            await anyio.sleep(0.05)
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
    token = (ctx.request_context.meta or {}).get("progressToken")
    return _text(f"Progress reported to token {token}" if token is not None else "No progress token given")


async def test_reconnection(ctx: Context) -> Result:
    """Closes its SSE response stream mid-call (SEP-1699 polling); the result follows on the resumed stream."""
    await ctx.close_sse_stream()
    await anyio.sleep(0.1)
    return _text("Reconnection test completed successfully. The client reconnected after the stream closed.")


async def _toggle_tool(server: MCPServer) -> str:
    if any(t.name == "test_dynamic_tool" for t in await server.list_tools()):
        server.remove_tool("test_dynamic_tool")
        return "removed test_dynamic_tool"
    server.add_tool(test_dynamic_tool, structured_output=False)
    return "added test_dynamic_tool"


def test_dynamic_tool() -> Result:
    """Present only while test_trigger_tool_change has toggled it on."""
    return _text("Dynamic tool called")


def test_dynamic_prompt() -> str:
    """Present only while test_trigger_prompt_change has toggled it on."""
    return "This is a dynamic prompt."


async def test_trigger_tool_change(ctx: Context) -> Result:
    """Adds test_dynamic_tool, or removes it if present, and announces tools/list_changed."""
    done = await _toggle_tool(ctx.mcp_server)
    await ctx.notify_tools_changed()  # subscriptions/listen streams (2026-07-28)
    await ctx.session.send_tool_list_changed()  # this session (legacy; dropped at 2026-07-28)
    return _text(f"Tool list changed: {done}")


async def test_trigger_prompt_change(ctx: Context) -> Result:
    """Adds test_dynamic_prompt, or removes it if present, and announces prompts/list_changed."""
    server = ctx.mcp_server
    if any(p.name == "test_dynamic_prompt" for p in await server.list_prompts()):
        server.remove_prompt("test_dynamic_prompt")
        done = "removed test_dynamic_prompt"
    else:
        server.add_prompt(Prompt.from_function(test_dynamic_prompt))
        done = "added test_dynamic_prompt"
    await ctx.notify_prompts_changed()
    await ctx.session.send_prompt_list_changed()
    return _text(f"Prompt list changed: {done}")


# ----- client input: the SDK's resolvers -----------------------------------------------------


def _ask_llm(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=100)


def _ask_capital() -> Sample:
    text = "What is the capital of France?"
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=50)


async def test_sampling(prompt: str, reply: Annotated[CreateMessageResult, Resolve(_ask_llm)]) -> CallToolResult:
    """Asks the client's LLM (sampling) to answer `prompt`; returns "LLM response: <text>"."""
    return _text(f"LLM response: {sampled_text(reply)}")


async def test_missing_capability(reply: Annotated[CreateMessageResult, Resolve(_ask_capital)]) -> CallToolResult:
    """Needs sampling: fails with -32021 (requiredCapabilities.sampling) when the client did not declare it."""
    return _text(f"Sampling result: {sampled_text(reply)}")


# ----- client input: hand-rolled (fixed input-request keys) ----------------------------------


async def test_elicitation(message: str, ctx: Context) -> Result:
    """Asks the user `message` (form with a required `response` string); reports the answer."""
    answers = await ask(ctx, {"response": elicit(message, c.RESPONSE_SCHEMA)})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"User response: {describe(answers['response'])}")


async def test_elicitation_sep1034_defaults(ctx: Context) -> Result:
    """Asks for a form whose fields all carry defaults (SEP-1034); reports the answer."""
    answers = await ask(ctx, {"form": elicit("Please review and update the form fields with defaults", c.DEFAULTS_SCHEMA)})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Elicitation completed: {describe(answers['form'])}")


async def test_elicitation_sep1330_enums(ctx: Context) -> Result:
    """Asks for a form with the five enum shapes of SEP-1330; reports the answer."""
    answers = await ask(ctx, {"form": elicit("Please select options from the enum fields", c.ENUMS_SCHEMA)})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Elicitation completed: {describe(answers['form'])}")


async def test_streaming_elicitation(ctx: Context) -> Result:
    """Reports progress, then asks the user to confirm; never sends a request on the response stream."""
    await ctx.report_progress(50, 100, "Waiting for confirmation")
    answers = await ask(ctx, {"confirm": elicit("Continue?", c.CONFIRM_FORM)})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Streaming complete: {describe(answers['confirm'])}")


async def test_input_required_result_elicitation(ctx: Context) -> Result:
    """Asks for the user's name (input `user_name`); returns "Hello, <name>!"."""
    answers = await ask(ctx, {"user_name": elicit("What is your name?", c.string_form("name"))})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Hello, {form_value(answers['user_name'], 'name')}!")


async def test_input_required_result_sampling(ctx: Context) -> Result:
    """Asks the client's LLM a question (input `capital_question`); returns the answer."""
    answers = await ask(ctx, {"capital_question": sample("What is the capital of France?", 100)})
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Sampling result: {sampled_text(answers['capital_question'])}")


async def test_input_required_result_list_roots(ctx: Context) -> Result:
    """Asks for the client's roots (input `client_roots`); returns how many there are."""
    answers = await ask(ctx, {"client_roots": list_roots()})
    if isinstance(answers, InputRequiredResult):
        return answers
    roots = answers["client_roots"]
    count = len(roots.roots) if isinstance(roots, ListRootsResult) else 0
    return _text(f"Found {count} root(s)")


async def test_input_required_result_request_state(ctx: Context) -> Result:
    """Asks for confirmation with a requestState; completes with "state-ok" only if the state came back."""
    state = {"kind": "request-state"}
    echoed = not is_modern(ctx) or load_state(ctx) == state
    answers = await ask(ctx, {"confirm": elicit("Please confirm", c.CONFIRM_FORM)}, state=state, answered=echoed)
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"state-ok: requestState validated ({describe(answers['confirm'])})")


async def test_input_required_result_tampered_state(ctx: Context) -> Result:
    """Like test_input_required_result_request_state; a modified requestState is rejected (-32602) by the SDK."""
    state = {"kind": "tamper-test"}
    echoed = not is_modern(ctx) or load_state(ctx) == state
    answers = await ask(ctx, {"confirm": elicit("Please confirm", c.CONFIRM_FORM)}, state=state, answered=echoed)
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text("integrity-ok: state verified")


async def test_input_required_result_multiple_inputs(ctx: Context) -> Result:
    """Asks for a name, an LLM greeting and the roots in one round (`user_name`, `greeting`, `client_roots`)."""
    state = {"kind": "multiple-inputs"}
    echoed = not is_modern(ctx) or load_state(ctx) == state
    requests = {
        "user_name": elicit("What is your name?", c.string_form("name")),
        "greeting": sample("Generate a greeting", 50),
        "client_roots": list_roots(),
    }
    answers = await ask(ctx, requests, state=state, answered=echoed)
    if isinstance(answers, InputRequiredResult):
        return answers
    roots = answers["client_roots"]
    count = len(roots.roots) if isinstance(roots, ListRootsResult) else 0
    name, greeting = form_value(answers["user_name"], "name"), sampled_text(answers["greeting"])
    return _text(f"Name: {name}; Greeting: {greeting}; Roots: {count}")


async def test_input_required_result_multi_round(ctx: Context) -> Result:
    """Asks for a name (`step1`), then in a second round for a colour (`step2`); the state carries the name."""
    state = load_state(ctx) if is_modern(ctx) else {}
    if not isinstance(state.get("name"), str):
        answers = await ask(ctx, {"step1": elicit("Step 1: What is your name?", c.string_form("name"))}, state={"round": 1})
        if isinstance(answers, InputRequiredResult):
            return answers
        state = {"round": 2, "name": form_value(answers["step1"], "name")}
    colour = elicit("Step 2: What is your favorite color?", c.string_form("color"))
    answers = await ask(ctx, {"step2": colour}, state=state)
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"Multi-round complete for {state['name']} who likes {form_value(answers['step2'], 'color')}")


async def test_input_required_result_capabilities(ctx: Context) -> Result:
    """Asks only for the inputs the client can give: elicitation and/or sampling, as declared."""
    offered = {
        "elicit_input": elicit("Elicitation input", c.string_form("value")),
        "sample_input": sample("Sample request", 50),
    }
    requests = {key: request for key, request in offered.items() if supports(ctx, request)}
    if not requests:
        return _text("No supported capabilities declared")
    answers = await ask(ctx, requests)
    if isinstance(answers, InputRequiredResult):
        return answers
    return _text(f"capabilities-ok: received {','.join(sorted(answers))}")


_TOOLS = [
    test_simple_text,
    test_image_content,
    test_audio_content,
    test_embedded_resource,
    test_multiple_content_types,
    test_error_handling,
    greet,
    test_header_echo,
    test_tool_with_logging,
    test_logging_tool,
    test_tool_with_progress,
    test_reconnection,
    test_trigger_tool_change,
    test_trigger_prompt_change,
    test_sampling,
    test_missing_capability,
    test_elicitation,
    test_elicitation_sep1034_defaults,
    test_elicitation_sep1330_enums,
    test_streaming_elicitation,
    test_input_required_result_elicitation,
    test_input_required_result_sampling,
    test_input_required_result_list_roots,
    test_input_required_result_request_state,
    test_input_required_result_tampered_state,
    test_input_required_result_multiple_inputs,
    test_input_required_result_multi_round,
    test_input_required_result_capabilities,
]


def build_tools() -> list[Tool]:
    """The tools, for `MCPServer(tools=...)`."""
    tools = [Tool.from_function(fn, structured_output=False) for fn in _TOOLS]
    # The published inputSchema is the raw 2020-12 document; calls are still validated by the
    # function's own (more lenient) argument model.
    raw = Tool.from_function(json_schema_2020_12_tool, structured_output=False)
    tools.append(raw.model_copy(update={"parameters": c.JSON_SCHEMA_2020_12}))
    return tools

