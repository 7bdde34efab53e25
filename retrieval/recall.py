"""Recall: a memory or event id (or a unique prefix of 12+ hex characters) -> what it is and where it came from.

An observation's provenance is the events it cites; a reflection's is the observations that support it.
A conversation event (a hit of ``memory_search`` with scope ``conversation`` or ``all``) comes with the
events around it in its session and the observations that cite it. Memory and event ids share one space
of hex ids, so a prefix that matches one of each is ambiguous like any other.
"""

from __future__ import annotations

import json

import apsw

from obsmem.errors import AmbiguousId, NotFound
from obsmem.ids import parse_id_prefix
from obsmem.retrieval.results import (
    HIT_COLUMNS,
    Hit,
    RecalledEvent,
    RecalledMemory,
    RecallParts,
    SourceEvent,
    SourceRef,
)
from obsmem.storage import sql_dialect
from obsmem.validation import session_id as check_session_id


def _scope(session_id: str | None, project: str) -> str:
    return f"session '{session_id}'" if session_id is not None else f"project '{project}'"


def find_memory_row(
    conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str
) -> tuple[int, Hit, str]:
    """Resolve a prefix to ``(row id, hit, created_at)``; raises not_found / ambiguous_id / invalid_id."""
    prefix = parse_id_prefix(id_prefix)
    if session_id is not None:
        check_session_id(session_id)
    # Every lowercase hex string sorts below "g", so this range is exactly the ids with the prefix.
    sql = f"SELECT m.id, m.created_at, {HIT_COLUMNS} FROM memories AS m WHERE m.memory_id >= ? AND m.memory_id < ?"
    params: list[object] = [prefix, prefix + "g"]
    if session_id is not None:
        sql += " AND m.session_id = ?"
        params.append(session_id)
    rows = conn.execute(sql + " ORDER BY m.memory_id LIMIT 2", params).fetchall()
    events = _events_with_prefix(conn, prefix, session_id)
    if len(rows) + len(events) > 1:
        raise AmbiguousId(
            f"id prefix {prefix} matches more than one memory or event in {_scope(session_id, project)}; "
            "give more characters (up to the full 64)",
            field="id",
        )
    if events:
        raise NotFound(f"id {prefix} names a conversation event, not a memory", field="id")
    if not rows:
        hint = (
            "pass session_id from a memory_search hit"
            if session_id is not None
            else "use an id from a memory_search hit or the rendered memory"
        )
        raise NotFound(f"no memory with id {prefix} in {_scope(session_id, project)}; {hint}", field="id")
    row = rows[0]
    return row[0], Hit.from_row(row[2:]), row[1]


_EVENT_COLUMNS = (
    "e.session_id, e.seq, e.role, e.type, e.content, e.tool_name, e.tool_args, e.tool_call_id, e.created_at"
)


def _source_event(row: tuple) -> SourceEvent:
    sid, seq, role, kind, content, tool_name, tool_args, tool_call_id, stamp = row
    return SourceEvent(
        session_id=sid,
        seq=seq,
        role=role,
        type=kind,
        content=content,
        tool_name=tool_name,
        tool_args=None if tool_args is None else json.loads(tool_args),
        tool_call_id=tool_call_id,
        created_at=stamp,
    )


def _events_with_prefix(conn: apsw.Connection, prefix: str, session_id: str | None) -> list[tuple]:
    """Up to two events whose id starts with ``prefix``: ``(event_id, *event columns)``."""
    # event_keys holds each id's first 12 characters up to the trigram watermark (m0006_conversation); a
    # prefix is at least that long. Events above the watermark are checked directly. Ids are not stored:
    # the SQL function derives them from the address.
    full_id = "obsmem_event_id(e.session_id, e.seq)"
    if sql_dialect(conn) == "postgres":
        # PostgreSQL indexes the ids' first 12 characters by expression (p0001_core): no watermark.
        sql = f"SELECT {full_id}, {_EVENT_COLUMNS} FROM events AS e WHERE left({full_id}, 12) = ?"
        return _first_two(
            conn, sql + f" AND {full_id} >= ? AND {full_id} < ?", [prefix[:12], prefix, prefix + "g"], session_id
        )
    sql = (
        f"SELECT {full_id}, {_EVENT_COLUMNS} FROM events AS e"
        " WHERE e.id IN (SELECT event_row FROM event_keys WHERE key = ?"
        " UNION ALL SELECT id FROM events WHERE id > (SELECT indexed_through FROM event_trigram_progress)"
        " AND substr(obsmem_event_id(session_id, seq), 1, 12) = ?)"
        f" AND {full_id} >= ? AND {full_id} < ?"
    )
    return _first_two(conn, sql, [prefix[:12], prefix[:12], prefix, prefix + "g"], session_id)


