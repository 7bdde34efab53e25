"""Agent tools: ``memory_search``, ``recall`` and ``memory`` as function definitions, and a runner for their calls.

:func:`tool_definitions` gives the three tools in the OpenAI function-calling shape
(``{"type": "function", "function": {"name", "description", "parameters"}}``). The names and
arguments never change; the descriptions (and the guidance on what to search for) switch with the
search mode: exact mode finds one literal substring, hybrid mode also takes natural-language
descriptions and ranks by relevance. The MCP server publishes the same definitions. The ``memory`` tool
(save, update or forget a note) is defined once in :mod:`obsmem.surfaces.tool_memory` and included here.

:func:`execute_tool` runs one call a model made and returns text for the model: the result as JSON, or
``"<code>: <message>"`` when the call cannot be answered (bad arguments, unknown id, missing project).
A model's mistake is never an exception, so an agent loop can hand the text straight back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.app import LOCAL_USER, Obsmem
from obsmem.errors import InvalidArguments, ObsmemError, UnknownTool
from obsmem.json_shape import finite
from obsmem.retrieval import MODES, SCOPES
from obsmem.storage import storage_fault
from obsmem.surfaces.tool_memory import MEMORY, MEMORY_ARGUMENTS, memory_tool_definition, run_memory_tool
from obsmem.validation import field_path

MEMORY_SEARCH = "memory_search"
RECALL = "recall"
TOOL_NAMES = (MEMORY_SEARCH, RECALL, MEMORY)

_ARGUMENTS = {
    MEMORY_SEARCH: ("query", "after", "before", "limit", "session_id", "scope", "trust"),
    RECALL: ("id", "session_id"),
    MEMORY: MEMORY_ARGUMENTS,
}

# -- descriptions -----------------------------------------------------------------------------------

_MEMORY = (
    "This project's observational memory holds short, dated notes about earlier work in all of its "
    "sessions: requests, decisions, errors, file paths, identifiers and outcomes."
)
_CAVEATS = (
    "Observation hits carry an importance level that was assigned when the memory was recorded; it is "
    "not a match score. No hits does not prove something never happened: memory can lag behind the "
    "conversation or leave details out. Memories describe the past: verify the current repository or PR "
    "state before acting on an old decision."
)
_SEARCH_EXACT = (
    "Search memory for one contiguous literal substring. " + _MEMORY + " "
    "Matching is ASCII case-insensitive; % and _ are ordinary characters; a query of several words "
    "matches only that exact phrase, never the words separately. By default only memory content is "
    "searched (scope 'memories'), across all sessions unless session_id is given. Hits come newest first, at most "
    "`limit`; truncated: true means older matches were left out (there is no total and no paging: "
    "narrow the query or add after/before dates). Prefer a single identifier (a function or file name, "
    "an error code, a PR number), then call recall with the hit's id and session_id for its provenance. " + _CAVEATS
)
_SEARCH_HYBRID = (
    "Search memory by meaning and by keywords. " + _MEMORY + " "
    "Combines BM25 keyword search with semantic vector search: the query may be an identifier, an "
    "exact phrase, or a natural-language description or paraphrase of what you are looking for. Hits come "
    "most relevant first, at most `limit`, with no scores; truncated: true means more candidates existed; "
    "partial: true means the index is still catching up and recent memories may be missing; "
    "nothing_close: true (with a note) means no memory was close enough to return, which does not prove "
    "nothing relevant is stored; unknown_names, when present, lists the names in your query that no memory "
    "mentions (check the spelling or search for what they are). By default only memory content is "
    "searched (scope 'memories'), across all sessions unless session_id is given. Call recall with a hit's "
    "id and session_id for its provenance. " + _CAVEATS
)
_QUERY = {
    "exact": "One literal substring to find (1-1000 characters), e.g. `MapToolArguments`, `ECONNRESET`, "
    "`src/auth/login.py` or an exact phrase. Not keywords, not a question.",
    "hybrid": "What to look for (1-1000 characters): an identifier, an exact phrase, or a natural-language "
    "description or paraphrase such as 'why did we pin the httpx version'.",
}
_LIMIT = {
    "exact": "Most hits to return, newest first (default 20, at most 50).",
    "hybrid": "Most hits to return, most relevant first (default 20, at most 50).",
}
_RECALL = (
    "Recover the provenance of one memory by its id: for an observation, the conversation events it was "
    "recorded from (seq, role, type, content, time); for a reflection, the observations that support it; "
    "for a conversation event (a hit of kind 'event'), the events before and after it in its session and "
    "the observations that cite it; for a note (a hit of kind 'note'), the note with its tier, status, "
    "whether it is trusted, the judgments about it and its history (a note cites no events). "
    "Use an id from memory_search or from the rendered memory: the 12-character display id, any unique "
    "lowercase hex prefix of 12-64 characters, or the full 64-character id. Looks in the current session "
    "when there is one (otherwise the whole project); for a memory from another session pass the "
    "session_id of the search hit. If the id is not found, the error names the session searched. " + _CAVEATS
)
_DATE = "YYYY-MM-DD or YYYY-MM-DD HH:MM"
_SCOPE = (
    "What to search. 'memories' (default): the short dated notes, the right first look for what was "
    "decided, tried or learned. 'conversation': the raw conversation events themselves (messages, tool "
    "calls with their arguments, tool results): use it for exact words the notes leave out (a full error "
    "message, a command line, a quoted request) or when memory has nothing yet. 'all': both in one "
    "list. Event hits carry session_id, seq, role and type; recall an event's id to see the events "
    "around it and the observations that cite it."
)


def _search_parameters(mode: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": _QUERY[mode]},
            "after": {
                "type": "string",
                "description": f"Only memories dated at or after this ({_DATE}; inclusive).",
            },
            "before": {
                "type": "string",
                "description": f"Only memories dated at or before this ({_DATE}; a date covers the whole day, "
                "an HH:MM the whole minute).",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": _LIMIT[mode]},
            "session_id": {
                "type": "string",
                "description": "Only memories of this session (default: every session of the project).",
            },
            "scope": {"type": "string", "enum": list(SCOPES), "description": _SCOPE},
            "trust": {
                "type": "string",
                "enum": ["trusted", "all"],
                "description": "'trusted' (default): memories and trusted notes. 'all' adds untrusted candidate "
                "notes, marked trusted: false; treat those as unconfirmed hints.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def _recall_parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "id": {
                "type": "string",
                "description": "Memory id: 12-64 lowercase hex characters (the display id from a search hit).",
            },
            "session_id": {
                "type": "string",
                "description": "The session_id of the search hit, for a memory from another session.",
            },
        },
        "required": ["id"],
        "additionalProperties": False,
    }


def tool_definitions(mode: str = "exact") -> list[dict[str, Any]]:
    """``memory_search``, ``recall`` and ``memory`` in the OpenAI function-calling shape, worded for ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    search = _SEARCH_EXACT if mode == "exact" else _SEARCH_HYBRID
    return [
        _function(MEMORY_SEARCH, search, _search_parameters(mode)),
        _function(RECALL, _RECALL, _recall_parameters()),
        memory_tool_definition(),
    ]


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


