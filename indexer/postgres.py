"""The semantic index on PostgreSQL: the same batches as SQLite, with the index in the database.

:class:`PostgresProjectIndex` runs :class:`~obsmem.indexer.project.ProjectIndex`'s batches (plan, embed with
no transaction open, commit under the project's writer lock, a memory changed meanwhile stays pending;
``backfill`` encodes the next batch while it commits one) and replaces what SQLite keeps outside its
database file:

- the embeddings are a pgvector column and the graph is an HNSW index on it (``vector_cosine_ops``, the
  settings' ``hnsw_m`` and ``hnsw_ef_construction``), made in the commit that learns the vector size. The
  database keeps it in step with every commit, so there are no in-memory vectors to load or refresh, no
  graph file to publish, verify or rebuild, and every server and worker on the database searches the same
  index at once;
- the indexing lock is a session advisory lock of the project (``PostgresProjectDatabase.session_lock``),
  not a lock file: one indexer per project across every process on the database;
- the keyword rows are postings scored with FTS5's BM25 (:mod:`obsmem.indexer.postgres_keywords`).

Conversation events are indexed too when ``semantic.index.events`` is on, from the same durable watermark
as on SQLite (:mod:`obsmem.indexer.postgres_events`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from obsmem.errors import EmbeddingUnavailable
from obsmem.faults import crash_point
from obsmem.indexer import postgres_events
from obsmem.indexer.batch_plan import EmbeddedBatch
from obsmem.indexer.engine import SemanticIndexer
from obsmem.indexer.postgres_keywords import PostgresKeywordDocuments
from obsmem.indexer.postgres_reader import PostgresIndexReader, parse_vector, vector_literal
from obsmem.indexer.project import BatchReport, ProjectIndex, content_hash
from obsmem.indexer.sources import MARK_ALL_EVENTS_AGAIN
from obsmem.indexer.state import IndexState, bump_version, update_state
from obsmem.settings import SemanticSettings

INDEXING_LOCK = "indexing"
GRAPH_INDEX = "semantic_vectors_hnsw"
_GONE = object()


def reset_derived(conn: Any, signature: str, keywords: PostgresKeywordDocuments) -> None:
    """Drop every derived row (and the HNSW index, whose vector size may change) and queue every memory and
    event again (events by moving their watermark back), in one transaction; canonical rows untouched."""
    conn.execute(f"DROP INDEX IF EXISTS {GRAPH_INDEX}")
    conn.execute("TRUNCATE semantic_vectors, semantic_removed")
    conn.execute("DELETE FROM semantic_chunks")
    conn.execute("DELETE FROM semantic_sources")
    conn.execute("ALTER TABLE semantic_vectors ALTER COLUMN embedding TYPE vector")
    conn.execute(
        "INSERT INTO semantic_pending(memory_row) SELECT id FROM memories"
        " ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1"
    )
    conn.execute(MARK_ALL_EVENTS_AGAIN)
    keywords.create(conn)
    _, version = bump_version(conn)
    update_state(conn, signature=signature, dimensions=None, dirty=0, removed_floor=version)


def remove_chunks(conn: Any, memory_rows: list[int], keywords: PostgresKeywordDocuments) -> None:
    """Delete these memories' chunks with their keyword rows and embeddings."""
    found: dict[int, list[int]] = {}
    chunks = conn.execute("SELECT memory_row, id FROM semantic_chunks WHERE memory_row = ANY(?)", (memory_rows,))
    for row, label in chunks:
        found.setdefault(int(row), []).append(int(label))
    for row in memory_rows:
        keywords.remove(conn, row, found.get(row, []))
    labels = [label for labels in found.values() for label in labels]
    conn.execute("DELETE FROM semantic_vectors WHERE chunk = ANY(?)", (labels,))
    conn.execute("DELETE FROM semantic_chunks WHERE memory_row = ANY(?)", (memory_rows,))
    conn.execute("DELETE FROM semantic_sources WHERE memory_row = ANY(?)", (memory_rows,))


