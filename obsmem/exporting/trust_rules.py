"""A restore carries trust only as the trust ledger records it: notes, judgments and ledger entries are
checked against what the trust floor's writes make (obsmem/trust/: ledger.py, notes.py, groom.py).

Every one of those writes appends its ``trust_ledger`` entry in the transaction that makes the change, so
an honest export's ledger, replayed in id order, leaves each note in the status the file gives it:

- a note starts a candidate (its save is not an entry); ``promoted`` makes a candidate trusted,
  ``superseded`` a candidate or trusted note superseded, ``forgotten`` any note not forgotten forgotten,
  ``resaved`` a forgotten note a candidate again;
- a ``judged`` entry is written with its judgment (same note, ``p``, decision and error), a ``resolved``
  entry with its resolution (same outcome), after the ``judged`` one; a ``promoted`` entry cites a judgment
  of its note that resolved true before it, and a ``superseded`` entry the judgment whose promotion of an
  update of the note (the update's chain leads to it) superseded it, which ``superseded_by`` then names;
- a project's ledger holds entries of the user tier too: copies of the ``judged`` and ``resolved`` entries
  of user-tier notes judged through the project, whose notes and judgments live in the user's database.

obsmem before the ``resaved`` entry saved a forgotten note again without an entry, and those ledgers are
honest history: a forgotten note acting as a candidate is accepted when no ``resaved`` entry precedes its
``forgotten`` entry (no obsmem that writes ``resaved`` can have revived it silently).

The judging job records a judgment of a project note, its ``judged`` entry and a ``trust_judgment`` event in
the pipeline event log in one transaction (the event log is append-only and exported before the notes), so
each judgment of the file has its event, agreeing with it (note, tier, ``p``, decision, error).

What a judgment says is data: its query, which judge made it, its ``p`` and the outcome a person gave are
what the file holds, and nothing records them elsewhere. A judgment's fields are checked for agreeing with
each other, with its event and with its ledger entries, as every write makes them; an invented judgment
with an event and entries that agree is not told from a real one. The file is not signed: a restore checks
that a history is one obsmem writes, not that obsmem wrote it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from obsmem.bounds import MAX_SEQ, is_strict_int
from obsmem.errors import ExportInvalid
from obsmem.exporting.rows import RestoreState
from obsmem.notes import JUDGMENT_EVENT, JUDGMENT_ID, judgment_event_data, trusted_without_promotion

# What state.pending holds from the rows until the ledger's last entry is in.
_NOTES = "trust_rules.notes"  # note_id -> _Note
_JUDGMENTS = "trust_rules.judgments"  # judgment_id -> _Judgment
_ENTRIES = "trust_rules.entries"  # [_Entry]
_JUDGMENT_EVENTS = "trust_rules.judgment_events"  # judgment_id -> the data its project-tier event logged

# The kinds of entry the ledger holds (its CHECK constraint); a message quotes an entry's kind only once it
# is one of these: any other is whatever text the file holds there.
_KINDS = frozenset({"judged", "resolved", "promoted", "superseded", "forgotten", "resaved"})
_CITES_JUDGMENT = frozenset({"judged", "resolved", "promoted", "superseded"})
_MIRRORED = frozenset({"judged", "resolved"})  # the only entries a project's ledger copies from a user tier
# Links groom follows from an updated note to its chain's newest note (MAX_CHAIN in obsmem/trust/notes.py):
# the note a promotion supersedes is never further.
_CHAIN_LINKS = 10_000
_WALKS = 1_000_000
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


def pipeline_event_row(state: RestoreState, row: dict[str, Any]) -> None:
    """Keep what each ``trust_judgment`` event of the project tier logged, for its judgment (later in the
    file). Other events, and events whose data is not an object, are not a judgment's: they are kept as
    they are."""
    if row.get("type") != JUDGMENT_EVENT or not isinstance(row.get("data"), str):
        return
    try:
        data = json.loads(row["data"])
    except (ValueError, RecursionError):
        return
    if isinstance(data, dict) and data.get("tier") == "project" and isinstance(data.get("judgment_id"), str):
        state.pending.setdefault(_JUDGMENT_EVENTS, {})[data["judgment_id"]] = data


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
    _require_judgment_event(state, row)
    state.pending.setdefault(_JUDGMENTS, {})[judgment_id] = _Judgment(
        line, row.get("note_id"), p, decision, row.get("state"), row.get("outcome"), error
    )


def _require_judgment_event(state: RestoreState, row: dict[str, Any]) -> None:
    """The judging job logs each judgment of a project note in the event log, in the judgment's own
    transaction, and the log is never pruned: a judgment without its event, or with one that logged another
    note, ``p``, decision or error, was not recorded by a judge."""
    logged = state.pending.get(_JUDGMENT_EVENTS, {}).get(row.get("judgment_id"))
    if logged is None:
        raise ExportInvalid(
            f"line {state.line}: a judgment without the '{JUDGMENT_EVENT}' event its write logs in the pipeline "
            "event log"
        )
    note_id, decision = row.get("note_id"), row.get("decision")
    made = (
        judgment_event_data(row["judgment_id"], note_id, "project", row.get("p"), decision, row.get("error"))
        if isinstance(note_id, str) and isinstance(decision, str)
        else None
    )
    if logged != made:
        raise ExportInvalid(
            f"line {state.line}: a judgment disagrees with the '{JUDGMENT_EVENT}' event its write logged "
            "(its note, p, decision or error)"
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
    if entry not in _KINDS:
        raise ExportInvalid(f"line {line}: a trust ledger entry of a kind the ledger does not hold")
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
    """Once the ledger is in: every trusted note was promoted in its current life, then the whole ledger
    replays into the notes' statuses and agrees with the judgments (:class:`_Replay`)."""
    notes: dict[object, _Note] = state.pending.pop(_NOTES, {})
    judgments: dict[object, _Judgment] = state.pending.pop(_JUDGMENTS, {})
    entries: list[_Entry] = state.pending.pop(_ENTRIES, [])
    state.pending.pop(_JUDGMENT_EVENTS, None)
    _check_trusted_notes(state, notes)
    _check_note_links(notes)
    _Replay(notes, judgments, entries).run()


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


