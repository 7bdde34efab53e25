"""Recall of a note: the note with its standing and how it got there.

A note cites no conversation events (it is what an agent or a person wrote, not what was observed), so its
recall shows what a note has instead of provenance: its tier, its status, whether it is trusted, the note
it would replace or that replaced it, the judgments made about it and its ledger history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.trust.ledger import Judgment, ledger_entries, note_judgments
from obsmem.trust.notes import Note

NOTE_PROVENANCE = (
    "A note cites no conversation events: an agent or a person wrote it. It is trusted only after a judgment "
    "about it resolved true and a groom pass promoted it; the judgments and the history say how it got here."
)


@dataclass(frozen=True)
class RecalledNote:
    """``recall`` of a note id."""

    note: Note
    judgments: tuple[Judgment, ...]
    history: tuple[dict[str, Any], ...]

    @classmethod
    def read(cls, conn: apsw.Connection, note: Note) -> RecalledNote:
        """The note's judgments and ledger history, from its own tier's database."""
        return cls(note, tuple(note_judgments(conn, note.note_id)), tuple(ledger_entries(conn, note.note_id)))

    def to_dict(self) -> dict[str, Any]:
        history = [
            {
                "entry": entry["entry"],
                "at": entry["created_at"],
                "judgment_id": entry["judgment_id"],
                "p": entry["p"],
                "decision": entry["decision"],
                "outcome": None if entry["outcome"] is None else bool(entry["outcome"]),
                "error": entry["error"],
            }
            for entry in self.history
        ]
        return {
            "memory": {**self.note.to_dict(), "kind": "note"},
            "judgments": [judgment.to_dict() for judgment in self.judgments],
            "history": history,
            "provenance": NOTE_PROVENANCE,
        }
