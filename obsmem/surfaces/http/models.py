"""Request and response shapes of the HTTP API, as published in the OpenAPI schema.

Request models say what FastAPI checks before a route runs (types, ranges, patterns); the service then
checks meaning (real calendar dates, existing source events). Response models document what the routes
return; the routes build that JSON themselves (faster than re-validating every hit), and the contract
tests and the schemathesis run keep the two in step.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from obsmem.events import MAX_BATCH, EventIn
from obsmem.retrieval import MAX_QUERY_CHARS
from obsmem.validation import PROJECT_SLUG, SESSION_ID

PROJECT_PATTERN = f"^{PROJECT_SLUG.pattern}$"
SESSION_PATTERN = f"^{SESSION_ID.pattern}$"
ID_PATTERN = "^[0-9a-f]{12,64}$"
DATE_BOUND_PATTERN = r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2})?$"
MAX_OBSERVATIONS = 10_000

Importance = Literal["low", "medium", "high", "critical"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors -------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Stable machine-readable code, e.g. `invalid_query`, `project_not_found`.")
    message: str = Field(description="What is wrong and what is allowed; never echoes the value sent.")
    field: str | None = Field(default=None, description="The request field at fault, when there is one.")


class ErrorResponse(BaseModel):
    error: ErrorDetail


# -- requests -----------------------------------------------------------------------------------


class EventsRequest(Model):
    events: list[EventIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=(
            "Events in order. An omitted `seq` continues after the session's last event; give every event its "
            "`seq` to send an append again safely (an event already stored at its seq is a duplicate)."
        ),
    )


class ObservationsRequest(Model):
    observations: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=MAX_OBSERVATIONS,
        description=(
            "Observation objects: `session_id`, `content` (one line), `timestamp` ('YYYY-MM-DD HH:MM'), "
            "`importance` (low|medium|high|critical, default medium) and `source_refs` (event seqs of the "
            "same session, or `{session_id, seq}` objects). Each is checked on its own: a bad item is "
            "listed under `rejected` and never stops the others."
        ),
    )


class SearchRequest(Model):
    model_config = ConfigDict(extra="forbid", strict=True)

    # No length bounds here: they would count the whitespace around the query, which search trims first
    # (retrieval's validate_query checks the trimmed query, with the same messages as the tools).
    query: str = Field(
        description=f"1 to {MAX_QUERY_CHARS} characters once surrounding whitespace is trimmed, no control "
        "characters. Exact mode: one literal substring (ASCII case-insensitive; `%` and `_` are literal; "
        "several words match that exact phrase).",
    )
    after: str | None = Field(
        default=None,
        pattern=DATE_BOUND_PATTERN,
        description="Inclusive lower date bound: YYYY-MM-DD or YYYY-MM-DD HH:MM.",
    )
    before: str | None = Field(
        default=None,
        pattern=DATE_BOUND_PATTERN,
        description="Inclusive upper date bound; a date covers the whole day, an HH:MM the whole minute.",
    )
    limit: int | None = Field(default=None, ge=1, le=50, description="Most hits to return (default 20).")
    mode: Literal["exact", "hybrid"] | None = Field(default=None, description="Default: the server's mode.")
    session_id: str | None = Field(
        default=None, pattern=SESSION_PATTERN, description="Only memories of this session (default: all)."
    )
    scope: Literal["memories", "conversation", "all"] | None = Field(
        default=None,
        description="What to search: `memories` (observations and reflections; the default), `conversation` "
        "(the events: content and tool arguments) or `all` (both in one ranking).",
    )
    trust: Literal["trusted", "all"] | None = Field(
        default=None,
        description="`trusted` (default): memories and trusted notes. `all` adds candidate notes, marked "
        "`trusted: false`.",
    )


# -- responses ----------------------------------------------------------------------------------


class HealthResponse(BaseModel):
    status: Literal["ok"]
    version: str


class ProjectsResponse(BaseModel):
    projects: list[str] = Field(description="Projects this key may use that exist, sorted.")


class ProjectStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    project: str
    sessions: int
    events: int
    observations: int
    reflections: int
    last_activity: str | None
    database_bytes: int = Field(description="Size of the database file.")
    wal_bytes: int = Field(description="Size of its write-ahead log (truncated after large writes).")
    mode: str
    unindexed_events: int = Field(
        description="Events not in the conversation index yet: exact conversation search and recall scan them "
        "directly (slower, never different) until background housekeeping or `obsmem index` catches up."
    )


class AppendResponse(BaseModel):
    appended: int = Field(description="Events stored by this request.")
    duplicates: int = Field(description="Events identical to ones already stored at their seq (retries).")
    last_seq: int = Field(description="The session's last seq after this request.")


class WrittenMemory(BaseModel):
    index: int = Field(description="Position of the item in the request.")
    id: str = Field(description="12-character display id.")
    memory_id: str = Field(description="Full 64-character id.")


class RejectedItem(BaseModel):
    index: int
    code: str
    message: str


class WriteReceiptResponse(BaseModel):
    added: list[WrittenMemory]
    duplicates: list[WrittenMemory]
    rejected: list[RejectedItem]


class Hit(BaseModel):
    id: str = Field(description="12-character display id; pass it to recall.")
    memory_id: str
    kind: Literal["observation", "reflection"]
    session_id: str
    date: str = Field(description="YYYY-MM-DD HH:MM")
    importance: Importance | None = Field(
        default=None, description="Observations only: assigned when recorded, not a match score."
    )
    content: str


class EventHit(BaseModel):
    """A conversation event found by a search with scope `conversation` or `all`."""

    id: str = Field(description="12-character display id; pass it to recall for the events around it.")
    event_id: str
    kind: Literal["event"]
    session_id: str
    seq: int
    role: str
    type: str
    date: str = Field(description="YYYY-MM-DD HH:MM")
    content: str
    tool_name: str | None = None
    tool_args: Any = None


class NoteHit(BaseModel):
    id: str = Field(description="12-character display id of the note.")
    memory_id: str
    kind: Literal["note"]
    tier: Literal["project", "user"]
    date: str = Field(description="YYYY-MM-DD HH:MM (when it was written)")
    trusted: bool = Field(description="False for a candidate (only with `trust: all`).")
    status: Literal["candidate", "trusted"]
    situation: str = Field(description="When the note applies (may be empty).")
    content: str


class SearchResponse(BaseModel):
    mode: str
    hits: list[Hit | NoteHit | EventHit] = Field(
        description="Exact mode: newest first. Hybrid mode: most relevant first. Memories, notes and, with "
        "scope `conversation` or `all`, events."
    )
    truncated: bool = Field(description="More memories matched than were returned (no totals, no paging).")
    partial: bool = Field(description="The search index was still catching up (hybrid mode).")


class SourceRef(BaseModel):
    session_id: str
    seq: int


class RecalledMemory(Hit):
    created_at: str
    source_refs: list[SourceRef] | None = Field(default=None, description="Observations: the cited events.")
    supporting_observation_ids: list[str] | None = Field(default=None, description="Reflections only.")


class SourceEvent(BaseModel):
    session_id: str
    seq: int
    role: str
    type: str
    content: str
    tool_name: str | None = None
    tool_args: Any = None
    tool_call_id: str | None = None
    created_at: str


class ForgetResponse(BaseModel):
    deleted: Hit = Field(description="The memory that was deleted.")


class RecallResponse(BaseModel):
    memory: RecalledMemory
    sources: list[SourceEvent] = Field(description="An observation's source events.")
    supporting: list[Hit] = Field(description="A reflection's supporting observations.")


class RecalledEventBody(SourceEvent):
    id: str
    event_id: str
    kind: Literal["event"]


class EventRecallResponse(BaseModel):
    """`recall` of a conversation event's id."""

    event: RecalledEventBody
    before: list[SourceEvent] = Field(description="The events before it in its session, oldest first.")
    after: list[SourceEvent] = Field(description="The events after it in its session, oldest first.")
    cited_by: list[Hit] = Field(description="The observations that cite it, oldest first.")
