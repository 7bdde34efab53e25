"""Judgments and the append-only trust ledger of one tier's database.

A judgment rates one candidate note against one query. Its row keeps the judged features (query, ``p``,
decision, the note, and later the outcome a person gave): the calibration corpus, keyed by
``judgment_id``. Every step also appends a ``trust_ledger`` row in the same transaction (``judged``,
``resolved``, ``promoted``, ``superseded``, ``forgotten``, ``resaved``); triggers refuse any change to the
ledger, so it is the history that the notes' current state must agree with.

A note lives again when it is saved after being forgotten (``resaved``): only judgments made after its
latest ``forgotten`` entry speak for it (:func:`current_life`), so a forgotten note earns trust anew.

States: ``open`` (the judge gave ``p``; waiting for how it turns out), ``escalated`` (a person must decide:
cold start, a failed judge call, or the ``human`` provider) and ``resolved`` (an outcome was given).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import now_iso
from obsmem.errors import NotFound, ObsmemError, ValidationFailed
from obsmem.ids import display_id
from obsmem.notes import JUDGMENT_ID
from obsmem.storage import byte_order

STATES: tuple[str, ...] = ("open", "escalated", "resolved")
_COLUMNS = "judgment_id, note_id, query, provider, p, decision, state, outcome, error, created_at, resolved_at"


class JudgmentResolved(ObsmemError):
    """The judgment was already resolved with the other outcome; resolutions are never rewritten."""

    code = "judgment_resolved"
    status = 409


@dataclass(frozen=True)
class Judgment:
    judgment_id: str
    note_id: str
    query: str
    provider: str
    p: float | None
    decision: str
    state: str
    outcome: bool | None
    error: str | None
    created_at: str
    resolved_at: str | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Judgment:
        values = list(row)
        values[7] = None if values[7] is None else bool(values[7])
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        return {
            "judgment_id": self.judgment_id,
            "note_id": display_id(self.note_id),
            "p": self.p,
            "decision": self.decision,
            "state": self.state,
            "outcome": self.outcome,
            "error": self.error,
            "provider": self.provider,
            "created_at": self.created_at,
            "resolved_at": self.resolved_at,
        }


def parse_state(value: object) -> str | None:
    if value is None:
        return None
    if value not in STATES:
        raise ValidationFailed(f"state must be one of {', '.join(STATES)}", field="state")
    return str(value)


def parse_judgment_id(value: object) -> str:
    if not isinstance(value, str) or not JUDGMENT_ID.fullmatch(value):
        raise ValidationFailed("judgment_id must be 'j' and 16 lowercase hex characters", field="judgment_id")
    return value


def current_life(judgments: str = "j") -> str:
    """SQL that is true when the judgment row aliased ``judgments`` was made in its note's current life: its
    ``judged`` entry comes after the note's latest ``forgotten`` entry (ledger ids only grow, so they order
    the two even within one clock tick)."""
    return (
        f"(SELECT min(l.id) FROM trust_ledger AS l WHERE l.judgment_id = {judgments}.judgment_id"
        " AND l.entry = 'judged') > coalesce((SELECT max(f.id) FROM trust_ledger AS f"
        f" WHERE f.note_id = {judgments}.note_id AND f.entry = 'forgotten'), 0)"
    )


def append_entry(
    conn: apsw.Connection,
    entry: str,
    note_id: str,
    *,
    judgment_id: str | None = None,
    p: float | None = None,
    decision: str | None = None,
    outcome: bool | None = None,
    error: str | None = None,
    tier: str | None = None,
) -> None:
    """Append one ledger row; ``tier`` defaults to the stored note's tier (given for a mirrored entry, whose
    note lives in another database)."""
    conn.execute(
        "INSERT INTO trust_ledger(entry, tier, note_id, judgment_id, p, decision, outcome, error, created_at)"
        " VALUES (?, coalesce(?, (SELECT tier FROM notes WHERE note_id = ?), 'project'), ?, ?, ?, ?, ?, ?, ?)",
        (
            entry,
            tier,
            note_id,
            note_id,
            judgment_id,
            p,
            decision,
            None if outcome is None else int(outcome),
            error,
            now_iso(),
        ),
    )


def mirror_entry(conn: apsw.Connection, entry: str, judgment: Judgment) -> bool:
    """Copy a user-tier judgment's ``judged`` or ``resolved`` entry into a project database's ledger (inside
    the caller's write transaction), so the project's ledger holds every judgment made for it; the user
    tier's own database keeps the judgment row, its calibration corpus. Idempotent per entry: True when
    the entry was written now, False when the ledger held it already."""
    exists = conn.execute(
        "SELECT 1 FROM trust_ledger WHERE judgment_id = ? AND entry = ? AND tier = 'user' LIMIT 1",
        (judgment.judgment_id, entry),
    ).fetchone()
    if exists is not None:
        return False
    judged = entry == "judged"
    append_entry(
        conn,
        entry,
        judgment.note_id,
        judgment_id=judgment.judgment_id,
        p=judgment.p,
        decision=judgment.decision if judged else None,
        outcome=None if judged else judgment.outcome,
        error=judgment.error if judged else None,
        tier="user",
    )
    return True


def resolved_count(conn: apsw.Connection) -> int:
    """Resolved judgments in this tier: the sample the decision rule needs before ``p`` may decide."""
    return int(conn.execute("SELECT count(*) FROM judgments WHERE state = 'resolved'").fetchone()[0])


def has_pending_judgment(conn: apsw.Connection, note_id: str) -> bool:
    """Whether the note already waits on a judgment of its current life (one open question per note at a
    time; a question left open before it was forgotten no longer speaks for it)."""
    row = conn.execute(
        f"SELECT 1 FROM judgments AS j WHERE j.note_id = ? AND j.state != 'resolved' AND {current_life()} LIMIT 1",
        (note_id,),
    ).fetchone()
    return row is not None


def record_judgment(
    conn: apsw.Connection,
    judgment_id: str,
    note_id: str,
    query: str,
    provider: str,
    p: float | None,
    decision: str,
    error: str | None,
) -> bool:
    """Store a judgment and its ``judged`` ledger entry inside the caller's write transaction.

    Returns False when the judgment exists already (a retried job): nothing is written twice."""
    state = "escalated" if decision == "escalate" else "open"
    row = conn.execute(
        "INSERT INTO judgments(judgment_id, note_id, query, provider, p, decision, state, error, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(judgment_id) DO NOTHING RETURNING judgment_id",
        (judgment_id, note_id, query, provider, p, decision, state, error, now_iso()),
    ).fetchone()
    if row is None:
        return False
    append_entry(conn, "judged", note_id, judgment_id=judgment_id, p=p, decision=decision, error=error)
    return True


def find_judgment(conn: apsw.Connection, judgment_id: str) -> Judgment | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM judgments WHERE judgment_id = ?", (judgment_id,)).fetchone()
    return Judgment.from_row(row) if row else None


def resolve_judgment(conn: apsw.Connection, judgment_id: str, outcome: bool) -> Judgment:
    """Give a judgment its outcome inside the caller's write transaction; the same outcome again is a no-op."""
    found = find_judgment(conn, judgment_id)
    if found is None:
        raise NotFound(f"judgment {judgment_id} does not exist", field="judgment_id")
    if found.state == "resolved":
        if found.outcome != outcome:
            raise JudgmentResolved(f"judgment {judgment_id} was already resolved with the other outcome")
        return found
    conn.execute(
        "UPDATE judgments SET state = 'resolved', outcome = ?, resolved_at = ? WHERE judgment_id = ?",
        (int(outcome), now_iso(), judgment_id),
    )
    append_entry(conn, "resolved", found.note_id, judgment_id=judgment_id, p=found.p, outcome=outcome)
    resolved = find_judgment(conn, judgment_id)
    assert resolved is not None
    return resolved


def list_judgments(conn: apsw.Connection, state: str | None, limit: int = 500) -> list[Judgment]:
    where, params = ("WHERE state = ?", [state]) if state else ("", [])
    c = byte_order(conn)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM judgments {where} ORDER BY created_at{c} DESC, judgment_id{c} LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [Judgment.from_row(row) for row in rows]


def note_judgments(conn: apsw.Connection, note_id: str, limit: int = 100) -> list[Judgment]:
    """The judgments made about one note, oldest first (at most ``limit``, the newest of them)."""
    c = byte_order(conn)
    rows = conn.execute(
        f"SELECT * FROM (SELECT {_COLUMNS} FROM judgments WHERE note_id = ?"
        f" ORDER BY created_at{c} DESC, judgment_id{c} LIMIT ?) ORDER BY created_at{c}, judgment_id{c}",
        (note_id, limit),
    ).fetchall()
    return [Judgment.from_row(row) for row in rows]


def judgment_counts(conn: apsw.Connection) -> dict[str, int]:
    found = dict(conn.execute("SELECT state, count(*) FROM judgments GROUP BY state").fetchall())
    return {state: int(found.get(state, 0)) for state in STATES}


def injected_candidates(conn: apsw.Connection, limit: int) -> list[tuple[str, float]]:
    """``(note_id, p)`` of candidates whose latest judgment decided ``inject`` and that no resolution has
    refuted, highest ``p`` first (judgments of the note's current life only)."""
    rows = conn.execute(
        "SELECT j.note_id, max(j.p) FROM judgments AS j JOIN notes AS n ON n.note_id = j.note_id"
        " WHERE n.status = 'candidate' AND j.decision = 'inject' AND (j.outcome IS NULL OR j.outcome = 1)"
        f" AND {current_life()}"
        " AND NOT EXISTS (SELECT 1 FROM judgments AS r WHERE r.note_id = j.note_id AND r.outcome = 0"
        f" AND {current_life('r')})"
        f" GROUP BY j.note_id ORDER BY max(j.p) DESC, j.note_id{byte_order(conn)} LIMIT ?",
        (limit,),
    ).fetchall()
    return [(str(note_id), float(p)) for note_id, p in rows]


def calibration_rows(conn: apsw.Connection) -> list[tuple[float, bool]]:
    """``(p, outcome)`` of every resolved judgment that had a ``p``: the corpus calibration reads."""
    rows = conn.execute(
        "SELECT p, outcome FROM judgments WHERE state = 'resolved' AND p IS NOT NULL"
        f" ORDER BY judgment_id{byte_order(conn)}"
    ).fetchall()
    return [(float(p), bool(outcome)) for p, outcome in rows]


def ledger_entries(conn: apsw.Connection, note_id: str | None = None) -> list[dict[str, Any]]:
    where, params = ("WHERE note_id = ?", [note_id]) if note_id else ("", [])
    rows = conn.execute(
        "SELECT id, entry, tier, note_id, judgment_id, p, decision, outcome, error, created_at FROM trust_ledger"
        f" {where} ORDER BY id",
        params,
    ).fetchall()
    keys = ("id", "entry", "tier", "note_id", "judgment_id", "p", "decision", "outcome", "error", "created_at")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def trust_version(conn: apsw.Connection) -> str:
    """A token that changes whenever this tier's trust state changes: every judgment, resolution, promotion,
    forget and re-save appends a ledger row in the same transaction, so the newest ledger id says it all.
    One step down the ledger's primary key: it is read on every model request of a pydantic-ai session."""
    newest = conn.execute("SELECT coalesce(max(id), 0) FROM trust_ledger").fetchone()[0]
    return str(newest)
