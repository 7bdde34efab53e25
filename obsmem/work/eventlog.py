"""The pipeline event log: what the background stages did, for status views and event streams.

One append-only table (``om_events``). Ids only grow, so a reader that remembers the last id it saw
resumes exactly where it stopped (the SSE stream uses it as ``Last-Event-ID``). Events carry counts,
durations, ids and sanitised error codes — never memory text, prompts or model output.

Types written by obsmem:

- ``om_observation_start`` / ``om_observation_end`` / ``om_observation_failed``: one Observer cycle (one
  chunk), correlated by ``cycle_id``.
- ``om_reflection_start`` / ``om_reflection_end`` / ``om_reflection_failed`` and ``om_dropper_start`` /
  ``om_dropper_end`` / ``om_dropper_failed``: one Reflector/Dropper run (one cycle), with token counts
  before and after.
- ``om_model_changed``: a role's model was switched at run time.
- ``trust_judgment``: a candidate note was judged (judgment and note ids, tier, ``p``, decision, and the
  error code and message of a failed judge call); see docs/trust.md.
- ``job_failed``: a job gave up after its last attempt (exactly one per such job).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import now_iso
from obsmem.errors import ValidationFailed
from obsmem.storage import sql_dialect

MAX_LIST = 1000
DEFAULT_LIST = 100
# Event ids are SQLite integers: a larger cursor cannot be bound to a query (and no event can have it).
MAX_EVENT_ID = 2**63 - 1
# The types the pipeline's stages and the job queue write (all above but ``trust_judgment``): what a
# session's event stream carries, over HTTP and to an agent integration alike.
PIPELINE_EVENTS = (
    "om_observation_start",
    "om_observation_end",
    "om_observation_failed",
    "om_reflection_start",
    "om_reflection_end",
    "om_reflection_failed",
    "om_dropper_start",
    "om_dropper_end",
    "om_dropper_failed",
    "om_model_changed",
    "job_failed",
)
# Every type the log holds: what ``GET .../events?type=`` may ask for.
LOGGED_EVENTS = (*PIPELINE_EVENTS, "trust_judgment")


@dataclass(frozen=True)
class LoggedEvent:
    id: int
    type: str
    session_id: str | None
    cycle_id: str | None
    job_id: int | None
    created_at: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "type": self.type, "created_at": self.created_at}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        if self.cycle_id is not None:
            body["cycle_id"] = self.cycle_id
        if self.job_id is not None:
            body["job_id"] = self.job_id
        body.update(self.data)
        return body


def record(
    conn: apsw.Connection,
    type_: str,
    *,
    session_id: str | None = None,
    cycle_id: str | None = None,
    job_id: int | None = None,
    data: dict[str, Any] | None = None,
) -> int:
    """Append one event inside the caller's transaction (or autocommit). Returns its id."""
    row = conn.execute(
        "INSERT INTO om_events(type, session_id, cycle_id, job_id, created_at, data)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (type_, session_id, cycle_id, job_id, now_iso(), json.dumps(data or {}, separators=(",", ":"))),
    ).fetchone()
    if sql_dialect(conn) == "postgres":
        # Followers on PostgreSQL are woken by LISTEN/NOTIFY (obsmem.storage.postgres.notify) at the commit.
        conn.execute("SELECT pg_notify('obsmem_events', current_schema())")
    return int(row[0])


def parse_list_limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIST
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIST:
        raise ValidationFailed(f"limit must be an integer between 1 and {MAX_LIST}", field="limit")
    return value


def parse_after(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EVENT_ID:
        raise ValidationFailed(f"after must be an event id between 0 and {MAX_EVENT_ID}", field="after")
    return value


def list_events(
    conn: apsw.Connection,
    *,
    after: int = 0,
    limit: int = DEFAULT_LIST,
    session_id: str | None = None,
    types: tuple[str, ...] = (),
    newest: bool = False,
) -> list[LoggedEvent]:
    """Events with ``id > after``, oldest first; ``newest`` takes the last ``limit`` instead of the first."""
    sql = "SELECT id, type, session_id, cycle_id, job_id, created_at, data FROM om_events WHERE id > ?"
    params: list[Any] = [after]
    if session_id is not None:
        sql += " AND session_id = ?"
        params.append(session_id)
    if types:
        sql += f" AND type IN ({', '.join('?' for _ in types)})"
        params.extend(types)
    sql += " ORDER BY id DESC LIMIT ?" if newest else " ORDER BY id LIMIT ?"
    params.append(limit)
    rows = conn.execute(sql, params).fetchall()
    if newest:
        rows.reverse()
    return [LoggedEvent(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6])) for row in rows]


def last_failure_at(conn: apsw.Connection, session_id: str, kind: str) -> str | None:
    """When the session's newest job of ``kind`` gave up (its ``job_failed`` event's ``created_at``); None if never.

    Housekeeping uses it to cool a session down after a failure instead of retrying it at once.
    """
    # The data's kind: json_extract on SQLite, the jsonb operator on PostgreSQL.
    kind_of_data = "data::jsonb->>'kind'" if sql_dialect(conn) == "postgres" else "json_extract(data, '$.kind')"
    row = conn.execute(
        "SELECT created_at FROM om_events WHERE session_id = ? AND type = 'job_failed'"
        f" AND {kind_of_data} = ? ORDER BY id DESC LIMIT 1",
        (session_id, kind),
    ).fetchone()
    return None if row is None else str(row[0])


def latest_session_event(conn: apsw.Connection, session_id: str, types: tuple[str, ...]) -> LoggedEvent | None:
    """The session's newest event of one of ``types``, or None (the status view's "last error")."""
    row = conn.execute(
        "SELECT id, type, session_id, cycle_id, job_id, created_at, data FROM om_events WHERE session_id = ?"
        f" AND type IN ({', '.join('?' for _ in types)}) ORDER BY id DESC LIMIT 1",
        (session_id, *types),
    ).fetchone()
    if row is None:
        return None
    return LoggedEvent(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))


def has_session_event_after(conn: apsw.Connection, session_id: str, after: int, types: tuple[str, ...]) -> bool:
    """Whether the session has an event of one of ``types`` with ``id > after`` (a success since a failure)."""
    row = conn.execute(
        "SELECT 1 FROM om_events WHERE session_id = ? AND id > ?"
        f" AND type IN ({', '.join('?' for _ in types)}) LIMIT 1",
        (session_id, after, *types),
    ).fetchone()
    return row is not None


def last_event_id(conn: apsw.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(id), 0) FROM om_events").fetchone()
    return int(row[0])
