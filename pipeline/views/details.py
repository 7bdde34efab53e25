"""What `obsmem status` and `obsmem view --details` show about a session's generations and pool.

- :func:`pool_pressure`: the active pool against its limits (reflection threshold, Dropper target), the
  generation count, drops so far and how many active observations sit in each coverage tier. SQL only,
  cheap enough for a live view.
- :func:`memory_details`: the active generation, the pool pressure, every reflection with the ids of the
  observations supporting it, every active observation with its coverage tier and source events.
"""

from __future__ import annotations

from typing import Any

import apsw

from obsmem.errors import NotFound
from obsmem.pipeline.reflect.generations import active_generation_info
from obsmem.pipeline.reflect.pool import TIERS, active_pointer, one, read_pool
from obsmem.pipeline.tokens import sql_estimate
from obsmem.settings import Settings

_ACTIVE = (
    "m.session_id = ? AND m.kind = 'observation'"
    " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)"
)


def _percent(value: int, limit: int) -> float:
    return round(100.0 * value / limit, 1) if limit else 0.0


def pool_pressure(conn: apsw.Connection, settings: Settings, session_id: str) -> dict[str, Any]:
    observations, tokens, not_covered, partly, strongly = one(
        conn,
        f"SELECT count(*), coalesce(sum({sql_estimate('content')}), 0),"
        " coalesce(sum(CASE WHEN n = 0 THEN 1 ELSE 0 END), 0), coalesce(sum(CASE WHEN n = 1 THEN 1 ELSE 0 END), 0),"
        " coalesce(sum(CASE WHEN n >= 2 THEN 1 ELSE 0 END), 0)"
        " FROM (SELECT m.content AS content,"
        " (SELECT count(*) FROM reflection_supports AS s WHERE s.observation_row = m.id) AS n"
        f" FROM memories AS m WHERE {_ACTIVE})",
        (session_id,),
    )
    reflections, reflection_tokens = one(
        conn,
        f"SELECT count(*), coalesce(sum({sql_estimate('content')}), 0) FROM memories"
        " WHERE session_id = ? AND kind = 'reflection'",
        (session_id,),
    )
    (dropped,) = one(conn, "SELECT count(*) FROM dropped_observations WHERE session_id = ?", (session_id,))
    tokens = round(tokens)
    target = settings.pools.observations_max_tokens
    threshold = settings.reflector.reflect_after_observation_tokens
    return {
        "observations": observations,
        "observation_tokens": tokens,
        "observations_max_tokens": target,
        "pool_percent": _percent(tokens, target),
        "reflection_threshold": threshold,
        "reflection_percent": _percent(tokens, threshold),
        "reflections": reflections,
        "reflection_tokens": round(reflection_tokens),
        "dropped_observations": dropped,
        "coverage": dict(zip(TIERS, (not_covered, partly, strongly), strict=True)),
    }


def memory_details(conn: apsw.Connection, settings: Settings, session_id: str) -> dict[str, Any]:
    """The active memory of a session for people: generation, pressure, support and coverage."""
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone() is None:
        raise NotFound(f"session '{session_id}' has no events", code="session_not_found", field="session_id")
    pool = read_pool(conn, session_id)
    supports: dict[int, list[str]] = {}
    for reflection_row, observation_id in conn.execute(
        "SELECT s.reflection_row, o.memory_id FROM memories AS r JOIN reflection_supports AS s"
        " ON s.reflection_row = r.id JOIN memories AS o ON o.id = s.observation_row"
        " WHERE r.session_id = ? AND r.kind = 'reflection' ORDER BY o.date, o.id",
        (session_id,),
    ):
        supports.setdefault(reflection_row, []).append(observation_id)
    made_by: dict[int, int] = {
        row: number
        for row, number in conn.execute(
            "SELECT gr.reflection_row, g.number FROM generation_reflections AS gr"
            " JOIN generations AS g ON g.id = gr.generation_row WHERE g.session_id = ?",
            (session_id,),
        )
    }
    sources: dict[int, list[int]] = {}
    for memory_row, seq in conn.execute(
        "SELECT s.memory_row, s.seq FROM memories AS m JOIN observation_sources AS s ON s.memory_row = m.id"
        f" WHERE {_ACTIVE} ORDER BY s.memory_row, s.seq",
        (session_id,),
    ):
        sources.setdefault(memory_row, []).append(seq)
    active_ids = {o.memory_id for o in pool.observations}
    return {
        "session_id": session_id,
        "generation_count": active_pointer(conn, session_id)[1],
        "generation": active_generation_info(conn, session_id),
        "pool": pool_pressure(conn, settings, session_id),
        "reflections": [
            {
                "id": r.memory_id[:12],
                "memory_id": r.memory_id,
                "timestamp": r.timestamp,
                "generation": made_by.get(r.row),
                "content": r.content,
                "supporting_observation_ids": [memory_id[:12] for memory_id in supports.get(r.row, [])],
                "retired_support": sum(1 for memory_id in supports.get(r.row, []) if memory_id not in active_ids),
            }
            for r in pool.reflections
        ],
        "observations": [
            {
                "id": o.memory_id[:12],
                "memory_id": o.memory_id,
                "timestamp": o.timestamp,
                "importance": o.importance,
                "coverage": o.tier,
                "citations": o.citations,
                "source_seqs": sources.get(o.row, []),
                "content": o.content,
            }
            for o in pool.observations
        ],
    }
