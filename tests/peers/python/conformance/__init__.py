"""The MCP conformance "everything server" fixture, split out of conformance_server.py.

- content.py  fixed payloads (image, audio, schemas, texts)
- asking.py   asking the client for input in either protocol era
- tools.py    the tools
- catalog.py  resources, prompts, completion, logging/setLevel, resources/subscribe
- tasks.py    the io.modelcontextprotocol/tasks extension (SEP-2663), task_tools.py its tools
- serving.py  HTTP and stdio transports, era selection, event store
"""

from .catalog import register_catalog
from .serving import serve_http, serve_stdio
from .tasks import STORE as TASK_STORE
from .tasks import TasksExtension
from .tools import build_tools

__all__ = ["TASK_STORE", "TasksExtension", "build_tools", "register_catalog", "serve_http", "serve_stdio"]
