"""Recall: a memory or event id (or a unique prefix of 12+ hex characters) -> what it is and where it came from.

An observation's provenance is the events it cites; a reflection's is the observations that support it.
A conversation event (a hit of ``memory_search`` with scope ``conversation`` or ``all``) comes with the
events around it in its session and the observations that cite it.

Memory and event ids share one space of hex ids (both are SHA-256 digests, alike in form), so a prefix
that matches one of each is ambiguous like any other. Events are found through ``event_keys``, which
holds the events up to the trigram watermark (m0006_conversation); the events above it (appended since
the last catch-up) can only be found by hashing each one's address. That scan runs only when the prefix
matches no memory: a prefix that names a memory is answered as that memory after checking the indexed
events alone. A memory and an event sharing the 12 characters of a display id is a chance of one in
2**48 per pair, and the catch-up (workers' housekeeping, ``obsmem index``) brings the full check back,
so recalling or forgetting a memory never costs time in proportion to the events not indexed yet.
"""

from __future__ import annotations

import json

import apsw

from obsmem.errors import AmbiguousId, NotFound, interface_name
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

# A memory found by its id: (row id, hit, created_at).
MemoryRow = tuple[int, Hit, str]


def _scope(session_id: str | None, project: str) -> str:
    return f"session '{session_id}'" if session_id is not None else f"project '{project}'"


def _memory_rows(conn: apsw.Connection, prefix: str, session_id: str | None) -> list[tuple]:
    """Up to two memories whose id starts with ``prefix``: ``(row id, created_at, *hit columns)``."""
    # Every lowercase hex string sorts below "g", so this range is exactly the ids with the prefix.
    sql = f"SELECT m.id, m.created_at, {HIT_COLUMNS} FROM memories AS m WHERE m.memory_id >= ? AND m.memory_id < ?"
    params: list[object] = [prefix, prefix + "g"]
    if session_id is not None:
        sql += " AND m.session_id = ?"
        params.append(session_id)
    return conn.execute(sql + " ORDER BY m.memory_id LIMIT 2", params).fetchall()


def _resolve_memory(
    rows: list[tuple], events: list[tuple], prefix: str, session_id: str | None, project: str
) -> MemoryRow:
    """The one memory of ``rows``, or the error that says why there is none (``events``: the events found
    with the prefix)."""
    if len(rows) + len(events) > 1:
        raise AmbiguousId(
            f"id prefix {prefix} matches more than one memory or event in {_scope(session_id, project)}; "
            "give more characters (up to the full 64)",
            field="id",
        )
    if events:
        raise NotFound(f"id {prefix} names a conversation event, not a memory", field="id")
    if not rows:
        search = interface_name("memory_search")
        hint = (
            f"pass {interface_name('session_id')} from a {search} hit"
            if session_id is not None
            else f"use an id from a {search} hit or the rendered memory"
        )
        raise NotFound(f"no memory with id {prefix} in {_scope(session_id, project)}; {hint}", field="id")
    row = rows[0]
    return row[0], Hit.from_row(row[2:]), row[1]


def find_memory_row(
    conn: apsw.Connection,
    id_prefix: object,
    *,
    session_id: str | None,
    project: str,
    scan_unindexed: bool = True,
) -> MemoryRow:
    """Resolve a prefix to ``(row id, hit, created_at)``; raises not_found / ambiguous_id / invalid_id.

    The events not indexed yet are scanned only when no memory matches, to tell an event's id from an
    unknown one (see the module's text); ``scan_unindexed=False`` skips even that (the error then says no
    memory has the id), for callers that hold the writer lock."""
    prefix = parse_id_prefix(id_prefix)
    if session_id is not None:
        check_session_id(session_id)
    rows = _memory_rows(conn, prefix, session_id)
    events = _indexed_events(conn, prefix, session_id)
    if not rows and scan_unindexed:
        events = _events_with_prefix(conn, prefix, session_id)
    return _resolve_memory(rows, events, prefix, session_id, project)


_EVENT_COLUMNS = (
    "e.session_id, e.seq, e.role, e.type, e.content, e.tool_name, e.tool_args, e.tool_call_id, e.created_at"
)
_FULL_EVENT_ID = "obsmem_event_id(e.session_id, e.seq)"


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


