"""Notes: memories an agent or a person writes directly, in the ``notes`` table of a tier's database.

A note is stored as a ``candidate``; only a groom pass makes it ``trusted`` (after a judgment about it was
resolved true). An update is a new candidate that names the note it would replace (``supersedes``); the
old note stays as it is until the update is promoted. Forgetting a note hides it from every search at
once. A note's identity is the SHA-256 of what defines it (tier, content, situation, the note it
supersedes), so saving the same note twice stores it once. Saving a forgotten note again starts a new life:
it is a candidate again, the ledger records ``resaved``, and only judgments made after it was forgotten can
promote it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import DateWindow, display_minute, now_iso, now_stored
from obsmem.errors import AmbiguousId, NotFound, ObsmemError, ValidationFailed
from obsmem.ids import DISPLAY_LENGTH, display_id
from obsmem.notes import STATUSES, note_identity
from obsmem.retrieval import query_terms, query_words
from obsmem.storage import byte_order
from obsmem.trust.ledger import append_entry, current_life

_NOTE_ID = re.compile(r"[0-9a-f]{12,64}")
_COLUMNS = "note_id, tier, content, situation, status, supersedes, superseded_by, date, created_at, updated_at"


class NoteForgotten(ObsmemError):
    """The note was forgotten: it can no longer be updated."""

    code = "note_forgotten"
    status = 409


class NoteSuperseded(ObsmemError):
    """The note was superseded: an update of it would compete with the note that replaced it."""

    code = "note_superseded"
    status = 409


MAX_CHAIN = 10_000  # updates followed from a note to the newest one; a longer chain is not a real history


@dataclass(frozen=True)
class Note:
    """One stored note."""

    note_id: str
    tier: str
    content: str
    situation: str
    status: str
    supersedes: str | None
    superseded_by: str | None
    date: str
    created_at: str
    updated_at: str

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Note:
        return cls(*row)

    @property
    def id(self) -> str:
        return display_id(self.note_id)

    @property
    def trusted(self) -> bool:
        return self.status == "trusted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "memory_id": self.note_id,
            "tier": self.tier,
            "content": self.content,
            "situation": self.situation,
            "status": self.status,
            "trusted": self.trusted,
            "supersedes": display_id(self.supersedes) if self.supersedes else None,
            "superseded_by": display_id(self.superseded_by) if self.superseded_by else None,
            "date": display_minute(self.date),
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class NoteWrite:
    """What a save or an update stored: never trusted (only a groom pass grants trust).

    ``status`` is what the write itself did, so it never contradicts ``trusted: false``: ``candidate`` when
    a candidate is stored (new, saved again after a forget, or identical to a waiting candidate) and
    ``unchanged`` when the write is identical to a note that already has another standing (trusted or
    superseded), which it leaves as it is; ``note_status`` is that stored note's own status."""

    note: Note
    duplicate: bool

    @property
    def status(self) -> str:
        return "candidate" if self.note.status == "candidate" else "unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.note.id,
            "memory_id": self.note.note_id,
            "tier": self.note.tier,
            "trusted": False,
            "status": self.status,
            "note_status": self.note.status,
            "duplicate": self.duplicate,
            "supersedes": display_id(self.note.supersedes) if self.note.supersedes else None,
        }


def parse_note_id(value: object, field: str = "id") -> str:
    if not isinstance(value, str) or not _NOTE_ID.fullmatch(value):
        raise ValidationFailed(
            f"{field} must be a note id: 12 to 64 lowercase hex characters", code="invalid_id", field=field
        )
    return value


