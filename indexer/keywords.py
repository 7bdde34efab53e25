"""Contextual keyword documents: the FTS5 rows BM25 ranks, kept in step with their neighbours.

Every chunk is one row of ``semantic_fts`` with four columns:

- ``body`` — the chunk's text;
- ``previous`` — for a memory's first chunk, the last ``context_characters`` (300) characters of the
  observation before it in its session, cut at a word boundary;
- ``next`` — for a memory's last chunk, the first 300 characters of the observation after it;
- ``date`` — the memory's date as words (``8 May 2023``).

Why: in a conversation an answer often shares no word with the question about it, but follows the turn
that asked it ("What position are you playing?" / "I'm a shooting guard"); and questions name dates
that no memory text spells out. The column weights are applied at query time
(``bm25(semantic_fts, 1.0, 0.5, 0.2, 2.0)`` by default: a memory's own words count most). Embeddings
are of the body only.

Order and neighbours: observations of one session in (date, row id) order, the order they were said
in. Only observations chain: a reflection condenses many observations, so it carries no neighbour
context and is nobody's neighbour. Conversation events (indexed under their negated row, see
:mod:`obsmem.indexer.sources`) chain the same way among themselves: each event's neighbours are the
events before and after it (by seq) in its session. Middle chunks of a long memory get no neighbour
context (their neighbours are the memory's own chunks, which overlap them already); the first chunk
carries the previous observation, the last chunk the next one, a one-chunk memory both.

Keeping neighbours in step. A memory's keyword rows depend on two other memories, so inserting,
editing, moving or deleting a memory changes its neighbours' rows too. ``semantic_context`` records for
every indexed memory the rows its context came from (``previous_row``, ``next_row``) and a digest of
the context. In each batch's single transaction, after the processed memories' chunks are written,
:meth:`KeywordDocuments.sync`:

1. writes the keyword rows of every processed memory that still exists, from the current memories;
2. checks the memories whose context may have changed: the current neighbours of each processed memory
   and every memory whose recorded context came from one. A checked memory whose context differs is
   rewritten — keyword rows only: its body, and so its embedding, did not change — and when its
   neighbours changed, those are checked in turn.

Pending memories are skipped (their own batch writes them from scratch). Everything happens inside the
batch's transaction, so a crash leaves either all of it or none of it, and work is proportional to what
changed: a few indexed lookups per processed memory.

The tables are derived and created here rather than in a migration because their layout follows
settings (tokenizer, context size); :func:`keyword_signature` names the layout, and a database whose
recorded signature differs gets its keyword tables rebuilt from the stored chunks — no embedding work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

import apsw

from obsmem.faults import crash_point
from obsmem.indexer.sources import event_date, event_text, is_event_row
from obsmem.indexer.state import update_state

_NEIGHBOUR = "id, session_id, date, content FROM memories WHERE session_id = ? AND kind = 'observation'"
FTS_TABLE = "semantic_fts"
FTS_VOCAB = "semantic_fts_vocab"  # no longer made; dropped with the old tables on a rebuild
CONTEXT_TABLE = "semantic_context"
COLUMNS = ("body", "previous", "next", "date")
# Bump the number when the rows' layout or content rules change (never rename it: a layout is compared by
# its numbers, see IndexState.keyword_difference): every indexer, background ones included, rebuilds rows of
# an older layout by itself, and a process of an older release leaves rows of this one alone.
LAYOUT = "contextual-1"

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def keyword_signature(tokenizer: str, context_characters: int) -> str:
    """What the keyword rows were made with; recorded in ``semantic_state.fts_tokenizer``."""
    return json.dumps(
        {"layout": LAYOUT, "tokenizer": tokenizer, "context_characters": context_characters},
        sort_keys=True,
        separators=(",", ":"),
    )


def date_words(stored: str) -> str:
    """``2023-05-08 13:56:00`` -> ``8 May 2023``: words a question can match in any order."""
    year, month, day = int(stored[0:4]), int(stored[5:7]), int(stored[8:10])
    return f"{day} {MONTHS[month - 1]} {year}"


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters, from a word start (what a reply answers is said last)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    cut = text[-limit:]
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space < len(cut) - 1 else cut


def head(text: str, limit: int) -> str:
    """The first ``limit`` characters, up to a word end."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > 0 else cut


