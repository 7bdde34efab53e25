"""The groom pass: promote candidates whose judgments resolved true, at most a fixed number per pass.

Each promotion is one write transaction: the note becomes ``trusted``, the note it supersedes (an update's
original, or, when another update of that original was promoted first, the newest note of that chain)
becomes ``superseded``, and the ledger gets a ``promoted`` (and ``superseded``) entry. A process
killed anywhere in a pass leaves every promotion either whole or not begun, so the ledger and the notes
always agree; the next pass picks up what is left. A tier that never had a note is a cold start, not an
error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apsw

from obsmem.dates import now_iso
from obsmem.faults import crash_point
from obsmem.storage import ProjectDatabase
from obsmem.trust.ledger import Judgment, append_entry, judgment_counts, list_judgments
from obsmem.trust.notes import Note, chain_head, promotable, require_note


@dataclass(frozen=True)
class Promotion:
    note: Note
    judgment_id: str
    superseded: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.note.id,
            "memory_id": self.note.note_id,
            "tier": self.note.tier,
            "judgment_id": self.judgment_id,
            "superseded": self.superseded[:12] if self.superseded else None,
        }


# Escalations a groom report lists (the newest); ``escalated_count`` says how many wait in all, and
# ``GET .../judgments?state=escalated`` lists more.
ESCALATED_SHOWN = 50


@dataclass
class GroomReport:
    promoted: list[Promotion] = field(default_factory=list)
    escalated: list[Judgment] = field(default_factory=list)  # the newest ESCALATED_SHOWN
    escalated_count: int = 0  # every judgment waiting for a person

    def add(self, other: GroomReport) -> None:
        """Another tier's pass: promotions appended; escalations merged, newest first, still bounded."""
        self.promoted += other.promoted
        merged = sorted([*self.escalated, *other.escalated], key=lambda item: item.created_at, reverse=True)
        self.escalated = merged[:ESCALATED_SHOWN]
        self.escalated_count += other.escalated_count

    def to_dict(self) -> dict[str, Any]:
        return {
            "promoted": [item.to_dict() for item in self.promoted],
            "escalated": [item.to_dict() for item in self.escalated],
            "escalated_count": self.escalated_count,
        }


def promote(conn: apsw.Connection, note_id: str, judgment_id: str) -> Promotion | None:
    """Promote one candidate inside the caller's write transaction (None if it is no longer a candidate)."""
    note = require_note(conn, note_id)
    if note.status != "candidate":
        return None
    now = now_iso()
    conn.execute("UPDATE notes SET status = 'trusted', updated_at = ? WHERE note_id = ?", (now, note_id))
    crash_point("groom:note-promoted")
    append_entry(conn, "promoted", note_id, judgment_id=judgment_id)
    superseded = None
    if note.supersedes is not None:
        # The original may have been replaced already by another of its updates, promoted first: this one
        # then replaces that one (the head of the chain), so only one note of a chain is ever trusted.
        head = chain_head(conn, note.supersedes).note_id
        replaced = conn.execute(
            "UPDATE notes SET status = 'superseded', superseded_by = ?, updated_at = ?"
            " WHERE note_id = ? AND note_id != ? AND status IN ('candidate', 'trusted') RETURNING note_id",
            (note_id, now, head, note_id),
        ).fetchone()
        if replaced is not None:
            superseded = head
            append_entry(conn, "superseded", head, judgment_id=judgment_id)
    return Promotion(require_note(conn, note_id), judgment_id, superseded)


def groom_tier(db: ProjectDatabase, budget: int, *, escalations: bool = True) -> GroomReport:
    """One pass over one tier's database: at most ``budget`` promotions, then (with ``escalations``) the
    newest :data:`ESCALATED_SHOWN` judgments waiting for people and how many wait."""
    report = GroomReport()
    with db.read() as conn:
        work = promotable(conn, budget) if budget > 0 else []
    for note_id, judgment_id in work:
        with db.write() as conn:
            done = promote(conn, note_id, judgment_id)
        crash_point("groom:committed")
        if done is not None:
            report.promoted.append(done)
    if escalations:
        with db.read() as conn:
            report.escalated = list_judgments(conn, "escalated", ESCALATED_SHOWN)
            report.escalated_count = judgment_counts(conn)["escalated"]
    return report