def find_note(conn: apsw.Connection, prefix: str) -> Note | None:
    """The note whose id starts with ``prefix`` (12-64 hex), or None. An ambiguous prefix is an error."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM notes WHERE note_id >= ? AND note_id < ? ORDER BY note_id LIMIT 2",
        (prefix, prefix + "g"),
    ).fetchall()
    if len(rows) > 1:
        raise AmbiguousId("id matches more than one note; give more characters", field="id")
    return Note.from_row(rows[0]) if rows else None


def require_note(conn: apsw.Connection, prefix: str) -> Note:
    note = find_note(conn, prefix)
    if note is None:
        raise NotFound(f"note {prefix[:DISPLAY_LENGTH]} does not exist", field="id")
    return note


def store_note(
    conn: apsw.Connection, tier: str, content: str, situation: str, supersedes: str | None = None
) -> NoteWrite:
    """Store a candidate inside the caller's write transaction (a duplicate returns the stored note).

    Saving a note that was forgotten makes it a candidate again, recorded as ``resaved`` in the ledger:
    writing it is a new request to remember, which must be judged anew."""
    note_id = note_identity(tier, content, situation, supersedes)
    now = now_iso()
    inserted = conn.execute(
        "INSERT INTO notes(note_id, tier, content, situation, supersedes, date, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(note_id) DO NOTHING RETURNING id",
        (note_id, tier, content, situation, supersedes, now_stored(), now, now),
    ).fetchone()
    if inserted is None:
        revived = conn.execute(
            "UPDATE notes SET status = 'candidate', updated_at = ? WHERE note_id = ? AND status = 'forgotten'"
            " RETURNING note_id",
            (now, note_id),
        ).fetchone()
        if revived is not None:
            append_entry(conn, "resaved", note_id)
    note = require_note(conn, note_id)
    return NoteWrite(note, duplicate=inserted is None)


def chain_head(conn: apsw.Connection, note_id: str) -> Note:
    """The note that stands for ``note_id`` now: follow ``superseded_by`` from it to the newest update."""
    note = require_note(conn, note_id)
    for _ in range(MAX_CHAIN):
        if note.superseded_by is None:
            break
        note = require_note(conn, note.superseded_by)
    return note


def forget_note(conn: apsw.Connection, note: Note) -> Note:
    """Mark a note forgotten inside the caller's write transaction (idempotent)."""
    if note.status != "forgotten":
        conn.execute(
            "UPDATE notes SET status = 'forgotten', updated_at = ? WHERE note_id = ?", (now_iso(), note.note_id)
        )
    return require_note(conn, note.note_id)


def list_notes(conn: apsw.Connection, status: str | None, limit: int = 500) -> list[Note]:
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM notes {where} ORDER BY date DESC, id DESC LIMIT ?", (*params, limit)
    ).fetchall()
    return [Note.from_row(row) for row in rows]


