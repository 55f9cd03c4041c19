"""Resources, prompts, completions, logging/setLevel and resources/(un)subscribe."""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer, UserMessage
from mcp_types import (
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    PromptReference,
    ResourceTemplateReference,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import Field

from . import content as c
from .asking import ask, elicit, form_value


def register_catalog(server: MCPServer) -> None:
    _register_resources(server)
    _register_prompts(server)
    _register_completion(server)
    _register_legacy_methods(server)


def _register_resources(server: MCPServer) -> None:
    @server.resource(
        "test://static-text",
        name="static-text",
        title="Static Text Resource",
        description="A static text resource for testing",
        mime_type="text/plain",
    )
    def static_text() -> str:
        return c.STATIC_TEXT

    @server.resource(
        "test://static-binary",
        name="static-binary",
        title="Static Binary Resource",
        description="A static binary resource (PNG image) for testing",
        mime_type="image/png",
    )
    def static_binary() -> bytes:
        return base64.b64decode(c.PNG_BASE64)

    @server.resource(
        "test://template/{id}/data",
        name="template",
        title="Resource Template",
        description="A resource template with parameter substitution",
        mime_type="application/json",
    )
    def template(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @server.resource(
        "test://watched-resource",
        name="watched-resource",
        title="Watched Resource",
        description="A resource clients may subscribe to (its content does not change)",
        mime_type="text/plain",
    )
    def watched() -> str:
        return c.WATCHED_TEXT


def _register_prompts(server: MCPServer) -> None:
    @server.prompt(name="test_simple_prompt", title="Simple Test Prompt", description="A simple prompt without arguments")
    def simple() -> list[UserMessage]:
        return [UserMessage("This is a simple prompt for testing.")]

    @server.prompt(
        name="test_prompt_with_arguments", title="Prompt With Arguments", description="A prompt with required arguments"
    )
    def with_arguments(
        arg1: Annotated[str, Field(description="First test argument")],
        arg2: Annotated[str, Field(description="Second test argument")],
    ) -> list[UserMessage]:
        return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]

    @server.prompt(
        name="test_prompt_with_embedded_resource",
        title="Prompt With Embedded Resource",
        description="A prompt that includes an embedded resource",
    )
    def with_embedded_resource(
        resourceUri: Annotated[str, Field(description="URI of the resource to embed")],  # noqa: N803 (wire name)
    ) -> list[UserMessage]:
        resource = TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(EmbeddedResource(type="resource", resource=resource)),
            UserMessage("Please process the embedded resource above."),
        ]

    @server.prompt(name="test_prompt_with_image", title="Prompt With Image", description="A prompt that includes an image")
    def with_image() -> list[UserMessage]:
        return [
            UserMessage(ImageContent(type="image", data=c.PNG_BASE64, mime_type="image/png")),
            UserMessage("Please analyze the image above."),
        ]

    @server.prompt(
        name="test_input_required_result_prompt",
        title="Prompt Needing Input",
        description="Asks the user for context (input `user_context`) before rendering",
    )
    async def needing_input(ctx: Context) -> list[UserMessage] | InputRequiredResult:
        answers = await ask(ctx, {"user_context": elicit("What context should the prompt use?", c.string_form("context"))})
        if isinstance(answers, InputRequiredResult):
            return answers
        return [UserMessage(f"Prompt with context: {form_value(answers['user_context'], 'context')}")]


def _register_completion(server: MCPServer) -> None:
    @server.completion()
    async def complete(ref: PromptReference | ResourceTemplateReference, argument: Any, context: Any) -> Completion:
        """Prefix-filtered candidates for the prompt arguments arg1/arg2 and the template's {id}."""
        del ref, context
        values = [v for v in c.COMPLETIONS.get(argument.name, []) if v.startswith(argument.value)]
        return Completion(values=values, total=len(values), has_more=False)


# The handshake-era methods MCPServer has no decorator for. They are registered on the
# low-level server (the documented `add_request_handler` seam); the 2026-07-28 surface
# does not define them, so modern requests for them get -32601 from the SDK.
_subscriptions: set[str] = set()
_log_level: dict[str, str] = {"level": "debug"}


def _register_legacy_methods(server: MCPServer) -> None:
    lowlevel = server._lowlevel_server  # noqa: SLF001 (no public accessor)

    async def subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        _subscriptions.add(str(params.uri))
        return EmptyResult()

    async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        _subscriptions.discard(str(params.uri))
        return EmptyResult()

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        # Recorded only: the fixture's tools log at "info" regardless.
        _log_level["level"] = params.level
        return EmptyResult()

    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