def _first_two(conn: apsw.Connection, sql: str, params: list[object], session_id: str | None) -> list[tuple]:
    if session_id is not None:
        sql += " AND e.session_id = ?"
        params.append(session_id)
    return conn.execute(sql + " ORDER BY 1 LIMIT 2", params).fetchall()


def recall_any(
    conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str, neighbours: int
) -> RecallParts | RecalledEvent:
    """A memory with its provenance, or a conversation event with ``neighbours`` events on each side and
    the observations citing it; raises not_found / ambiguous_id / invalid_id."""
    prefix = parse_id_prefix(id_prefix)
    if session_id is not None:
        check_session_id(session_id)
    events = _events_with_prefix(conn, prefix, session_id)
    if len(events) == 1:
        memory_matches = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE memory_id >= ? AND memory_id < ?"
            + (" AND session_id = ?" if session_id is not None else "")
            + " LIMIT 1)",
            [prefix, prefix + "g"] + ([session_id] if session_id is not None else []),
        ).fetchone()[0]
        if not memory_matches:
            return recall_event(conn, events[0][0], _source_event(events[0][1:]), neighbours)
    return recall(conn, prefix, session_id=session_id, project=project)


def recall_event(conn: apsw.Connection, event_id: str, event: SourceEvent, neighbours: int) -> RecalledEvent:
    """The event with up to ``neighbours`` events on each side in its session and the citing observations."""
    window = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events AS e WHERE e.session_id = ? AND e.seq BETWEEN ? AND ? ORDER BY e.seq",
        (event.session_id, event.seq - neighbours, event.seq + neighbours),
    ).fetchall()
    around = [_source_event(row) for row in window]
    cited_by = tuple(
        Hit.from_row(row)
        for row in conn.execute(
            f"SELECT {HIT_COLUMNS} FROM observation_sources AS s JOIN memories AS m ON m.id = s.memory_row"
            " WHERE s.session_id = ? AND s.seq = ? ORDER BY m.date, m.id",
            (event.session_id, event.seq),
        ).fetchall()
    )
    return RecalledEvent(
        event=event,
        event_id=event_id,
        before=tuple(item for item in around if item.seq < event.seq),
        after=tuple(item for item in around if item.seq > event.seq),
        cited_by=cited_by,
    )


def recall(conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str) -> RecallParts:
    """The memory with the id (prefix) and its provenance, typed; raises as :func:`find_memory_row`."""
    row_id, hit, created_at = find_memory_row(conn, id_prefix, session_id=session_id, project=project)
    if hit.kind == "observation":
        rows = conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM observation_sources AS s"
            " JOIN events AS e ON e.session_id = s.session_id AND e.seq = s.seq"
            " WHERE s.memory_row = ? ORDER BY e.session_id, e.seq",
            (row_id,),
        ).fetchall()
        sources = tuple(_source_event(row) for row in rows)
        refs = tuple(SourceRef(event.session_id, event.seq) for event in sources)
        return RecallParts(RecalledMemory.from_hit(hit, created_at, source_refs=refs), sources, ())
    supporting = tuple(
        Hit.from_row(row)
        for row in conn.execute(
            f"SELECT {HIT_COLUMNS} FROM reflection_supports AS r JOIN memories AS m ON m.id = r.observation_row"
            " WHERE r.reflection_row = ? ORDER BY m.date, m.id",
            (row_id,),
        ).fetchall()
    )
    memory = RecalledMemory.from_hit(
        hit, created_at, supporting_observation_ids=tuple(item.memory_id for item in supporting)
    )
    return RecallParts(memory, (), supporting)
