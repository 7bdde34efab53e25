"""Atomic memory generations: claim a run, promote its result once by compare-and-set, replay the ledger.

A Reflector/Dropper run works like this:

1. **Claim** (a short fenced write): the run's generation id is derived from the session and the active
   observation set it starts from (:func:`~obsmem.pipeline.reflect.pool.generation_id`). A new id gets a
   ``running`` row whose ``parent`` is the active generation; a ``running`` row left by an earlier attempt
   is taken over (a new ``cycle_id``, so the earlier attempt can never promote it); a finished row means
   this set was reflected on already, so the run does nothing (duplicate jobs end here).
2. **Model work**, with no transaction open.
3. **Promote** (one fenced write): still our claim, and the active pointer still at ``parent``? Then the
   new reflections, their links, the drop records, the generation's final state and the pointer move all
   commit together. Anything else — the pointer moved (another generation won: ``superseded``), the claim
   was taken over, the lease was lost, a crash — commits nothing of the result, so the previous generation
   stays active and the work can be retried.

The schema backs this up with triggers: a finished generation is never written again, records attach only
to running generations, and the pointer moves one step at a time to a promoted child of the generation it
pointed at.

:func:`rebuild_active_memory` replays the ledger — the chain of promoted generations from the pointer back
to the first, each one's reflections and drops — and is what tests compare the projection against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import apsw

from obsmem.dates import now_iso
from obsmem.errors import ObsmemError
from obsmem.memories import ReflectionIn, add_reflection
from obsmem.pipeline.memory_items import MemoryItem
from obsmem.pipeline.reflect.pool import Pool, PoolObservation, active_pointer, one


class GenerationLost(ObsmemError):
    """Another attempt took over this run's claim; this attempt must not promote anything."""

    code = "generation_lost"
    status = 409


class LedgerError(ObsmemError):
    """The generation ledger of a session is not one valid chain (never expected; a bug if seen)."""

    code = "ledger_invalid"
    status = 500


@dataclass(frozen=True)
class Claim:
    row: int
    generation_id: str
    session_id: str
    parent: int | None
    parent_number: int
    cycle_id: str
    takeover: bool  # an earlier attempt's running claim was taken over


@dataclass(frozen=True)
class NewReflection:
    """A reflection the Reflector made, with the full ids of its supporting (active) observations."""

    memory_id: str
    content: str
    timestamp: str  # "YYYY-MM-DD HH:MM": the newest supporting observation's time
    supporting: tuple[str, ...]


class Drop(NamedTuple):
    observation: PoolObservation
    rank: int  # 0 = retired first
    citations: int  # reflections citing it when it was dropped (new ones included)


@dataclass(frozen=True)
class Promotion:
    state: str  # "promoted" | "unchanged" | "superseded"
    number: int  # the session's generation count afterwards
    reflections_added: int = 0
    observations_dropped: int = 0


def claim_generation(conn: apsw.Connection, pool: Pool, *, job_id: int, cycle_id: str) -> Claim | None:
    """Claim the run over ``pool`` inside the caller's (fenced) write; None if it was done already."""
    generation_id = pool.generation_id()
    existing = conn.execute(
        "SELECT id, state, parent FROM generations WHERE generation_id = ?", (generation_id,)
    ).fetchone()
    if existing is not None and existing[1] != "running":
        return None
    pointer_row, pointer_number = active_pointer(conn, pool.session_id)
    if pointer_row != pool.generation_row:
        # The pool was read before a promotion that has committed since; the attempt is retried.
        raise GenerationLost("the active generation moved while the run was being claimed")
    if existing is not None:
        row, _, parent = existing
        if parent != pointer_row:
            # A claim over this observation set from before the pointer last moved: it can never be
            # promoted, and the set has been reflected on since.
            conn.execute("UPDATE generations SET state = 'superseded', finished_at = ? WHERE id = ?", (now_iso(), row))
            return None
        conn.execute(
            "UPDATE generations SET job_id = ?, cycle_id = ?, claims = claims + 1 WHERE id = ?",
            (job_id, cycle_id, row),
        )
        return Claim(row, generation_id, pool.session_id, parent, pointer_number, cycle_id, True)
    (row,) = one(
        conn,
        "INSERT INTO generations(generation_id, session_id, parent, job_id, cycle_id, observations_before,"
        " observation_tokens_before, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            generation_id,
            pool.session_id,
            pointer_row,
            job_id,
            cycle_id,
            len(pool.observations),
            pool.observation_tokens,
            now_iso(),
        ),
    )
    return Claim(int(row), generation_id, pool.session_id, pointer_row, pointer_number, cycle_id, False)