@dataclass(frozen=True)
class Context:
    """A memory's neighbour context as of now."""

    previous_row: int | None
    next_row: int | None
    previous: str
    next: str
    date: str

    @property
    def digest(self) -> bytes:
        text = "\x00".join((self.previous, self.next, self.date))
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def rows(self, chunks: list[tuple[int, str]]) -> list[tuple[int, str, str, str, str]]:
        """``(label, body, previous, next, date)`` for a memory's chunks in position order."""
        last = len(chunks) - 1
        return [
            (label, text, self.previous if i == 0 else "", self.next if i == last else "", self.date)
            for i, (label, text) in enumerate(chunks)
        ]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class KeywordDocuments:
    """The keyword rows of one project database (all methods run inside the caller's transaction)."""

    def __init__(self, tokenizer: str, context_characters: int) -> None:
        self.tokenizer = tokenizer
        self.context_characters = context_characters
        self.signature = keyword_signature(tokenizer, context_characters)

    # -- tables -----------------------------------------------------------------------------------

    def create(self, conn: apsw.Connection) -> None:
        """(Re)create the keyword tables and fill them from the stored chunks and current memories."""
        conn.execute(f"DROP TABLE IF EXISTS {FTS_VOCAB}")
        conn.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        conn.execute(f"DROP TABLE IF EXISTS {CONTEXT_TABLE}")
        # Contentless: the text lives in semantic_chunks and memories already; rows are deleted by rowid.
        conn.execute(
            f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5({', '.join(COLUMNS)}, content='', "
            f"contentless_delete=1, tokenize={_quoted(self.tokenizer)})"
        )
        conn.execute(
            f"CREATE TABLE {CONTEXT_TABLE} (memory_row INTEGER PRIMARY KEY, previous_row INTEGER,"
            " next_row INTEGER, digest BLOB NOT NULL)"
        )
        conn.execute(f"CREATE INDEX {CONTEXT_TABLE}_previous ON {CONTEXT_TABLE}(previous_row)")
        conn.execute(f"CREATE INDEX {CONTEXT_TABLE}_next ON {CONTEXT_TABLE}(next_row)")
        self._fill(conn)
        update_state(conn, fts_tokenizer=self.signature)

    def _fill(self, conn: apsw.Connection) -> None:
        # Observations in session order: each one's neighbours are the items beside it in the stream.
        Item = tuple[int, str, str, str, int]  # row, session, date, content, has an indexed source

        def emit(before: Item | None, item: Item, after: Item | None) -> None:
            if not item[4]:
                return
            same_before = before if before is not None and before[1] == item[1] else None
            same_after = after if after is not None and after[1] == item[1] else None
            self._write(conn, item[0], self._context(item[2], same_before, same_after))

        stream = conn.execute(
            "SELECT m.id, m.session_id, m.date, m.content, s.memory_row IS NOT NULL"
            " FROM memories AS m LEFT JOIN semantic_sources AS s ON s.memory_row = m.id"
            " WHERE m.kind = 'observation' ORDER BY m.session_id, m.date, m.id"
        )
        before: Item | None = None
        current: Item | None = None
        for found in stream:
            item: Item = (int(found[0]), found[1], found[2], found[3], int(found[4]))
            if current is not None:
                emit(before, current, item)
            before, current = current, item
        if current is not None:
            emit(before, current, None)
        # Events in session order, chained among themselves the same way; only when some event is indexed
        # (semantic.index.events), or the rebuild would read every event's text to write nothing.
        before, current = None, None
        indexed_events = conn.execute("SELECT EXISTS (SELECT 1 FROM semantic_sources WHERE memory_row < 0)")
        events = (
            conn.execute(
                f"SELECT -e.id, e.session_id, {event_date('e')}, {event_text('e')}, s.memory_row IS NOT NULL"
                " FROM events AS e LEFT JOIN semantic_sources AS s ON s.memory_row = -e.id"
                " ORDER BY e.session_id, e.seq"
            )
            if indexed_events.fetchone()[0]
            else ()
        )
        for found in events:
            item = (int(found[0]), found[1], found[2], found[3], int(found[4]))
            if current is not None:
                emit(before, current, item)
            before, current = current, item
        if current is not None:
            emit(before, current, None)
        # Reflections, and chunks whose memory or event is gone (invisible to search until removed): body
        # and date only.
        for row, date in conn.execute(
            "SELECT s.memory_row, m.date FROM semantic_sources AS s JOIN memories AS m ON m.id = s.memory_row"
            " WHERE m.kind = 'reflection'"
        ).fetchall():
            self._write(conn, row, Context(None, None, "", "", date_words(date)))
        for row, date in conn.execute(
            "SELECT s.memory_row, (SELECT c.date FROM semantic_chunks AS c WHERE c.memory_row = s.memory_row"
            " ORDER BY c.position LIMIT 1) FROM semantic_sources AS s"
            " WHERE (s.memory_row > 0 AND NOT EXISTS (SELECT 1 FROM memories AS m WHERE m.id = s.memory_row))"
            " OR (s.memory_row < 0 AND NOT EXISTS (SELECT 1 FROM events AS e WHERE e.id = -s.memory_row))"
        ).fetchall():
            self._write(conn, row, Context(None, None, "", "", date_words(date) if date else ""))

    # -- one memory -------------------------------------------------------------------------------

    def _context(
        self, date: str, before: tuple[int, str, str, str] | None, after: tuple[int, str, str, str] | None
    ) -> Context:
        limit = self.context_characters
        return Context(
            before[0] if before is not None else None,
            after[0] if after is not None else None,
            tail(before[3], limit) if before is not None and limit else "",
            head(after[3], limit) if after is not None and limit else "",
            date_words(date),
        )

    def context_of(self, conn: apsw.Connection, row: int) -> Context | None:
        """The context of memory (or event) ``row`` from the current rows (None if it does not exist)."""
        if is_event_row(row):
            return self._event_context(conn, row)
        found = conn.execute("SELECT session_id, date, kind FROM memories WHERE id = ?", (row,)).fetchone()
        if found is None:
            return None
        session, date, kind = found
        if kind != "observation":
            return Context(None, None, "", "", date_words(date))
        before = self._neighbour(conn, session, date, row, before=True)
        after = self._neighbour(conn, session, date, row, before=False)
        return self._context(date, before, after)

    def _event_context(self, conn: apsw.Connection, row: int) -> Context | None:
        found = conn.execute(f"SELECT session_id, seq, {event_date('events')} FROM events WHERE id = ?", (-row,))
        current = found.fetchone()
        if current is None:
            return None
        session, seq, date = current
        around = []
        for condition in ("seq < ? ORDER BY seq DESC", "seq > ? ORDER BY seq"):
            near = conn.execute(
                f"SELECT -e.id, e.session_id, {event_date('e')}, {event_text('e')} FROM events AS e"
                f" WHERE e.session_id = ? AND e.{condition} LIMIT 1",
                (session, seq),
            ).fetchone()
            around.append(None if near is None else (int(near[0]), near[1], near[2], near[3]))
        return self._context(date, around[0], around[1])

    @staticmethod
    def _neighbour(
        conn: apsw.Connection, session: str, date: str, row: int, *, before: bool
    ) -> tuple[int, str, str, str] | None:
        # Two index range reads instead of one row-value comparison: with many memories on the same
        # date (a conversation's session is often stamped once), the row value would scan them all.
        if before:
            same = "date = ? AND id < ? ORDER BY id DESC"
            other = "date < ? ORDER BY date DESC, id DESC"
        else:
            same = "date = ? AND id > ? ORDER BY id"
            other = "date > ? ORDER BY date, id"
        # Both reads in one statement (an index seek each); the same date, when it has one, is nearer.
        found = min(
            conn.execute(
                f"SELECT * FROM (SELECT 0, {_NEIGHBOUR} AND {same} LIMIT 1)"
                f" UNION ALL SELECT * FROM (SELECT 1, {_NEIGHBOUR} AND {other} LIMIT 1)",
                (session, date, row, session, date),
            ).fetchall(),
            default=None,
        )
        return None if found is None else (int(found[1]), found[2], found[3], found[4])

    def _chunks(self, conn: apsw.Connection, row: int) -> list[tuple[int, str]]:
        return [
            (int(label), text)
            for label, text in conn.execute(
                "SELECT id, text FROM semantic_chunks WHERE memory_row = ? ORDER BY position", (row,)
            )
        ]

    def _write(
        self,
        conn: apsw.Connection,
        row: int,
        context: Context,
        *,
        replace: bool = False,
        chunks: list[tuple[int, str]] | None = None,
    ) -> None:
        """Write the keyword rows and the context record of memory ``row`` (``replace``: rows exist;
        ``chunks``: its chunks' (label, text) in position order, when the caller has them)."""
        for label, body, previous, following, date in context.rows(
            self._chunks(conn, row) if chunks is None else chunks
        ):
            if replace:
                conn.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid = ?", (label,))
            conn.execute(
                f"INSERT INTO {FTS_TABLE}(rowid, body, previous, next, date) VALUES (?, ?, ?, ?, ?)",
                (label, body, previous, following, date),
            )
        conn.execute(
            f"INSERT INTO {CONTEXT_TABLE}(memory_row, previous_row, next_row, digest) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(memory_row) DO UPDATE SET previous_row = excluded.previous_row,"
            " next_row = excluded.next_row, digest = excluded.digest",
            (row, context.previous_row, context.next_row, context.digest),
        )

    def remove(self, conn: apsw.Connection, row: int, labels: Iterable[int]) -> None:
        """Delete a memory's keyword rows and its context record (before its chunks are deleted)."""
        for label in labels:
            conn.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid = ?", (label,))
        conn.execute(f"DELETE FROM {CONTEXT_TABLE} WHERE memory_row = ?", (row,))

    # -- a batch ----------------------------------------------------------------------------------

    def sync(
        self, conn: apsw.Connection, processed: Iterable[int], chunks: dict[int, list[tuple[int, str]]] | None = None
    ) -> int:
        """Write the processed memories' rows and bring every affected neighbour up to date.

        ``processed`` are memory rows whose chunks this transaction has just replaced (or removed);
        ``chunks`` may give the ``(label, text)`` of those just written, so they are not read back.
        Returns how many other memories had their keyword rows rewritten.
        """
        rows = list(processed)
        done: set[int] = set(rows)
        queue: list[int] = self._referencing(conn, rows)
        indexed = self._indexed_among(conn, rows)
        for row in rows:
            if row not in indexed:
                continue  # deleted: its rows went with its chunks
            context = self.context_of(conn, row)
            if context is None:
                continue
            self._write(conn, row, context, chunks=None if chunks is None else chunks.get(row))
            queue.extend(r for r in (context.previous_row, context.next_row) if r is not None)
        rewritten = 0
        while queue:
            row = queue.pop()
            if row in done:
                continue
            done.add(row)
            if not self._indexed(conn, row) or self._pending(conn, row):
                continue  # its own batch will write it from the current memories
            context = self.context_of(conn, row)
            if context is None:
                continue
            stored = conn.execute(
                f"SELECT previous_row, next_row, digest FROM {CONTEXT_TABLE} WHERE memory_row = ?", (row,)
            ).fetchone()
            refs = (context.previous_row, context.next_row)
            if stored is not None and (stored[0], stored[1]) == refs and bytes(stored[2]) == context.digest:
                continue
            self._write(conn, row, context, replace=True)
            rewritten += 1
            if rewritten == 1:
                crash_point("batch:neighbours")
            if stored is None or (stored[0], stored[1]) != refs:
                # Its neighbours changed: theirs may point past it or at a memory now gone.
                queue.extend(r for r in (*refs, *(stored[:2] if stored else ())) if r is not None)
        return rewritten

    @staticmethod
    def _referencing(conn: apsw.Connection, rows: list[int]) -> list[int]:
        """Memories whose recorded context came from one of ``rows``."""
        among = json.dumps(rows)
        return [
            int(found[0])
            for found in conn.execute(
                f"SELECT memory_row FROM {CONTEXT_TABLE} WHERE previous_row IN (SELECT value FROM json_each(?1))"
                f" UNION SELECT memory_row FROM {CONTEXT_TABLE} WHERE next_row IN (SELECT value FROM json_each(?1))",
                (among,),
            )
        ]

    @staticmethod
    def _indexed_among(conn: apsw.Connection, rows: list[int]) -> set[int]:
        return {
            int(found[0])
            for found in conn.execute(
                "SELECT memory_row FROM semantic_sources WHERE memory_row IN (SELECT value FROM json_each(?))",
                (json.dumps(rows),),
            )
        }

    @staticmethod
    def _indexed(conn: apsw.Connection, row: int) -> bool:
        return conn.execute("SELECT 1 FROM semantic_sources WHERE memory_row = ?", (row,)).fetchone() is not None

    @staticmethod
    def _pending(conn: apsw.Connection, row: int) -> bool:
        return conn.execute("SELECT 1 FROM semantic_pending WHERE memory_row = ?", (row,)).fetchone() is not None