def has_candidates(conn: apsw.Connection) -> bool:
    """Whether any note waits as a candidate (one step along the status index)."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM notes WHERE status = 'candidate')").fetchone()[0] == 1


def note_counts(conn: apsw.Connection) -> dict[str, int]:
    found = dict(conn.execute("SELECT status, count(*) FROM notes GROUP BY status").fetchall())
    return {status: int(found.get(status, 0)) for status in STATUSES}


# -- search -----------------------------------------------------------------------------------------


def _like_pattern(needle: str) -> str:
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _window_sql(window: DateWindow) -> tuple[str, list[str]]:
    clauses, params = [], []
    if window.lower is not None:
        clauses.append(" AND date >= ?")
        params.append(window.lower)
    if window.upper is not None:
        clauses.append(" AND date <= ?")
        params.append(window.upper)
    return "".join(clauses), params


# A needle whose trigram lookup finds this many notes is common: walking the newest notes finds the answer
# sooner than sorting every match by date.
PROBE_MATCHES = 200


def search_exact(
    conn: apsw.Connection, needle: str, statuses: Sequence[str], window: DateWindow, limit: int
) -> list[Note]:
    """Notes in ``statuses`` whose content contains ``needle`` (the same LIKE rule as exact search), newest
    first. Two plans give the same answer: a rare needle (3 characters or more, fewer than
    :data:`PROBE_MATCHES` notes in the trigram index, which folds case beyond ASCII so it finds a superset)
    sorts its few candidates, checked with LIKE; any other needle walks the notes newest first along the date
    index, checking LIKE, until ``limit`` match."""
    if getattr(conn, "dialect", "sqlite") == "postgres":
        return _search_exact_postgres(conn, needle, statuses, window, limit)
    marks = ", ".join("?" for _ in statuses)
    where, params = _window_sql(window)
    columns = ", ".join("n." + column.strip() for column in _COLUMNS.split(","))
    filters = f"n.status IN ({marks}) AND n.content LIKE ? ESCAPE '\\'{where.replace('date', 'n.date')}"
    phrase = '"' + needle.replace('"', '""') + '"'
    rare = len(needle) >= 3 and _trigram_matches(conn, phrase) < PROBE_MATCHES
    if rare:
        sql = (
            "WITH matched AS (SELECT rowid FROM note_trigrams WHERE note_trigrams MATCH ?)"
            f" SELECT {columns} FROM matched JOIN notes AS n ON n.id = matched.rowid WHERE {filters}"
            " ORDER BY n.date DESC, n.id DESC LIMIT ?"
        )
        bindings: tuple[Any, ...] = (phrase, *statuses)
    else:
        sql = (
            f"SELECT {columns} FROM notes AS n INDEXED BY notes_by_date WHERE {filters}"
            " ORDER BY n.date DESC, n.id DESC LIMIT ?"
        )
        bindings = tuple(statuses)
    rows = conn.execute(sql, (*bindings, _like_pattern(needle), *params, limit)).fetchall()
    return [Note.from_row(row) for row in rows]


def _search_exact_postgres(
    conn: apsw.Connection, needle: str, statuses: Sequence[str], window: DateWindow, limit: int
) -> list[Note]:
    """:func:`search_exact` on PostgreSQL: ``ILIKE`` on content declared ``COLLATE "C"`` folds ASCII letters
    only, as SQLite's ``LIKE`` does; the planner narrows with the pg_trgm index (``note_trigrams``) or walks
    the date index, and either way ``ILIKE`` is checked on every row, so the answer is the same."""
    marks = ", ".join("?" for _ in statuses)
    where, params = _window_sql(window)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM notes WHERE status IN ({marks}) AND content ILIKE ? ESCAPE '\\'{where}"
        " ORDER BY date DESC, id DESC LIMIT ?",
        (*statuses, _like_pattern(needle), *params, limit),
    ).fetchall()
    return [Note.from_row(row) for row in rows]


def _trigram_matches(conn: apsw.Connection, phrase: str) -> int:
    """How many notes the trigram index names for ``phrase``, counted up to :data:`PROBE_MATCHES`."""
    row = conn.execute(
        "SELECT count(*) FROM (SELECT rowid FROM note_trigrams WHERE note_trigrams MATCH ? LIMIT ?)",
        (phrase, PROBE_MATCHES),
    ).fetchone()
    return int(row[0])


MAX_QUERY_WORDS = 32
# The share of a query's content words a note must contain to be a keyword match at all: a note that
# shares one word of a long question (or only its stopwords) is not about it.
MIN_NOTE_COVERAGE = 0.5
KEYWORD_POOL = 200  # notes the keyword index is asked for before the coverage floor picks among them


@dataclass(frozen=True)
class KeywordMatch:
    """A note a hybrid query found, and the share of the query's content words it contains (0-1]."""

    note: Note
    coverage: float


def _folded(word: str) -> str:
    """A word as the keyword index compares it (``unicode61 remove_diacritics``): lowercase, no accents."""
    decomposed = unicodedata.normalize("NFD", word.lower())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def content_terms(text: str) -> list[str]:
    """The query's content words as the keyword index holds them (stopwords dropped, as the memories'
    keyword list drops them; a query of stopwords alone keeps them)."""
    terms = dict.fromkeys(_folded(term) for term in query_terms(text))
    return [term for term in terms if term][:MAX_QUERY_WORDS]


def keyword_query(terms: Sequence[str]) -> str | None:
    """An FTS5 OR query over ``terms``, each quoted, so no FTS5 syntax in user text is parsed."""
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def coverage(note: Note, terms: Sequence[str]) -> float:
    """The share of ``terms`` that the note's content or situation contains as words."""
    words = {_folded(word) for word in query_words(f"{note.content} {note.situation}")}
    return sum(term in words for term in terms) / len(terms) if terms else 0.0