def promote(
    conn: apsw.Connection,
    claim: Claim,
    reflections: Sequence[NewReflection],
    drops: Sequence[Drop],
    *,
    observation_tokens_after: int,
) -> Promotion:
    """Commit the run's result inside the caller's (fenced) write: all of it, or none of it."""
    row = conn.execute("SELECT state, cycle_id FROM generations WHERE id = ?", (claim.row,)).fetchone()
    if row is None or row[0] != "running" or row[1] != claim.cycle_id:
        raise GenerationLost(f"generation {claim.generation_id[:12]} is no longer claimed by this run")
    stamp = now_iso()
    pointer_row, pointer_number = active_pointer(conn, claim.session_id)
    if pointer_row != claim.parent:
        conn.execute("UPDATE generations SET state = 'superseded', finished_at = ? WHERE id = ?", (stamp, claim.row))
        return Promotion("superseded", pointer_number)
    if not reflections:
        conn.execute(
            "UPDATE generations SET state = 'unchanged', observation_tokens_after = observation_tokens_before,"
            " finished_at = ? WHERE id = ?",
            (stamp, claim.row),
        )
        return Promotion("unchanged", pointer_number)
    added = 0
    for reflection in reflections:
        memory_id, is_new = add_reflection(
            conn,
            ReflectionIn(claim.session_id, reflection.content, reflection.supporting, reflection.timestamp),
        )
        if not is_new:
            continue
        conn.execute(
            "INSERT INTO generation_reflections(generation_row, reflection_row)"
            " SELECT ?, id FROM memories WHERE memory_id = ?",
            (claim.row, memory_id),
        )
        added += 1
    conn.executemany(
        "INSERT INTO dropped_observations(observation_row, session_id, generation_row, rank, citations, dropped_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(drop.observation.row, claim.session_id, claim.row, drop.rank, drop.citations, stamp) for drop in drops],
    )
    number = pointer_number + 1
    conn.execute(
        "UPDATE generations SET state = 'promoted', number = ?, observation_tokens_after = ?,"
        " reflections_added = ?, observations_dropped = ?, finished_at = ? WHERE id = ?",
        (number, observation_tokens_after, added, len(drops), stamp, claim.row),
    )
    if pointer_row is None:
        conn.execute(
            "INSERT INTO active_generation(session_id, generation_row, number, promoted_at) VALUES (?, ?, ?, ?)",
            (claim.session_id, claim.row, number, stamp),
        )
    else:
        conn.execute(
            "UPDATE active_generation SET generation_row = ?, number = ?, promoted_at = ?"
            " WHERE session_id = ? AND generation_row = ?",
            (claim.row, number, stamp, claim.session_id, pointer_row),
        )
        if conn.changes() != 1:  # unreachable after the check above in the same transaction; kept as the CAS
            raise GenerationLost("the active generation moved during promotion")
    return Promotion("promoted", number, added, len(drops))


def generation_count(conn: apsw.Connection, session_id: str) -> int:
    """Promoted generations of the session (the active generation's number; it never decreases)."""
    return active_pointer(conn, session_id)[1]


