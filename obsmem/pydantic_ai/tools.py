"""``memory_search``, ``recall`` and ``memory`` as pydantic-ai tools, scoped to the capability's project and
session.

The definitions (names, descriptions that change with the search mode, JSON schemas) are the agent tools'
and the MCP server's own (:func:`obsmem.surfaces.tools.tool_definitions`), and so are the answers: the
result as JSON, or ``"<code>: <message>"`` for a call that cannot be answered, which the model reads and
corrects. :data:`MEMORY_TOOL_NAMES` is the one list of what the toolset holds: another agent tool of
obsmem's joins the capability by being named there (and, for a server, answered by
:meth:`~obsmem.pydantic_ai.backends.RemoteMemory.run_tool`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import FunctionToolset

from obsmem.pydantic_ai.backends import MemoryBackend
from obsmem.surfaces.tool_memory import MEMORY
from obsmem.surfaces.tools import MEMORY_SEARCH, RECALL, tool_definitions

MEMORY_TOOL_NAMES: tuple[str, ...] = (MEMORY_SEARCH, RECALL, MEMORY)


def memory_tools(backend: MemoryBackend, mode: str) -> list[Tool[Any]]:
    """One pydantic-ai tool per obsmem agent tool, worded for ``mode`` (``exact`` or ``hybrid``)."""
    tools: list[Tool[Any]] = []
    for definition in tool_definitions(mode):
        function = definition["function"]
        if function["name"] not in MEMORY_TOOL_NAMES:
            continue
        tools.append(
            Tool.from_schema(
                _runner(backend, function["name"]),
                name=function["name"],
                description=function["description"],
                json_schema=function["parameters"],
            )
        )
    return tools


def memory_toolset(backend: MemoryBackend, mode: str) -> FunctionToolset[Any]:
    return FunctionToolset(memory_tools(backend, mode))


def _runner(backend: MemoryBackend, name: str) -> Any:
    async def run(**arguments: Any) -> str:
        return await asyncio.to_thread(backend.run_tool, name, arguments)

    run.__name__ = name
    return run