def make_graph_index(conn: Any, dimensions: int, *, m: int, ef_construction: int) -> None:
    """Give the embedding column its size and build the HNSW index over it (cosine distance)."""
    conn.execute(f"ALTER TABLE semantic_vectors ALTER COLUMN embedding TYPE vector({int(dimensions)})")
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {GRAPH_INDEX} ON semantic_vectors USING hnsw (embedding vector_cosine_ops)"
        f" WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
    )


class PostgresProjectIndex(ProjectIndex):
    """One project's index in its PostgreSQL schema (see the module's text)."""

    def _keyword_documents(self, settings: SemanticSettings) -> PostgresKeywordDocuments:
        return PostgresKeywordDocuments(
            settings.bm25.tokenizer, settings.bm25.context_characters, settings.bm25.column_weights
        )

    def _attach_storage(self, db: Any, settings: SemanticSettings) -> None:
        """Everything lives in the project's schema: no FTS5 queries, no graph files."""

    # -- state ----------------------------------------------------------------------------------

    def _reset_derived(self, conn: Any) -> None:
        reset_derived(conn, self.signature, self.keywords)

    def _forget_derived(self) -> None:
        """Nothing derived lives outside the database here."""

    @contextlib.contextmanager
    def reader(self) -> Iterator[PostgresIndexReader]:  # type: ignore[override]
        with self.db.read() as conn:
            yield PostgresIndexReader(conn, self.db.schema, self.keywords, events=self.indexes_events)

    def _pending(self, conn: Any) -> int:
        return postgres_events.pending_count(conn, events=self.indexes_events)

    def _mark_new_events(self) -> None:
        """Mark the events appended since the last batch (when events are indexed; see ``postgres_events``)."""
        if not self.indexes_events:
            return
        with self.db.read() as conn:
            if not postgres_events.has_unmarked_events(conn):
                return
        with self.db.write() as conn:
            postgres_events.mark_new_events(conn)

    def status(self) -> dict[str, Any]:
        with self.db.read() as conn:
            state = IndexState.read(conn)
            compatible = state.compatible_with(self.signature, self.keyword_signature)
            reader = PostgresIndexReader(conn, self.db.schema, self.keywords, events=self.indexes_events)
            sources = reader.source_count()
            indexed = reader.indexed_count() if compatible else 0
            pending = self._pending(conn)
            chunks = conn.execute("SELECT count(*) FROM semantic_chunks").fetchone()[0] if compatible else 0
            graph_index = f"{self.db.schema}.{GRAPH_INDEX}"
            graph = conn.execute("SELECT to_regclass(?) IS NOT NULL", (graph_index,)).fetchone()[0]
        return {
            "indexed_count": indexed,
            "source_count": sources,
            "pending": pending,
            "chunks": int(chunks),
            "compatible": compatible,
            "dirty": state.dirty,
            "graph": bool(graph),
            # The graph is an index in the database, kept by PostgreSQL: there is no file to be missing.
            "graph_file": "none",
            "graph_file_error": None,
            "graph_rebuild": None,
        }

    # -- indexing -------------------------------------------------------------------------------

    def _project_lock(self) -> contextlib.AbstractContextManager[bool]:
        """A session advisory lock of the project: one indexer per project on the whole database."""
        return self.db.session_lock(INDEXING_LOCK)

    def _stored_embeddings(self, keys: list[str]) -> dict[str, bytes]:
        with self.db.read() as conn:
            found = conn.execute(
                "SELECT c.chunk_key, v.embedding::text FROM semantic_chunks AS c"
                " JOIN semantic_vectors AS v ON v.chunk = c.id WHERE c.chunk_key = ANY(?)",
                (keys,),
            )
            return {key: parse_vector(text).tobytes() for key, text in found}

    def _commit(self, embedded: EmbeddedBatch, report: BatchReport, *, grow_graph: bool = False) -> None:
        """One transaction, as on SQLite: the plan's memories whose pending entry is unchanged get their
        derived rows replaced (or removed), then their neighbours' keyword rows are brought up to date."""
        with self.db.write() as conn:
            state = IndexState.read(conn)
            if state.signature != self.signature:
                return  # reset by another process meanwhile; the next batch starts over
            width = embedded.width if embedded.width is not None else state.dimensions
            if state.dimensions is None and width is not None:
                update_state(conn, dimensions=width)
                index = self.settings.index
                make_graph_index(conn, width, m=index.hnsw_m, ef_construction=index.hnsw_ef_construction)
            elif width is not None and width != state.dimensions:
                raise EmbeddingUnavailable(
                    f"the embedding model returned {width}-dimensional vectors; the index holds "
                    f"{state.dimensions}-dimensional ones"
                )
            bump_version(conn)
            rows = [item.memory_row for item in embedded.plan]
            changes = {
                int(row): int(change)
                for row, change in conn.execute(
                    "SELECT memory_row, change FROM semantic_pending WHERE memory_row = ANY(?)", (rows,)
                )
            }
            current = [item for item in embedded.plan if changes.get(item.memory_row, _GONE) == item.change]
            indexed_before = {
                int(row)
                for (row,) in conn.execute("SELECT memory_row FROM semantic_sources WHERE memory_row = ANY(?)", (rows,))
            }
            stale = [item.memory_row for item in current if item.memory_row in indexed_before]
            if stale:
                remove_chunks(conn, stale, self.keywords)
            written = [(item, item.memory) for item in current if item.memory is not None]
            if written:
                conn.executemany(
                    "INSERT INTO semantic_sources(memory_row, memory_id, content_hash, chunk_count)"
                    " VALUES (?, ?, ?, ?)",
                    [
                        (item.memory_row, memory[0], content_hash(memory[1]), len(item.chunks))
                        for item, memory in written
                    ],
                )
            chunks: dict[int, list[tuple[int, str]]] = {}
            vectors: list[tuple[int, str]] = []
            for item, (_, _, date, session_id) in written:
                chunks[item.memory_row] = labelled = []
                for chunk in item.chunks:
                    if chunk.key in embedded.reused:
                        vector = np.frombuffer(embedded.reused[chunk.key], dtype=np.float32)
                        report.chunks_reused += 1
                    else:
                        vector = np.asarray(embedded.fresh[chunk.key], dtype=np.float32)
                        report.chunks_embedded += 1
                    label = int(
                        conn.execute(
                            "INSERT INTO semantic_chunks(chunk_key, memory_row, position, date, session_id, text)"
                            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                            (chunk.key, item.memory_row, chunk.position, date, session_id, chunk.text),
                        ).fetchone()[0]
                    )
                    labelled.append((label, chunk.text))
                    vectors.append((label, vector_literal(vector)))
            if vectors:
                conn.execute(
                    "INSERT INTO semantic_vectors(chunk, embedding)"
                    " SELECT label, embedding::vector FROM unnest(?::bigint[], ?::text[]) AS v(label, embedding)",
                    ([label for label, _ in vectors], [text for _, text in vectors]),
                )
            processed = [item.memory_row for item in current]
            conn.execute("DELETE FROM semantic_pending WHERE memory_row = ANY(?)", (processed,))
            report.memories += len(processed)
            report.neighbours_rewritten += self.keywords.sync(conn, processed, chunks)
            crash_point("batch:written")
        crash_point("batch:committed")

    # -- what SQLite keeps in memory and in files --------------------------------------------------

    def vectors(self, *, wait: float = 30.0) -> None:  # type: ignore[override]
        """No in-memory vectors on PostgreSQL: searches read the database's HNSW index."""
        return None

    def maintain(self) -> None:
        """Nothing to publish or repair: PostgreSQL keeps the HNSW index with every commit."""

    def close(self) -> None:
        """Nothing held: connections belong to the store's pool."""


class PostgresSemanticIndexer(SemanticIndexer):
    """:class:`SemanticIndexer` over a :class:`~obsmem.storage.PostgresStore`: one index per project schema."""

    def project(self, name: str) -> PostgresProjectIndex:  # type: ignore[override]
        db = self.projects.get(name)
        with self._lock:
            index = self._indexes.get(name)
            if index is None or index.db is not db:
                index = self._indexes[name] = PostgresProjectIndex(name, db, self.settings, self.embedder)
            return index  # type: ignore[return-value]
