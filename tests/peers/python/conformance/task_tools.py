"""Tools that run as tasks (tasks.py) when the client negotiated io.modelcontextprotocol/tasks."""

from __future__ import annotations

import anyio
from mcp.server.extension import ToolBinding
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, ElicitResult, InputRequiredResult, TextContent

from . import content as c
from .asking import ask, elicit, form_value
from .tasks import offload, require_tasks

Result = CallToolResult | InputRequiredResult

CONFIRM_DELETE = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
NAME_AND_CONFIRM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}},
    "required": ["name"],
}


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def _confirmed(answer: object) -> bool:
    return isinstance(answer, ElicitResult) and answer.action == "accept" and (answer.content or {}).get("confirm") is True


async def slow_compute(seconds: float, label: str = "result") -> Result:
    """Task-supporting: sleeps `seconds` seconds, then returns "Computed <label> after <seconds>s"."""

    async def work() -> CallToolResult:
        await anyio.sleep(seconds)
        return _text(f"Computed {label} after {seconds:g}s")

    return await offload(work)


async def failing_job() -> Result:
    """Task required: after about a second, fails with a tool error (isError: true)."""

    async def work() -> CallToolResult:
        await anyio.sleep(1)
        raise ToolError("failing_job failed, as it always does")

    return await offload(work, required=True)


async def protocol_error_job() -> Result:
    """Task-supporting: ends with a JSON-RPC (protocol) error, -32603."""

    async def work() -> CallToolResult:
        await anyio.sleep(0.2)
        raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job hit an internal error, as it always does")

    return await offload(work)


async def confirm_delete(filename: str, ctx: Context) -> Result:
    """Task-supporting: asks the user to confirm (input `confirm`), then reports "Deleted"/"Kept" <filename>."""

    async def work() -> Result:
        answers = await ask(ctx, {"confirm": elicit(f"Delete {filename}?", CONFIRM_DELETE)})
        if isinstance(answers, InputRequiredResult):
            return answers
        return _text(f"Deleted {filename}" if _confirmed(answers["confirm"]) else f"Kept {filename}")

    return await offload(work)


async def multi_input(ctx: Context) -> Result:
    """Task-supporting: asks two questions at once (inputs `first`, `second`); reports both names."""

    async def work() -> Result:
        requests = {
            "first": elicit("First reviewer?", NAME_AND_CONFIRM),
            "second": elicit("Second reviewer?", NAME_AND_CONFIRM),
        }
        answers = await ask(ctx, requests)
        if isinstance(answers, InputRequiredResult):
            return answers
        return _text(f"Reviewers: {form_value(answers['first'], 'name')}, {form_value(answers['second'], 'name')}")

    return await offload(work)


async def test_tool_with_task(ctx: Context) -> Result:
    """Task required: asks for the user's name (input `user_name`) synchronously, then finishes as a task."""
    require_tasks()
    answers = await ask(ctx, {"user_name": elicit("What is your name?", c.string_form("name"))})
    if isinstance(answers, InputRequiredResult):
        return answers
    name = form_value(answers["user_name"], "name")

    async def work() -> CallToolResult:
        await anyio.sleep(0.2)
        return _text(f"Task finished for {name}")

    return await offload(work, required=True)


TASK_TOOLS = [
    ToolBinding(fn, kwargs={"structured_output": False})
    for fn in (slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task)
]