def active_generation_info(conn: apsw.Connection, session_id: str) -> dict[str, object] | None:
    row = conn.execute(
        "SELECT g.number, g.generation_id, a.promoted_at, g.reflections_added, g.observations_dropped,"
        " g.observation_tokens_before, g.observation_tokens_after FROM active_generation AS a"
        " JOIN generations AS g ON g.id = a.generation_row WHERE a.session_id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        return None
    number, generation_id, promoted_at, added, dropped, before, after = row
    return {
        "number": number,
        "id": generation_id[:12],
        "generation_id": generation_id,
        "promoted_at": promoted_at,
        "reflections_added": added,
        "observations_dropped": dropped,
        "observation_tokens_before": before,
        "observation_tokens_after": after,
    }


def promoted_chain(conn: apsw.Connection, session_id: str) -> list[int]:
    """Rows of the promoted generations from the first to the active one; raises if they are not a chain."""
    pointer_row, number = active_pointer(conn, session_id)
    chain: list[int] = []
    row = pointer_row
    expected = number
    while row is not None:
        found = conn.execute(
            "SELECT session_id, state, number, parent FROM generations WHERE id = ?", (row,)
        ).fetchone()
        if found is None or found[0] != session_id or found[1] != "promoted" or found[2] != expected:
            raise LedgerError(f"generation row {row} of session '{session_id}' breaks the chain")
        chain.append(row)
        row, expected = found[3], expected - 1
    if expected != 0:
        raise LedgerError(f"the chain of session '{session_id}' does not reach generation 1")
    (promoted,) = one(
        conn, "SELECT count(*) FROM generations WHERE session_id = ? AND state = 'promoted'", (session_id,)
    )
    if promoted != len(chain):
        raise LedgerError(f"session '{session_id}' has promoted generations outside the active chain")
    chain.reverse()
    return chain


def rebuild_active_memory(conn: apsw.Connection, session_id: str) -> tuple[int, list[MemoryItem]]:
    """The active memory replayed from the ledger: ``(generation number, items)``, ordered as the projection.

    Start from every observation of the session and the reflections no generation claims (written outside
    the pipeline); then apply each promoted generation of the chain in order: add its reflections, retire
    its drops. Records of generations outside the chain are ignored, so they would show up as a
    difference from the projection, which reads the flat tables.
    """
    chain = promoted_chain(conn, session_id)
    in_chain = set(chain)
    linked: dict[int, int] = {
        reflection_row: generation_row
        for reflection_row, generation_row in conn.execute(
            "SELECT gr.reflection_row, gr.generation_row FROM generation_reflections AS gr"
            " JOIN generations AS g ON g.id = gr.generation_row WHERE g.session_id = ?",
            (session_id,),
        )
    }
    dropped = {
        observation_row
        for observation_row, generation_row in conn.execute(
            "SELECT observation_row, generation_row FROM dropped_observations WHERE session_id = ?", (session_id,)
        )
        if generation_row in in_chain
    }
    reflections: list[tuple[str, int, MemoryItem]] = []
    observations: list[tuple[str, int, MemoryItem]] = []
    for row, memory_id, kind, stamp, importance, content, date in conn.execute(
        "SELECT id, memory_id, kind, substr(date, 1, 16), importance, content, date FROM memories WHERE session_id = ?",
        (session_id,),
    ):
        item = MemoryItem(memory_id, kind, stamp, importance, content)
        if kind == "reflection":
            if row not in linked or linked[row] in in_chain:
                reflections.append((date, row, item))
        elif row not in dropped:
            observations.append((date, row, item))
    reflections.sort(key=lambda entry: entry[:2])
    observations.sort(key=lambda entry: entry[:2])
    return len(chain), [entry[2] for entry in reflections] + [entry[2] for entry in observations]


def project_generation_totals(conn: apsw.Connection) -> tuple[int, int]:
    """``(promoted generations, dropped observations)`` over every session of the project."""
    ((promoted,),) = conn.execute("SELECT count(*) FROM generations WHERE state = 'promoted'").fetchall()
    ((dropped,),) = conn.execute("SELECT count(*) FROM dropped_observations").fetchall()
    return cast(int, promoted), cast(int, dropped)