def _events_among(conn: apsw.Connection, rows_sql: str, prefix: str, session_id: str | None) -> list[tuple]:
    """Up to two events among ``rows_sql`` (a statement of event row ids, one ``?`` for the 12-character
    key) whose id starts with ``prefix``: ``(event_id, *event columns)``. Ids are not stored: the SQL
    function derives them from the address."""
    sql = (
        f"SELECT {_FULL_EVENT_ID}, {_EVENT_COLUMNS} FROM events AS e WHERE e.id IN ({rows_sql})"
        f" AND {_FULL_EVENT_ID} >= ? AND {_FULL_EVENT_ID} < ?"
    )
    params: list[object] = [*[prefix[:12]] * rows_sql.count("?"), prefix, prefix + "g"]
    if session_id is not None:
        sql += " AND e.session_id = ?"
        params.append(session_id)
    return conn.execute(sql + " ORDER BY 1 LIMIT 2", params).fetchall()


# event_keys holds each id's first 12 characters up to the trigram watermark; a prefix is at least that long.
_INDEXED_ROWS = "SELECT event_row FROM event_keys WHERE key = ?"
# The events above the watermark, each of whose ids must be computed to be compared.
_UNINDEXED_ROWS = (
    "SELECT id FROM events WHERE id > (SELECT indexed_through FROM event_trigram_progress)"
    " AND substr(obsmem_event_id(session_id, seq), 1, 12) = ?"
)


# PostgreSQL indexes every id's first 12 characters by expression (p0001_core): nothing is unindexed there.
_POSTGRES_ROWS = "SELECT id FROM events WHERE left(obsmem_event_id(session_id, seq), 12) = ?"


def _indexed_events(conn: apsw.Connection, prefix: str, session_id: str | None) -> list[tuple]:
    """Up to two events up to the watermark whose id starts with ``prefix`` (an index lookup)."""
    rows_sql = _POSTGRES_ROWS if sql_dialect(conn) == "postgres" else _INDEXED_ROWS
    return _events_among(conn, rows_sql, prefix, session_id)


def _events_with_prefix(conn: apsw.Connection, prefix: str, session_id: str | None) -> list[tuple]:
    """Up to two events whose id starts with ``prefix``, indexed or not: ``(event_id, *event columns)``.
    Costs a hash of every event above the watermark."""
    if sql_dialect(conn) == "postgres":
        return _events_among(conn, _POSTGRES_ROWS, prefix, session_id)
    return _events_among(conn, f"{_INDEXED_ROWS} UNION ALL {_UNINDEXED_ROWS}", prefix, session_id)


def recall_any(
    conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str, neighbours: int
) -> RecallParts | RecalledEvent:
    """A memory with its provenance, or a conversation event with ``neighbours`` events on each side and
    the observations citing it; raises not_found / ambiguous_id / invalid_id."""
    prefix = parse_id_prefix(id_prefix)
    if session_id is not None:
        check_session_id(session_id)
    rows = _memory_rows(conn, prefix, session_id)
    # A memory matched: only the indexed events can make the prefix ambiguous (see the module's text).
    events = _indexed_events(conn, prefix, session_id) if rows else _events_with_prefix(conn, prefix, session_id)
    if not rows and len(events) == 1:
        return recall_event(conn, events[0][0], _source_event(events[0][1:]), neighbours)
    return provenance(conn, _resolve_memory(rows, events, prefix, session_id, project))


def recall_event(conn: apsw.Connection, event_id: str, event: SourceEvent, neighbours: int) -> RecalledEvent:
    """The event with up to ``neighbours`` events on each side in its session and the citing observations.

    Neighbours are the nearest events by seq, whatever the gaps between seqs (an import may skip some)."""
    before = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events AS e WHERE e.session_id = ? AND e.seq < ? ORDER BY e.seq DESC LIMIT ?",
        (event.session_id, event.seq, neighbours),
    ).fetchall()
    after = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events AS e WHERE e.session_id = ? AND e.seq > ? ORDER BY e.seq LIMIT ?",
        (event.session_id, event.seq, neighbours),
    ).fetchall()
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
        before=tuple(_source_event(row) for row in reversed(before)),
        after=tuple(_source_event(row) for row in after),
        cited_by=cited_by,
    )


def recall(conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str) -> RecallParts:
    """The memory with the id (prefix) and its provenance, typed; raises as :func:`find_memory_row`."""
    return provenance(conn, find_memory_row(conn, id_prefix, session_id=session_id, project=project))


def provenance(conn: apsw.Connection, found: MemoryRow) -> RecallParts:
    """A memory found by its id with what it came from: cited events, or supporting observations."""
    row_id, hit, created_at = found
    if hit.kind == "observation":
        # Session ids in byte order on both backends (a PostgreSQL database's default collation may be a
        # language's).
        byte_order = ' COLLATE "C"' if sql_dialect(conn) == "postgres" else ""
        rows = conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM observation_sources AS s"
            " JOIN events AS e ON e.session_id = s.session_id AND e.seq = s.seq"
            f" WHERE s.memory_row = ? ORDER BY e.session_id{byte_order}, e.seq",
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
