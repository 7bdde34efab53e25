"""MCP server: the ``memory_search``, ``recall`` and ``memory`` tools over the Model Context Protocol.

Two transports, one server definition:

- **stdio** — :func:`run_stdio` (``obsmem mcp``, or ``python -m obsmem.surfaces.mcp_server --data-dir D
  --project P [--session-id S]``): one project, fixed when the process starts.
- **streamable HTTP** — mounted by the HTTP app at ``/mcp/{project}`` (``?session_id=`` optional) under
  the same API keys; the project comes from the path of each request.

The tools are the ones in :mod:`obsmem.surfaces.tools`, with the same JSON schemas, descriptions and
error texts. The server is built on the SDK's low-level ``Server`` rather than ``MCPServer``: that one
derives schemas from Python signatures and validates arguments itself, while the schemas here must be
exactly the published function definitions and a model's bad arguments must come back as the same
``"<code>: <message>"`` text the other surfaces give.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from obsmem.app import LOCAL_USER, Obsmem
from obsmem.errors import ObsmemError
from obsmem.events import TRIGRAM_BATCH_EVENTS
from obsmem.redaction import redact_text
from obsmem.surfaces.tool_memory import MEMORY
from obsmem.surfaces.tools import run_tool, tool_definitions
from obsmem.validation import project_name
from obsmem.validation import session_id as check_session_id
from obsmem.version import __version__

logger = logging.getLogger("obsmem.mcp")

# Where the HTTP mount leaves the project and default session of a request (see surfaces/http/mcp.py).
MCP_SCOPE_KEY = "obsmem.mcp"
# Tools that write (the others only read).
WRITING_TOOLS = (MEMORY,)

INSTRUCTIONS = (
    "obsmem is this project's observational memory: dated notes about earlier work. Use memory_search "
    "to find prior decisions, errors and identifiers, then recall with a hit's id and session_id to see "
    "the conversation it came from. Search with scope 'conversation' for the exact words of the "
    "conversation itself (messages, tool calls and results) when the notes leave them out. Verify current "
    "repository state before acting on old decisions. Use memory to save, correct or forget a note "
    "yourself; new notes stay untrusted until confirmed."
)


def _tools(service: Obsmem) -> list[types.Tool]:
    return [
        types.Tool(
            name=definition["function"]["name"],
            description=definition["function"]["description"],
            input_schema=definition["function"]["parameters"],
            annotations=types.ToolAnnotations(
                read_only_hint=definition["function"]["name"] not in WRITING_TOOLS, open_world_hint=False
            ),
        )
        for definition in tool_definitions(service.default_mode)
    ]


def _target(request: Any, project: str | None, session_id: str | None) -> tuple[str | None, str | None, str | None]:
    """The project, default session and user-tier owner of this call: fixed (stdio: the local account) or
    set by the HTTP mount (the API key's owner)."""
    if project is not None:
        return project, session_id, LOCAL_USER
    scope = getattr(request, "scope", None) or {}
    target = scope.get(MCP_SCOPE_KEY) or {}
    return target.get("project"), target.get("session_id"), target.get("user")


def build_server(service: Obsmem, *, project: str | None = None, session_id: str | None = None) -> Server[Any]:
    """The MCP server; ``project`` fixes the project (stdio), None reads it from each HTTP request."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools(service))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        target_project, default_session, user = _target(getattr(ctx, "request", None), project, session_id)
        if target_project is None:
            text = "project_not_found: this MCP endpoint has no project; connect to /mcp/<project>"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        try:
            outcome = await anyio.to_thread.run_sync(
                lambda: run_tool(
                    service, target_project, params.name, params.arguments, session_id=default_session, user=user
                )
            )
        except Exception:
            # The tool name is the client's text, logged only with its secrets cut out.
            logger.exception("tool %s failed unexpectedly", redact_text(params.name))
            text = "internal_error: the tool failed unexpectedly; the server log has the details"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.text)],
            structured_content=outcome.result,
            is_error=outcome.is_error,
        )

    return Server(
        "obsmem",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def catch_up_conversation(service: Obsmem, project: str, stop: threading.Event) -> int:
    """Index the project's events that exact conversation search has not indexed yet, one batch per
    transaction, until none is left or ``stop`` is set; returns how many were indexed.

    A stdio server runs no worker pool, whose housekeeping would do it: without this, every conversation
    search and event recall of a session that follows an import would scan the whole import."""
    done = 0
    try:
        while not stop.is_set():
            step = service.index_conversation(project, max_events=TRIGRAM_BATCH_EVENTS)
            if step == 0:
                break
            done += step
    except ObsmemError as exc:  # no such project yet (nothing to index), or a storage fault
        if exc.code != "project_not_found":
            logger.warning("conversation index catch-up stopped: %s: %s", exc.code, exc.message)
    return done


def run_stdio(service: Obsmem, project: str, session_id: str | None = None) -> None:
    """Serve the tools for one project over stdin/stdout until the client closes the stream; the events'
    conversation index is caught up in the background meanwhile (search answers the same either way)."""
    project = project_name(project)
    if session_id is not None:
        check_session_id(session_id)
    server = build_server(service, project=project, session_id=session_id)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    stop = threading.Event()
    catching_up = threading.Thread(
        target=catch_up_conversation, args=(service, project, stop), name="obsmem-conversation-index", daemon=True
    )
    catching_up.start()
    try:
        anyio.run(serve)
    finally:
        stop.set()
        catching_up.join()  # at most one batch: the service's connections close after it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m obsmem.surfaces.mcp_server", description="obsmem MCP server over stdio (one project)."
    )
    parser.add_argument("--project", required=True, help="project slug to serve")
    parser.add_argument("--data-dir", help="data directory (default: OBSMEM_DATA_DIR or the settings file)")
    parser.add_argument("--config", help="settings file (default: OBSMEM_CONFIG or <data-dir>/obsmem.toml)")
    parser.add_argument("--session-id", help="the agent's current session: recall's default scope")
    args = parser.parse_args(argv)
    # stdout carries the protocol; everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from obsmem.settings import load_settings

    try:
        settings = load_settings(args.config, data_dir=args.data_dir)
        with Obsmem(settings) as service:
            run_stdio(service, args.project, session_id=args.session_id)
    except ObsmemError as exc:
        print(f"obsmem mcp: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