def search_keywords(
    conn: apsw.Connection, text: str, statuses: Sequence[str], window: DateWindow, limit: int
) -> list[KeywordMatch]:
    """Notes in ``statuses`` containing at least :data:`MIN_NOTE_COVERAGE` of the content words of ``text``
    (in content or situation), the best covered first, then by BM25."""
    terms = content_terms(text)
    query = keyword_query(terms)
    if query is None:
        return []
    if getattr(conn, "dialect", "sqlite") == "postgres":
        rows = _keyword_rows_postgres(conn, terms, statuses, window, max(limit, KEYWORD_POOL))
        matches = [KeywordMatch(note, coverage(note, terms)) for note in map(Note.from_row, rows)]
        kept = [match for match in matches if match.coverage >= MIN_NOTE_COVERAGE]
        kept.sort(key=lambda match: -match.coverage)
        return kept[:limit]
    marks = ", ".join("?" for _ in statuses)
    where, params = _window_sql(window)
    # The match runs in its own subquery and the filters join afterwards (docs: filter after MATCH in a CTE).
    rows = conn.execute(
        f"WITH matched AS (SELECT rowid, bm25(note_words) AS score FROM note_words WHERE note_words MATCH ?)"
        f" SELECT {', '.join('n.' + c.strip() for c in _COLUMNS.split(','))} FROM matched JOIN notes AS n"
        f" ON n.id = matched.rowid WHERE n.status IN ({marks}){where.replace('date', 'n.date')}"
        " ORDER BY matched.score, n.id DESC LIMIT ?",
        (query, *statuses, *params, max(limit, KEYWORD_POOL)),
    ).fetchall()
    matches = [KeywordMatch(note, coverage(note, terms)) for note in map(Note.from_row, rows)]
    kept = [match for match in matches if match.coverage >= MIN_NOTE_COVERAGE]
    kept.sort(key=lambda match: -match.coverage)  # stable: BM25 order within the same coverage
    return kept[:limit]


def _keyword_rows_postgres(
    conn: apsw.Connection, terms: Sequence[str], statuses: Sequence[str], window: DateWindow, pool: int
) -> list[tuple[Any, ...]]:
    """The keyword match on PostgreSQL: the ``simple`` text-search vector of content and situation (the
    ``note_words`` expression index) against an OR of the terms, each a quoted lexeme so nothing in user
    text is parsed as tsquery syntax; ``ts_rank`` orders them where SQLite orders by BM25. Case and accents
    are folded in Python afterwards (:func:`coverage`), as on SQLite, so the floor decides the same way."""
    marks = ", ".join("?" for _ in statuses)
    where, params = _window_sql(window)
    lexemes = " | ".join("'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)
    vector = "to_tsvector('simple', content || ' ' || situation)"
    return conn.execute(
        f"SELECT {_COLUMNS} FROM notes, to_tsquery('simple', ?) AS q WHERE {vector} @@ q"
        f" AND status IN ({marks}){where} ORDER BY ts_rank({vector}, q) DESC, id DESC LIMIT ?",
        (lexemes, *statuses, *params, pool),
    ).fetchall()


# -- promotion --------------------------------------------------------------------------------------


def promotable(conn: apsw.Connection, limit: int) -> list[tuple[str, str]]:
    """``(note_id, judgment_id)`` of candidates a judgment of their current life resolved true, oldest first
    (a judgment made before the note was last forgotten does not promote it again)."""
    resolved_true = f"j.note_id = n.note_id AND j.state = 'resolved' AND j.outcome = 1 AND {current_life()}"
    c = byte_order(conn)
    rows = conn.execute(
        f"SELECT n.note_id, (SELECT j.judgment_id FROM judgments AS j WHERE {resolved_true}"
        f"  ORDER BY j.resolved_at{c}, j.judgment_id{c} LIMIT 1)"
        f" FROM notes AS n WHERE n.status = 'candidate' AND EXISTS (SELECT 1 FROM judgments AS j WHERE {resolved_true})"
        " ORDER BY n.date, n.id LIMIT ?",
        (limit,),
    ).fetchall()
    return [(str(note_id), str(judgment_id)) for note_id, judgment_id in rows]
