"""Records imported once, whichever file they appear in: the agent's own record ids.

Claude Code writes a resumed session as a new file (with a new session id) that replays the earlier
session's records, ids included, and some versions write one record several times in a row. Each
record's id is remembered with the session it went to (``import_records``), and a record whose id is
known is left out: counted as ``replayed`` when it was imported into another session, as
``duplicate_record`` when into the same one. Records without an id (most formats) always pass.
"""

from __future__ import annotations

from collections import Counter

from obsmem.transcripts.reading import ReadTurn
from obsmem.transcripts.watermarks import ImportTarget, known_records, remember_records


class ReplayFilter:
    """Leaves out the events of records imported before (see the module docstring), one chunk at a time."""

    def __init__(self, target: ImportTarget) -> None:
        self.target = target
        self.pending: dict[str, str] = {}  # record id -> session, remembered once the chunk is stored
        # Turns left out because the session they belong to already holds their record (a rewritten file
        # read again): a merge takes their events out of its counts (see :meth:`take_stored_here`).
        self.stored_here: list[ReadTurn] = []

    def fresh(self, turns: list[ReadTurn], skipped: Counter[str]) -> list[ReadTurn]:
        ids = {turn.record_id for turn in turns if turn.record_id is not None}
        if not ids:
            return turns
        db = self.target.existing()
        known = known_records(db, ids) if db is not None else {}  # a project not made yet knows none
        first: dict[str, tuple[int, str]] = {}  # record id -> the line (and session) that brought it first
        left_out: set[tuple[str, int]] = set()
        kept: list[ReadTurn] = []
        for turn in turns:
            record = turn.record_id
            if record is None:
                kept.append(turn)
                continue
            owner = known.get(record)
            if owner == turn.session_id:
                self.stored_here.append(turn)
            if owner is None:
                line, _ = first.setdefault(record, (turn.line, turn.session_id))
                if line == turn.line:  # the same record's other content blocks
                    kept.append(turn)
                    continue
                owner = turn.session_id
            if (record, turn.line) not in left_out:
                left_out.add((record, turn.line))
                skipped["replayed" if owner != turn.session_id else "duplicate_record"] += 1
        self.pending.update({record: session for record, (_, session) in first.items()})
        return kept

    def take_stored_here(self) -> list[ReadTurn]:
        """The turns left out since the last call whose records their own session already holds.

        A merge (see :mod:`obsmem.transcripts.importer`) counts the session's stored events by content;
        the events of these records are among them and must be taken out of the counts, or a new record
        that says the same ("yes", "continue") would be taken for one of them and never stored."""
        turns, self.stored_here = self.stored_here, []
        return turns

    def commit(self) -> None:
        """Remember the records of the chunk just stored (kept for later while the project does not exist:
        nothing was stored)."""
        db = self.target.existing()
        if db is not None:
            remember_records(db, self.pending)
            self.pending = {}