def _check_note_links(notes: dict[object, _Note]) -> None:
    """An update names a note stored before it (notes are never deleted), and a note is superseded by an
    update."""
    for note in notes.values():
        if note.supersedes is not None and note.supersedes not in notes:
            raise ExportInvalid(f"line {note.line}: a note's supersedes names no note of the file")
        if note.superseded_by is not None:
            replacing = notes.get(note.superseded_by)
            if replacing is None or replacing.supersedes is None:
                raise ExportInvalid(f"line {note.line}: a note's superseded_by names no update of the file")


class _Replay:
    """The ledger replayed in id order (the ids are its order), each entry checked against the state the
    entries before it left."""

    def __init__(self, notes: dict[object, _Note], judgments: dict[object, _Judgment], entries: list[_Entry]):
        self.notes = notes
        self.judgments = judgments
        self.entries = sorted(entries, key=lambda entry: entry.id)
        self.status: dict[object, str] = dict.fromkeys(notes, "candidate")
        self.forgotten_at: dict[object, int] = {}  # note -> id of its latest 'forgotten' entry
        self.judged: set[object] = set()
        self.resolved_at: dict[object, int] = {}  # judgment -> id of its 'resolved' entry
        self.promoted: dict[object, object] = {}  # judgment -> the note its 'promoted' entry promoted
        self.superseded_by: dict[object, object] = {}  # note -> the update whose promotion last superseded it
        self.mirrored: set[tuple[object, object]] = set()
        self.walked = 0  # steps along superseded_by links (see _in_chain)
        resaved = [entry.id for entry in self.entries if entry.entry == "resaved"]
        self.first_resaved = min(resaved) if resaved else MAX_SEQ + 1

    def run(self) -> None:
        for entry in self.entries:
            if entry.tier == "user":
                self._mirrored(entry)
            else:
                self._entry(entry)
        for judgment_id, judgment in self.judgments.items():
            if judgment_id not in self.judged:
                raise ExportInvalid(f"line {judgment.line}: a judgment without its 'judged' entry in the trust ledger")
            if judgment.state == "resolved" and judgment_id not in self.resolved_at:
                raise ExportInvalid(
                    f"line {judgment.line}: a resolved judgment without its 'resolved' entry in the trust ledger"
                )
        for note_id, note in self.notes.items():
            replayed = self.status[note_id]
            if note.status != replayed and not (note.status == "candidate" and self._silently_saved(note_id)):
                raise ExportInvalid(
                    f"line {note.line}: a note's status is not the one its trust ledger entries leave it in"
                )
            if note.status == "superseded" and note.superseded_by != self.superseded_by.get(note_id):
                raise ExportInvalid(
                    f"line {note.line}: a superseded note's superseded_by is not the update whose promotion "
                    "superseded it"
                )

    def _silently_saved(self, note_id: object) -> bool:
        """Whether a forgotten note may have been saved again by an obsmem that wrote no ``resaved`` entry:
        only when no ``resaved`` entry precedes its ``forgotten`` one."""
        return self.status[note_id] == "forgotten" and self.forgotten_at[note_id] < self.first_resaved

    def _live(self, note_id: object) -> str:
        """The note's status for an entry that needs it alive: a silently saved note is a candidate."""
        return "candidate" if self._silently_saved(note_id) else self.status[note_id]

    def _mirrored(self, entry: _Entry) -> None:
        """A copy of a user-tier note's judgment or resolution: its note and judgment live elsewhere, and it is
        copied once (the copy of the judgment may be missing: a job that died between the two databases
        leaves only the resolution's copy)."""
        if entry.note_id in self.notes or entry.judgment_id in self.judgments:
            raise ExportInvalid(
                f"line {entry.line}: a user-tier entry names a note or judgment of the project (a project's notes "
                "and judgments are of the project tier)"
            )
        key = (entry.judgment_id, entry.entry)
        if key in self.mirrored:
            raise ExportInvalid(f"line {entry.line}: a user-tier '{entry.entry}' entry copied twice")
        self.mirrored.add(key)

    def _entry(self, entry: _Entry) -> None:
        line, kind, note_id = entry.line, entry.entry, entry.note_id
        if note_id not in self.notes:
            raise ExportInvalid(f"line {line}: a trust ledger entry names a note the file does not hold")
        judgment = self.judgments.get(entry.judgment_id)
        if kind in _CITES_JUDGMENT:
            if judgment is None:
                raise ExportInvalid(f"line {line}: a '{kind}' entry cites a judgment the file does not hold")
            if kind != "superseded" and judgment.note_id != note_id:
                raise ExportInvalid(f"line {line}: a '{kind}' entry cites a judgment of another note")
        if kind == "judged":
            assert judgment is not None
            if entry.judgment_id in self.judged:
                raise ExportInvalid(f"line {line}: a judgment's 'judged' entry appears twice")
            if (entry.p, entry.decision, entry.error) != (judgment.p, judgment.decision, judgment.error):
                raise ExportInvalid(f"line {line}: a 'judged' entry disagrees with the judgment it cites")
            self.judged.add(entry.judgment_id)
        elif kind == "resolved":
            assert judgment is not None
            if entry.judgment_id not in self.judged or entry.judgment_id in self.resolved_at:
                raise ExportInvalid(
                    f"line {line}: a 'resolved' entry comes before its judgment's 'judged' entry, or twice"
                )
            if judgment.state != "resolved" or (entry.p, entry.outcome) != (judgment.p, judgment.outcome):
                raise ExportInvalid(f"line {line}: a 'resolved' entry disagrees with the judgment it cites")
            self.resolved_at[entry.judgment_id] = entry.id
        elif kind == "promoted":
            assert judgment is not None
            if entry.judgment_id not in self.resolved_at or judgment.outcome != 1:
                raise ExportInvalid(
                    f"line {line}: a 'promoted' entry cites no judgment of its note that resolved true before it"
                )
            if self._live(note_id) != "candidate":
                raise ExportInvalid(f"line {line}: a 'promoted' entry promotes a note that was not a candidate")
            self.status[note_id] = "trusted"
            self.promoted[entry.judgment_id] = note_id
        elif kind == "superseded":
            self._superseded(entry)
        elif kind == "forgotten":
            if self.status[note_id] == "forgotten" and not self._silently_saved(note_id):
                raise ExportInvalid(f"line {line}: a 'forgotten' entry forgets a note already forgotten")
            self.status[note_id] = "forgotten"
            self.forgotten_at[note_id] = entry.id
        elif kind == "resaved":
            if self.status[note_id] != "forgotten":
                raise ExportInvalid(f"line {line}: a 'resaved' entry saves again a note that was not forgotten")
            self.status[note_id] = "candidate"

    def _superseded(self, entry: _Entry) -> None:
        """Groom supersedes, in the promotion's transaction and citing its judgment, the note an update
        replaces: the one it names (obsmem before chains) or the newest of that note's chain."""
        update = self.promoted.pop(entry.judgment_id, None)  # a promotion supersedes one note at most
        replaced = self.notes[update].supersedes if update is not None else None
        if update is None or update == entry.note_id or not self._in_chain(replaced, entry.note_id):
            raise ExportInvalid(
                f"line {entry.line}: a 'superseded' entry follows no promotion, by the judgment it cites, of an "
                "update of its note"
            )
        if self._live(entry.note_id) not in ("candidate", "trusted"):
            raise ExportInvalid(
                f"line {entry.line}: a 'superseded' entry supersedes a note that was neither a candidate nor trusted"
            )
        self.status[entry.note_id] = "superseded"
        self.superseded_by[entry.note_id] = update

    def _in_chain(self, start: object, note_id: object) -> bool:
        """Whether ``note_id`` is ``start`` or follows it along ``superseded_by`` links, within the links groom
        follows to find a chain's newest note. The walks of one restore are bounded together: past
        :data:`_WALKS` steps (far beyond any real history; a crafted file could otherwise make the restore
        walk for hours) the rest of the file's supersessions are taken without the walk."""
        current = start
        for _ in range(_CHAIN_LINKS + 1):
            if current == note_id or self.walked > _WALKS:
                return True
            if current not in self.notes:
                return False
            self.walked += 1
            current = self.notes[current].superseded_by
        return False
