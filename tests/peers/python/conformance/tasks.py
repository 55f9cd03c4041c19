"""The `io.modelcontextprotocol/tasks` extension (SEP-2663, "tasks v2"), 2026-07-28 only.

The SDK has no tasks implementation, so the fixture builds one on the SDK's extension seam
(`mcp.server.Extension`: advertised under capabilities.extensions, new methods, one
`tools/call` interceptor):

- A task-supporting tool called by a request whose client capabilities (per-request _meta)
  include the extension runs as a task: the call answers a CreateTaskResult
  (`resultType: "task"`, taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs) once
  the task is stored, and the tool body runs in the background. Otherwise an "optional" tool
  runs synchronously and a "required" one fails with -32021 naming the extension.
- A tool's body opts in by returning `await offload(work, required=...)`; an input
  it needs while running as a task (asking.ask) parks the task in `input_required` with
  `inputRequests` until `tasks/update` delivers the answers (partial answers allowed).
- `tasks/get` returns the task (result or error inlined once terminal), `tasks/update` and
  `tasks/cancel` answer an empty `{resultType: "complete"}`; all three need the extension
  (-32021 otherwise), an `Mcp-Name` header equal to the taskId on HTTP (-32020), and a known
  taskId (-32602). `tasks/result` and `tasks/list` (tasks v1) do not exist (-32601).
- A tool error ends the task `completed` with `result.isError`; an MCP error or a crash ends
  it `failed` with `error`; `tasks/cancel` ends a running task `cancelled`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import anyio
import anyio.abc
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.mcpserver import require_client_extension
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    InputRequest,
    InputResponse,
    RequestParams,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from . import asking

TASKS = "io.modelcontextprotocol/tasks"
TTL_MS = 600_000
POLL_INTERVAL_MS = 200
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_RESPONSE = TypeAdapter(InputResponse)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


@dataclass
class Task:
    id: str
    status: str = "working"
    created_at: str = field(default_factory=_now)
    updated_at: str = ""
    expires: float = field(default_factory=lambda: time.monotonic() + TTL_MS / 1000)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    pending: dict[str, InputRequest] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.updated_at = self.created_at

    def set(self, status: str, **outcome: Any) -> None:
        if self.status in _TERMINAL:
            return
        self.status, self.updated_at = status, _now()
        for key, value in outcome.items():
            setattr(self, key, value)

    def changed(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def envelope(self) -> dict[str, Any]:
        return {
            "taskId": self.id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def detailed(self) -> dict[str, Any]:
        task = self.envelope()
        if self.status == "input_required":
            task["inputRequests"] = {key: _dump(request) for key, request in self.pending.items()}
        elif self.status == "completed":
            task["result"] = self.result
        elif self.status == "failed":
            task["error"] = self.error
        return task

    async def ask(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """Park in input_required until every request is answered (via tasks/update)."""
        missing = {key: request for key, request in requests.items() if key not in self.answers}
        if missing:
            self.pending.update(missing)
            self.set("input_required")
            while any(key not in self.answers for key in requests):
                changed = self._changed
                await changed.wait()
            self.set("working")
        return {key: self.answers.pop(key) for key in requests}


class TaskStore:
    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._group: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The lifetime of the background work (entered from the server's lifespan)."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def start(self, work: Callable[[], Awaitable[Any]]) -> Task:
        if self._group is None:
            raise MCPError(code=INTERNAL_ERROR, message="Task store is not running")
        now = time.monotonic()
        for task_id in [k for k, t in self._tasks.items() if t.expires < now]:
            del self._tasks[task_id]
        task = Task(id=str(uuid.uuid4()))
        self._tasks[task.id] = task  # stored before the CreateTaskResult leaves
        self._group.start_soon(self._run, task, work)
        return task

    def get(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None or task.expires < time.monotonic():
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown taskId: {task_id}")
        return task

    async def _run(self, task: Task, work: Callable[[], Awaitable[Any]]) -> None:
        token = asking.CURRENT_TASK.set(task.ask)
        try:
            with task.scope:
                try:
                    result = await work()
                except UnexpectedToolError:
                    task.set("failed", error={"code": INTERNAL_ERROR, "message": "Internal error"})
                except ToolError as exc:
                    failed = CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
                    task.set("completed", result=_dump(failed))
                except MCPError as exc:
                    task.set("failed", error=_dump(exc.error))
                except Exception:
                    task.set("failed", error={"code": INTERNAL_ERROR, "message": "Internal error"})
                else:
                    task.set("completed", result=_dump(result))
        finally:
            asking.CURRENT_TASK.reset(token)
            task.set("cancelled")  # no-op unless cancelled before finishing
            task.changed()


STORE = TaskStore()


@dataclass
class _Offer:
    """Set by the interceptor when this tools/call may become a task; offload() fills it."""

    created: dict[str, Any] | None = None


_OFFER: ContextVar[_Offer | None] = ContextVar("task_offer", default=None)


def _missing_extension() -> MCPError:
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"This tool must run as a task; the client did not declare {TASKS}",
        data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
    )


def require_tasks() -> None:
    """Raise -32021 (naming the extension) unless this call may create a task."""
    if _OFFER.get() is None:
        raise _missing_extension()


async def offload(work: Callable[[], Awaitable[Any]], *, required: bool = False) -> Any:
    """Run `work` as a task if this call may create one, else inline (or -32021 if `required`)."""
    offer = _OFFER.get()
    if offer is None:
        if required:
            raise _missing_extension()
        return await work()
    task = STORE.start(work)
    offer.created = {"resultType": "task", **task.envelope()}
    return CallToolResult(content=[TextContent(type="text", text=f"Task {task.id} created")])


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(extensions) and TASKS in extensions


class TaskIdParams(RequestParams):
    task_id: str


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any] | None = None


def _task_for(ctx: ServerRequestContext[Any, Any], task_id: str) -> Task:
    require_client_extension(ctx, TASKS)
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is not None and headers.get("mcp-name") != task_id:
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")
    return STORE.get(task_id)


async def _tasks_get(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
    return {"resultType": "complete", **_task_for(ctx, params.task_id).detailed()}


async def _tasks_update(ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
    task = _task_for(ctx, params.task_id)
    for key, raw in (params.input_responses or {}).items():
        if key not in task.pending:
            continue  # not asked (or already answered): ignored
        try:
            task.answers[key] = _RESPONSE.validate_python(raw, by_name=False)
        except ValidationError:
            raise MCPError(code=INVALID_PARAMS, message=f"inputResponses[{key!r}] is not a valid response") from None
        del task.pending[key]
    task.changed()
    return {"resultType": "complete"}


async def _tasks_cancel(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
    task = _task_for(ctx, params.task_id)
    task.scope.cancel()
    return {"resultType": "complete"}


class TasksExtension(Extension):
    identifier = TASKS

    def tools(self) -> list[ToolBinding]:
        from .task_tools import TASK_TOOLS

        return TASK_TOOLS

    def methods(self) -> list[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, _tasks_get, protocol_versions=modern),
            MethodBinding("tasks/update", TaskUpdateParams, _tasks_update, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, _tasks_cancel, protocol_versions=modern),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if not _declares_tasks(ctx):
            return await call_next(ctx)
        offer = _Offer()
        token = _OFFER.set(offer)
        try:
            result = await call_next(ctx)
        finally:
            _OFFER.reset(token)
        return offer.created if offer.created is not None else result
