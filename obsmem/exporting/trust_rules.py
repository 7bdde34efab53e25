"""A restore carries trust only as the trust ledger records it: notes, judgments and ledger entries are
checked against what the trust floor's writes make (obsmem/trust/: ledger.py, notes.py, groom.py).

- a judgment is made by a judge job and resolved by a person (``record_judgment``, ``resolve_judgment``),
  whose writes leave its fields agreeing with each other;
- a ledger entry is appended by ``append_entry``'s callers, each filling the columns of its kind: an id the
  table hands out, a judgment cited by the entries that cite one, and in a project's ledger entries of the
  user tier only as copies of the ``judged`` and ``resolved`` entries of user-tier notes judged through the
  project;
- a note marked trusted was promoted by groom in its current life, as the ledger shows.

What a judgment says is data: its query, which judge made it, its ``p`` and the outcome a person gave are
what the file holds, and nothing records them elsewhere. A judgment's fields are checked for agreeing with
each other, as every write makes them; an invented judgment that agrees is not told from a real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from obsmem.bounds import MAX_SEQ, is_strict_int
from obsmem.errors import ExportInvalid
from obsmem.exporting.rows import RestoreState
from obsmem.notes import JUDGMENT_ID, trusted_without_promotion

# What state.pending holds from the rows until the ledger's last entry is in.
_NOTES = "trust_rules.notes"  # note_id -> _Note
_JUDGMENTS = "trust_rules.judgments"  # judgment_id -> _Judgment
_ENTRIES = "trust_rules.entries"  # [_Entry]

_CITES_JUDGMENT = frozenset({"judged", "resolved", "promoted", "superseded"})
_MIRRORED = frozenset({"judged", "resolved"})  # the only entries a project's ledger copies from a user tier
# The columns each entry's write fills besides its note and judgment (ledger.append_entry's callers).
_FILLED = {
    "judged": {"p", "decision", "error"},
    "resolved": {"p", "outcome"},
}


@dataclass(frozen=True)
class _Note:
    line: int
    status: object
    supersedes: object
    superseded_by: object


@dataclass(frozen=True)
class _Judgment:
    line: int
    note_id: object
    p: object
    decision: object
    state: object
    outcome: object
    error: object


@dataclass(frozen=True)
class _Entry:
    line: int
    id: int
    entry: object
    tier: object
    note_id: object
    judgment_id: object
    p: object
    decision: object
    outcome: object
    error: object


def note_row(state: RestoreState, row: dict[str, Any]) -> None:
    """A note of the file: a project's notes are of the project tier (the user tier's live in the user's own
    database, and a project export never holds them)."""
    if row.get("tier", "project") != "project":
        raise ExportInvalid(
            f"line {state.line}: a note of the user tier in a project's export (a user-tier note is stored in "
            "the user's own database)"
        )
    notes = state.pending.setdefault(_NOTES, {})
    notes[row.get("note_id")] = _Note(state.line, row.get("status"), row.get("supersedes"), row.get("superseded_by"))


def judgment_row(state: RestoreState, row: dict[str, Any]) -> None:
    """A judgment as :func:`obsmem.trust.ledger.record_judgment` and ``resolve_judgment`` make it: its id of
    the form judgments take; a judgment without ``p`` (a failed or human judge) escalated, and only such a
    one carrying an error; waiting in the state its decision gives it until it is resolved, and resolved
    with the time it was."""
    line = state.line
    judgment_id, p, decision, error = row.get("judgment_id"), row.get("p"), row.get("decision"), row.get("error")
    if not isinstance(judgment_id, str) or JUDGMENT_ID.fullmatch(judgment_id) is None:
        raise ExportInvalid(f"line {line}: a judgment's judgment_id is not of the form judgment ids take")
    if p is None and decision != "escalate":
        raise ExportInvalid(f"line {line}: a judgment without p decided other than escalate (no judgment does)")
    if error is not None and p is not None:
        raise ExportInvalid(f"line {line}: a judgment carries both p and an error (a failed judge gives no p)")
    resolved = row.get("state") == "resolved"
    if not resolved and decision in ("inject", "hold", "escalate"):
        waiting = "escalated" if decision == "escalate" else "open"
        if row.get("state") != waiting:
            raise ExportInvalid(f"line {line}: a judgment waits in another state than its decision gives it")
    if "resolved_at" in row and (row["resolved_at"] is not None) != resolved:
        raise ExportInvalid(f"line {line}: a judgment's resolved_at disagrees with its state")
    state.pending.setdefault(_JUDGMENTS, {})[judgment_id] = _Judgment(
        line, row.get("note_id"), p, decision, row.get("state"), row.get("outcome"), error
    )


def entry_row(state: RestoreState, row: dict[str, Any]) -> None:
    """A ledger entry as :func:`obsmem.trust.ledger.append_entry`'s callers write it: an id the table's
    AUTOINCREMENT hands out (from 1, and no further than ids go: a forged id at 2^63-1 made every later
    entry fail, reported as a full disk), a judgment cited by exactly the entries that cite one, and only
    the columns its write fills. A file from before the ``tier`` column holds the project tier's entries."""
    line, entry, tier = state.line, row.get("entry"), row.get("tier", "project")
    entry_id = row.get("id")
    if not is_strict_int(entry_id) or not 1 <= entry_id <= MAX_SEQ:
        raise ExportInvalid(f"line {line}: a trust ledger entry's id is not one the ledger hands out (1 to 2^53)")
    judgment_id = row.get("judgment_id")
    if entry in _CITES_JUDGMENT:
        if not isinstance(judgment_id, str) or JUDGMENT_ID.fullmatch(judgment_id) is None:
            raise ExportInvalid(f"line {line}: a '{entry}' entry does not cite a judgment by its id")
    elif judgment_id is not None:
        raise ExportInvalid(f"line {line}: a '{entry}' entry cites a judgment (its write cites none)")
    filled = _FILLED.get(str(entry), set())
    if any(row.get(column) is not None for column in ("p", "decision", "outcome", "error") if column not in filled):
        raise ExportInvalid(f"line {line}: a '{entry}' entry fills a column its write leaves empty")
    if entry == "resolved" and row.get("outcome") is None:
        raise ExportInvalid(f"line {line}: a 'resolved' entry without its outcome")
    if tier == "user" and entry not in _MIRRORED:
        raise ExportInvalid(
            f"line {line}: a '{entry}' entry of the user tier in a project's ledger (only judgments and "
            "resolutions of user-tier notes are copied there)"
        )
    state.pending.setdefault(_ENTRIES, []).append(
        _Entry(
            line,
            entry_id,
            entry,
            tier,
            row.get("note_id"),
            judgment_id,
            row.get("p"),
            row.get("decision"),
            row.get("outcome"),
            row.get("error"),
        )
    )


def check_trust(state: RestoreState) -> None:
    """Once the ledger is in: every trusted note was promoted in its current life."""
    notes: dict[object, _Note] = state.pending.pop(_NOTES, {})
    state.pending.pop(_JUDGMENTS, None)
    state.pending.pop(_ENTRIES, None)
    _check_trusted_notes(state, notes)


def _check_trusted_notes(state: RestoreState, notes: dict[object, _Note]) -> None:
    """Every note the file marks trusted was promoted by groom in its current life
    (:func:`obsmem.notes.trusted_without_promotion`). Every write is an untrusted candidate until a judgment
    confirms it, so a restore must not be a way to forge trust; it carries the trust the ledger accounts
    for, nothing more."""
    if not any(note.status == "trusted" for note in notes.values()):
        return
    unaccounted = trusted_without_promotion(state.conn)
    if unaccounted:
        line = min((notes[note_id].line for note_id in unaccounted if note_id in notes), default=0)
        raise ExportInvalid(
            f"line {line}: a trusted note has no promotion in the trust ledger since it was last forgotten, "
            "citing a judgment of it that resolved true (a restore grants no trust; groom does)"
        )