# -- execution --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call produced: ``text`` for the model, the result (on success) and whether it failed."""

    text: str
    result: dict[str, Any] | None = None

    @property
    def is_error(self) -> bool:
        return self.result is None


def _failure(code: str, message: str) -> ToolOutcome:
    return ToolOutcome(f"{code}: {message}")


def parse_tool_arguments(name: str, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    """A tool call's arguments as a dict, checked against the names the tool takes (``InvalidArguments``)."""
    return _parse_arguments(name, arguments)


def _parse_arguments(name: str, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
            raise InvalidArguments("arguments are not valid JSON") from None
    if not isinstance(arguments, dict):
        raise InvalidArguments("arguments must be a JSON object")
    allowed = _ARGUMENTS[name]
    for key in arguments:
        if key not in allowed:
            # A name the model chose may hold anything, a credential too: shown only when it is a plain name
            # that does not look like a secret (the rule of every field path in an error).
            part = field_path([key]) if isinstance(key, str) else "<key>"
            shown = "an argument" if part == "<key>" else f"'{part}'"
            raise InvalidArguments(f"{name} does not take {shown}; it takes: {', '.join(allowed)}")
    # Models often send null for an optional argument they mean to leave out.
    return {key: value for key, value in arguments.items() if value is not None}


def run_tool(
    service: Obsmem,
    project: str,
    name: str,
    arguments: dict[str, Any] | str | None,
    *,
    session_id: str | None = None,
    user: str | None = LOCAL_USER,
) -> ToolOutcome:
    """Run one tool call; ``session_id`` is the caller's current session (recall's default scope) and
    ``user`` the owner of its user tier of notes (the local account by default; None: none)."""
    if name not in TOOL_NAMES:
        unknown = UnknownTool(f"there is no tool with that name; tools: {', '.join(TOOL_NAMES)}")
        return _failure(unknown.code, unknown.message)
    try:
        args = _parse_arguments(name, arguments)
        if name == MEMORY_SEARCH:
            if "query" not in args:
                return _failure("invalid_query", "query is required")
            query = args.pop("query")
            result = service.search(project, query, user=user, **args).to_dict()
        elif name == MEMORY:
            result = run_memory_tool(service, project, args, user=user)
        else:
            if "id" not in args:
                return _failure("invalid_id", "id is required: a memory id from memory_search")
            scope = args.get("session_id", session_id)
            if scope is not None and not isinstance(scope, str):
                return _failure("invalid_session", "session_id must be a string")
            result = service.recall(project, args["id"], session_id=scope, user=user).to_dict()
    except ObsmemError as exc:
        return _failure(exc.code, exc.message)
    except (apsw.Error, OSError) as exc:
        fault = storage_fault(exc)
        if fault is None:
            raise
        return _failure(fault.code, fault.message)
    result = finite(result)  # tool arguments stored before NaN was refused: strict JSON, as over HTTP
    return ToolOutcome(json.dumps(result, ensure_ascii=False, allow_nan=False), result)


def execute_tool(
    service: Obsmem,
    project: str,
    name: str,
    arguments: dict[str, Any] | str | None,
    *,
    session_id: str | None = None,
    user: str | None = LOCAL_USER,
) -> str:
    """Run one tool call and return the text to give the model (JSON, or ``"<code>: <message>"``)."""
    return run_tool(service, project, name, arguments, session_id=session_id, user=user).text
