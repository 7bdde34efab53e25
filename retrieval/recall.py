"""Recall: a memory id (or a unique prefix of 12+ hex characters) -> the memory and its provenance.

An observation's provenance is the events it cites; a reflection's is the observations that support it.
"""

from __future__ import annotations

import json

import apsw

from obsmem.errors import AmbiguousId, NotFound
from obsmem.ids import parse_id_prefix
from obsmem.retrieval.results import HIT_COLUMNS, Hit, RecalledMemory, RecallParts, SourceEvent, SourceRef
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
    if not rows:
        hint = (
            "pass session_id from a memory_search hit"
            if session_id is not None
            else "use an id from a memory_search hit or the rendered memory"
        )
        raise NotFound(f"no memory with id {prefix} in {_scope(session_id, project)}; {hint}", field="id")
    if len(rows) > 1:
        raise AmbiguousId(
            f"id prefix {prefix} matches more than one memory in {_scope(session_id, project)}; "
            "give more characters (up to the full 64)",
            field="id",
        )
    row = rows[0]
    return row[0], Hit.from_row(row[2:]), row[1]


def recall(conn: apsw.Connection, id_prefix: object, *, session_id: str | None, project: str) -> RecallParts:
    """The memory with the id (prefix) and its provenance, typed; raises as :func:`find_memory_row`."""
    row_id, hit, created_at = find_memory_row(conn, id_prefix, session_id=session_id, project=project)
    if hit.kind == "observation":
        rows = conn.execute(
            "SELECT e.session_id, e.seq, e.role, e.type, e.content, e.tool_name, e.tool_args, e.tool_call_id,"
            " e.created_at FROM observation_sources AS s"
            " JOIN events AS e ON e.session_id = s.session_id AND e.seq = s.seq"
            " WHERE s.memory_row = ? ORDER BY e.session_id, e.seq",
            (row_id,),
        ).fetchall()
        sources = tuple(
            SourceEvent(
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
            for sid, seq, role, kind, content, tool_name, tool_args, tool_call_id, stamp in rows
        )
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
