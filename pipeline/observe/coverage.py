"""Coverage: which events the Observer has seen, the backlog it still has, and the watermark.

The session's *progress* is its ``observer_progress`` row: the backlog (``pending_tokens``,
``pending_events``), the watermark and where the next backlog scan starts. Appends add to it
(:func:`add_to_backlog`); each committed chunk takes its events off it.

An observation cycle ends in :func:`commit_chunk`, one write transaction (opened by the caller, fenced by
the job lease) that stores the accepted observations, the chunk's coverage rows, the progress counters
and the ``om_observation_end`` event. Either all of it commits or none of it does, so after any crash or
retry each event is covered exactly once: a retried chunk finds its events already covered and a second
commit of the same piece fails the coverage check instead of duplicating observations.

The watermark ``observed_through_seq`` is the highest seq with every event up to it covered. It only
moves forward (a schema trigger enforces it). An event inserted late below it (an explicit ``seq`` that
fills a gap) is still found, because the backlog scan starts at ``scan_from_seq``, which appends lower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import now_iso
from obsmem.errors import ObsmemError
from obsmem.events import StoredEvent
from obsmem.memories import ObservationIn, WriteReceipt, add_observations
from obsmem.pipeline.memory_items import active_observation_tokens
from obsmem.pipeline.observe.hygiene import EventView
from obsmem.pipeline.observe.packer import EventChunk
from obsmem.pipeline.tokens import event_tokens, token_cost
from obsmem.storage import ProjectDatabase
from obsmem.work import eventlog

PAGE = 256


class CoverageConflict(ObsmemError):
    """Part of a chunk was covered by someone else meanwhile; the chunk is abandoned and re-packed."""

    code = "coverage_conflict"
    status = 409


@dataclass(frozen=True)
class Progress:
    """A session's progress: its ``observer_progress`` row (the backlog, the watermark, the scan start)."""

    pending_tokens: int
    pending_events: int
    observed_through_seq: int
    scan_from_seq: int
    observed_tokens: int
    cycles: int
    last_observed_at: str | None

    @classmethod
    def empty(cls) -> Progress:
        return cls(0, 0, 0, 1, 0, 0, None)


