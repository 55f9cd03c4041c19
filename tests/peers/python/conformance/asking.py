"""Asking the client for input (elicitation, sampling, roots) in either protocol era.

At 2026-07-28 a server cannot send requests to the client; a handler returns an
`InputRequiredResult` naming what it needs and the client retries the same request with
`inputResponses` (and the echoed `requestState`). At the initialize-based revisions the
handler sends each request to the client mid-call instead. `ask()` hides the difference,
so every tool that needs input works in both eras.

`requestState` is plaintext JSON here: the SDK's `RequestStateBoundary` (installed by
`MCPServer`) seals it on the way out and verifies it on the way in, answering -32602 to a
tampered or expired value before any handler runs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequest,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    SamplingMessage,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# The capability each kind of input request needs, and the result it is answered with.
_KINDS: dict[type, tuple[str, type]] = {
    ElicitRequest: ("elicitation", ElicitResult),
    CreateMessageRequest: ("sampling", CreateMessageResult),
    ListRootsRequest: ("roots", ListRootsResult),
}


# Set while a tool body runs as a task (tasks.py): asking then parks the task in input_required.
CURRENT_TASK: ContextVar[Callable[[Mapping[str, InputRequest]], Awaitable[dict[str, Any]]] | None] = ContextVar(
    "current_task", default=None
)


def is_modern(ctx: Context) -> bool:
    """Whether this request speaks a stateless (2026-07-28+) revision."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def elicit(message: str, schema: Mapping[str, Any]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=dict(schema)))


def sample(text: str, max_tokens: int) -> CreateMessageRequest:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    return CreateMessageRequest(params=CreateMessageRequestParams(messages=[message], max_tokens=max_tokens))


def list_roots() -> ListRootsRequest:
    return ListRootsRequest()


def supports(ctx: Context, request: InputRequest) -> bool:
    """Whether the client declared the capability `request` needs."""
    capabilities = ctx.client_capabilities
    name = _KINDS[type(request)][0]
    return capabilities is not None and getattr(capabilities, name) is not None


def require(ctx: Context, requests: Mapping[str, InputRequest]) -> None:
    """Raise MissingRequiredClientCapabilityError (-32021) unless the client can answer every request."""
    missing = sorted({_KINDS[type(r)][0] for r in requests.values() if not supports(ctx, r)})
    if missing:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"Client did not declare the required capabilities: {', '.join(missing)}",
            data={"requiredCapabilities": {name: {} for name in missing}},
        )


def load_state(ctx: Context) -> dict[str, Any]:
    """The (already verified) requestState this round carries, or {}."""
    raw = ctx.request_state
    if not raw:
        return {}
    try:
        state = json.loads(raw)
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def input_required(requests: Mapping[str, InputRequest], state: Mapping[str, Any] | None = None) -> InputRequiredResult:
    return InputRequiredResult(
        input_requests=dict(requests),
        request_state=json.dumps(state, sort_keys=True) if state is not None else None,
    )


async def ask(
    ctx: Context,
    requests: Mapping[str, InputRequest],
    *,
    state: Mapping[str, Any] | None = None,
    answered: bool = True,
) -> dict[str, Any] | InputRequiredResult:
    """Get the client's answers to `requests`, keyed like `requests`.

    Modern era: the answers of this round's `inputResponses` when every key is answered
    (and `answered` is true: the caller's own check of the echoed state); otherwise an
    `InputRequiredResult` asking for all of `requests`, carrying `state` as requestState.
    Legacy era: sends each request to the client now and waits for its answer.
    Inside a task (tasks.py): parks the task until tasks/update has answered every request.
    """
    require(ctx, requests)
    if (park := CURRENT_TASK.get()) is not None:
        return await park(requests)
    if is_modern(ctx):
        responses = ctx.input_responses or {}
        if answered and all(key in responses for key in requests):
            return {key: responses[key] for key in requests}
        return input_required(requests, state)
    related = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
    answers: dict[str, Any] = {}
    for key, request in requests.items():
        answers[key] = await ctx.session.send_request(request, _KINDS[type(request)][1], metadata=related)
    return answers


def form_value(answer: Any, field: str, default: str = "unknown") -> str:
    """A string field of an accepted elicitation, else `default`."""
    if isinstance(answer, ElicitResult) and answer.action == "accept" and answer.content:
        value = answer.content.get(field)
        if isinstance(value, str | int | float | bool):
            return str(value)
    return default


def sampled_text(answer: Any, default: str = "no response") -> str:
    content = getattr(answer, "content", None)
    text = getattr(content, "text", None)
    return text if isinstance(text, str) else default


def describe(answer: Any) -> str:
    """`action=..., content=...` of an elicitation answer."""
    if isinstance(answer, ElicitResult):
        return f"action={answer.action}, content={json.dumps(answer.content or {}, sort_keys=True)}"
    return f"unexpected answer {type(answer).__name__}"