def read_progress(conn: apsw.Connection, session_id: str) -> Progress:
    row = conn.execute(
        "SELECT pending_tokens, pending_events, observed_through_seq, scan_from_seq, observed_tokens, cycles,"
        " last_observed_at FROM observer_progress WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    return Progress(*row) if row is not None else Progress.empty()


def add_to_backlog(conn: apsw.Connection, session_id: str, events: Sequence[StoredEvent]) -> int:
    """Count appended events into the session's backlog, inside the append's transaction; the new backlog.

    The scan for uncovered events will start no later than the lowest seq appended, so an event filling a
    gap below the watermark is still observed.
    """
    tokens = sum(event_tokens(e.role, e.type, e.content, e.tool_name, e.tool_args) for e in events)
    lowest = min(e.seq for e in events)
    row = conn.execute(
        "INSERT INTO observer_progress(session_id, pending_tokens, pending_events, scan_from_seq)"
        " VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET"
        " pending_tokens = observer_progress.pending_tokens + excluded.pending_tokens,"
        " pending_events = observer_progress.pending_events + excluded.pending_events,"
        # CASE, not SQLite's two-argument min(), which PostgreSQL spells least(): the statement serves both.
        " scan_from_seq = CASE WHEN excluded.scan_from_seq < observer_progress.scan_from_seq"
        " THEN excluded.scan_from_seq ELSE observer_progress.scan_from_seq END"
        " RETURNING pending_tokens",
        (session_id, tokens, len(events), lowest),
    ).fetchone()
    return int(row[0])


Renderer = Callable[..., EventView]


def pending_events(
    conn: apsw.Connection, session_id: str, render: Renderer, *, enough_tokens: int
) -> list[tuple[EventView, int]]:
    """Uncovered events in seq order, each with the offset its uncovered text starts at.

    Reads pages until the rendered events hold more than ``enough_tokens`` (one chunk's worth), so a long
    backlog costs one chunk's reading, not the whole backlog's.
    """
    start = read_progress(conn, session_id).scan_from_seq
    found: list[tuple[EventView, int]] = []
    total = 0
    while True:
        rows = conn.execute(
            "SELECT e.seq, e.role, e.type, e.content, e.tool_name, e.tool_args, e.created_at,"
            " (SELECT max(c.part_end) FROM coverage AS c WHERE c.session_id = e.session_id AND c.seq = e.seq)"
            " FROM events AS e WHERE e.session_id = ? AND e.seq >= ? AND NOT EXISTS ("
            "  SELECT 1 FROM coverage AS c"
            "  WHERE c.session_id = e.session_id AND c.seq = e.seq AND c.final = 1)"
            " ORDER BY e.seq LIMIT ?",
            (session_id, start, PAGE),
        ).fetchall()
        for seq, role, type_, content, tool_name, tool_args, created_at, resume in rows:
            view = render(
                seq,
                role,
                type_,
                content,
                tool_name,
                tool_args,
                created_at,
                event_tokens(role, type_, content, tool_name, tool_args),
            )
            offset = resume or 0
            found.append((view, offset))
            total += len(view.body) - offset
            if total // 4 > enough_tokens:  # a quarter token per character at least: more than a chunk
                return found
        if len(rows) < PAGE:
            return found
        start = rows[-1][0] + 1


def _check_uncovered(conn: apsw.Connection, session_id: str, chunk: EventChunk) -> None:
    for piece in chunk.pieces:
        seq = piece.view.seq
        final, covered_to = conn.execute(
            "SELECT coalesce(max(final), 0), coalesce(max(part_end), 0) FROM coverage WHERE session_id = ? AND seq = ?",
            (session_id, seq),
        ).fetchone()
        if final or covered_to != piece.start:
            raise CoverageConflict(f"event #{seq} of session '{session_id}' was covered meanwhile")


def commit_chunk(
    conn: apsw.Connection,
    db: ProjectDatabase,
    *,
    session_id: str,
    chunk: EventChunk,
    observations: Sequence[ObservationIn],
    cycle_id: str,
    job_id: int | None,
    end_event: dict[str, Any],
    observation_tokens_before: int | None = None,
) -> WriteReceipt:
    """Store a chunk's observations and coverage atomically, inside the caller's write transaction."""
    _check_uncovered(conn, session_id, chunk)
    receipt = add_observations(db, list(observations), conn=conn)
    added = [entry.index for entry in receipt.added]
    stamp = now_iso()
    conn.executemany(
        "INSERT INTO coverage(session_id, seq, part_start, part_end, final, cycle_id, job_id, covered_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                session_id,
                p.view.seq,
                p.start,
                None if p.whole else p.end,
                int(p.final),
                cycle_id,
                job_id,
                stamp,
            )
            for p in chunk.pieces
        ],
    )
    finished = sum(1 for p in chunk.pieces if p.final)
    cleared = chunk.source_tokens
    progress = read_progress(conn, session_id)
    scan_from = _first_uncovered(conn, session_id, progress.scan_from_seq)
    after_watermark = _first_uncovered(conn, session_id, progress.observed_through_seq + 1)
    if after_watermark is None:
        last_seq = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()[0]
        watermark = max(progress.observed_through_seq, last_seq)
    else:
        watermark = max(progress.observed_through_seq, after_watermark - 1)
    conn.execute(
        "INSERT INTO observer_progress(session_id) VALUES (?) ON CONFLICT(session_id) DO NOTHING",
        (session_id,),
    )
    conn.execute(
        # CASE, not two-argument max() (SQLite's; PostgreSQL's is greatest()): the statement serves both.
        "UPDATE observer_progress SET"
        " pending_tokens = CASE WHEN pending_tokens > ? THEN pending_tokens - ? ELSE 0 END,"
        " pending_events = CASE WHEN pending_events > ? THEN pending_events - ? ELSE 0 END,"
        " observed_through_seq = ?, scan_from_seq = ?,"
        " observed_tokens = observed_tokens + ?, cycles = cycles + 1, last_observed_at = ?"
        " WHERE session_id = ?",
        (
            cleared,
            cleared,
            finished,
            finished,
            watermark,
            scan_from if scan_from is not None else watermark + 1,
            cleared,
            stamp,
            session_id,
        ),
    )
    eventlog.record(
        conn,
        "om_observation_end",
        session_id=session_id,
        cycle_id=cycle_id,
        job_id=job_id,
        data=end_event
        | {
            "observations": len(receipt.added),
            # Counted before the transaction when the caller can (it reads every observation of the session,
            # which should not lengthen a write that appends wait for).
            "observation_tokens": (
                active_observation_tokens(conn, session_id)
                if observation_tokens_before is None
                else observation_tokens_before + round(sum(token_cost(observations[i].content) for i in added))
            ),
            "observed_through_seq": watermark,
        },
    )
    return receipt


def _first_uncovered(conn: apsw.Connection, session_id: str, from_seq: int) -> int | None:
    row = conn.execute(
        "SELECT e.seq FROM events AS e WHERE e.session_id = ? AND e.seq >= ? AND NOT EXISTS ("
        " SELECT 1 FROM coverage AS c WHERE c.session_id = e.session_id AND c.seq = e.seq AND c.final = 1)"
        " ORDER BY e.seq LIMIT 1",
        (session_id, from_seq),
    ).fetchone()
    return None if row is None else int(row[0])
