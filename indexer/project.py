"""One project's semantic index: incremental batches, compatibility, the in-memory vectors, the graph file.

:meth:`ProjectIndex.run_batch` is the single entry point for indexing work — the indexer's scheduler
(:mod:`obsmem.indexer.scheduler`) and ``obsmem index`` both call it. One batch:

1. reads up to ``batch_chunks`` pending memories in a short read snapshot;
2. chunks them and embeds the chunks whose text is not stored yet — with no database lock held;
3. in one ``BEGIN IMMEDIATE`` transaction, for each memory whose pending entry is unchanged, replaces its
   chunks, keyword rows and embeddings and clears the entry (a memory edited meanwhile stays pending);
4. applies the committed change to the in-memory vectors.

Everything a batch writes commits at once, so a crash anywhere repeats at most the unfinished batch,
and a restart never repeats a finished one. Work is proportional to what changed: the triggers on
``memories`` name exactly the rows to look at.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import hnswlib
import numpy as np

from obsmem.dates import now_iso
from obsmem.errors import EmbeddingUnavailable, IndexBusy, ObsmemError, SemanticSettingsMismatch, StorageError
from obsmem.faults import crash_point
from obsmem.indexer import stores
from obsmem.indexer.batch_plan import (
    EmbeddedBatch,
    PendingQueries,
    PlannedSource,
    keep_stored_embeddings,
    plan_batch,
    read_pending,
)
from obsmem.indexer.chunker import ChunkSettings
from obsmem.indexer.embedders import Embedder
from obsmem.indexer.hnsw_file import IndexFiles
from obsmem.indexer.keywords import KeywordDocuments
from obsmem.indexer.reader import Fts5Keywords, IndexReader, SqliteIndexReader
from obsmem.indexer.sources import (
    PENDING_EVENTS,
    PENDING_MEMORIES,
    UNMARKED_EVENT_COUNT,
    UNMARKED_EVENTS,
    mark_new_events,
)
from obsmem.indexer.state import (
    NEWER_LAYOUT_NAME,
    OLDER_LAYOUT,
    IndexState,
    bump_version,
    index_signature,
    update_state,
)
from obsmem.indexer.vectors import MEMORIES, DamagedVectors, VectorSet, read_vector_set
from obsmem.settings import SemanticSettings
from obsmem.storage import ProjectDatabase

log = logging.getLogger("obsmem.indexer")

INDEX_DIRECTORY = "semantic"
# Why a graph file is rebuilt, as logged and shown in status (never any memory text).
GRAPH_PROBLEMS = {
    "missing": "the vector index graph file is missing",
    "damaged": "the vector index graph file does not match its recorded size and checksum (damaged or replaced)",
    "unfinished": "the vector index graph file was left unfinished (a publish was interrupted)",
}
INDEXING_LOCK = ".indexing.lock"
# A batch's rows as one JSON array parameter: no limit on how many, one statement each.
_AMONG = " WHERE memory_row IN (SELECT value FROM json_each(?))"
_PENDING_CHANGES = "SELECT memory_row, change FROM semantic_pending" + _AMONG
_INDEXED_AMONG = "SELECT memory_row FROM semantic_sources" + _AMONG
_GONE = object()  # no pending entry: the row was done by another indexer


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


@dataclass
class BatchReport:
    memories: int = 0  # memories whose derived rows were written or removed
    chunks_embedded: int = 0  # chunks sent to the model
    chunks_reused: int = 0  # chunks whose stored embedding was kept
    remaining: int = 0  # memories still pending after the batch
    busy: bool = False  # another indexer holds this project
    neighbours_rewritten: int = 0  # other memories whose keyword rows changed with their neighbours
    reset: bool = False  # the derived data was dropped (settings changed)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class ProjectIndex:
    def __init__(self, name: str, db: ProjectDatabase, settings: SemanticSettings, embedder: Embedder) -> None:
        self.name = name
        self.db = db
        self.settings = settings
        self.embedder = embedder
        self.chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
        self.signature = index_signature(embedder.identity, self.chunking, embedder.sentences)
        self.keywords = self._keyword_documents(settings)
        self.keyword_signature = self.keywords.signature
        # Events are indexed only when the setting says so: new ones are marked by the indexer itself
        # (mark_new_events), and the markers of edits and deletes wait (ignored: no row below this one is
        # read) until then.
        self.indexes_events = settings.index.events
        self.first_row = -(2**63) if self.indexes_events else 0
        self.pending_queries = PendingQueries(PENDING_MEMORIES, PENDING_EVENTS if self.indexes_events else None)
        self._attach_storage(db, settings)
        self._vectors: VectorSet | None = None
        self._load_lock = threading.Lock()
        self._batch_lock = threading.Lock()
        self._rebuilding = False
        self._damage_resets = 0  # how many times damaged stored vectors reset the index (see _reset_damaged)
        self._reported: tuple[str | None, str] | None = None  # the graph file problem logged last
        # The graph in memory whose last publish failed (a full disk): it is whole, so the next maintenance
        # publishes it again as it is instead of rebuilding it from every vector.
        self._unpublished: hnswlib.Index | None = None
        self._unsaved_error: str | None = None  # the error code that publish failed with (storage_full, ...)
        self.last_rebuild: dict[str, str] | None = None  # why and when the graph was last rebuilt

    def _keyword_documents(self, settings: SemanticSettings) -> KeywordDocuments:
        """The keyword rows' writer: FTS5's table on SQLite (PostgreSQL's postings override it)."""
        return KeywordDocuments(settings.bm25.tokenizer, settings.bm25.context_characters)

    def _attach_storage(self, db: ProjectDatabase, settings: SemanticSettings) -> None:
        """What SQLite keeps beside the database: FTS5's queries and the graph's files (none on PostgreSQL)."""
        self.keyword_queries = Fts5Keywords(settings.bm25.tokenizer, settings.bm25.column_weights)
        self.files = IndexFiles(Path(db.path).parent / INDEX_DIRECTORY)

    # -- state ----------------------------------------------------------------------------------

    def state(self) -> IndexState:
        with self.db.read() as conn:
            return IndexState.read(conn)

    def ensure_compatible(self, *, adopt: bool) -> bool:
        """Reset derived data if the signature changed; rebuild the keyword tables if their signature did.

        ``adopt``: an explicit ``obsmem index``, which replaces an index built with other settings. Without
        it (a background batch) such an index is ``semantic_settings_mismatch``, and only an index never
        built is built with these settings, and keyword rows of an older release's layout (the same settings)
        are rebuilt in this code's: a server or worker must not undo the index other processes keep with
        their settings, nor that of a newer release (see :meth:`IndexState.built_with_other_settings`)."""
        state = self.state()
        if state.compatible_with(self.signature, self.keyword_signature):
            return False
        if not adopt and state.built_with_other_settings(self.signature, self.keyword_signature):
            raise self.settings_mismatch(state)
        reset = False
        with self.db.write() as conn:
            state = IndexState.read(conn)
            if state.compatible_with(self.signature, self.keyword_signature):
                return False  # another process of these settings got here first
            if not adopt and state.built_with_other_settings(self.signature, self.keyword_signature):
                raise self.settings_mismatch(state)  # claimed meanwhile by a process of other settings
            if state.signature != self.signature:
                self._reset_derived(conn)
                reset = True
            elif state.fts_tokenizer != self.keyword_signature:
                older = state.keyword_difference(self.keyword_signature) == OLDER_LAYOUT
                log.info(
                    "project %s: %s; rebuilding the keyword rows (no embedding work)",
                    self.name,
                    "keyword rows of an older release's layout" if older else "keyword settings changed",
                )
                self.keywords.create(conn)
        if reset:
            log.info("project %s: index settings changed; rebuilding derived data", self.name)
            self._forget_derived()
        return reset

    def settings_mismatch(self, state: IndexState) -> SemanticSettingsMismatch:
        """The error of a process whose settings differ from those ``state``'s index was built with: which
        settings differ (names only) and the explicit command that switches the index to this process's."""
        differing = state.differing_settings(self.signature, self.keyword_signature)
        if differing == [NEWER_LAYOUT_NAME]:
            return SemanticSettingsMismatch(
                f"the semantic index of project {self.name} was written by a newer obsmem release (its keyword "
                "rows have a layout this version does not know), and processes of that release may be using it; "
                "hybrid search answers only with an index this version wrote. Upgrade this process to that "
                f"release; or, once no process of it runs on the project, run `obsmem index {self.name}` with "
                "this version (it rebuilds the keyword rows, no embedding work). Mode 'exact' works meanwhile"
            )
        return SemanticSettingsMismatch(
            f"the semantic index of project {self.name} was built with other [semantic] settings than this "
            f"process's (they differ in: {', '.join(differing)}), and another process may still be using it; hybrid "
            "search answers only with the settings the index was built with. To switch the index to this "
            f"process's settings, run `obsmem index {self.name}` with them (it rebuilds the index; processes "
            "still running with the old settings then answer this error); or run this process with the "
            "settings the index was built with. Mode 'exact' works meanwhile"
        )

    def _reset_derived(self, conn: Any) -> None:
        """Drop every derived row and queue every source again, in the caller's transaction."""
        stores.reset_derived(conn, self.signature, self.keywords)

    def _forget_derived(self) -> None:
        """After a reset: drop what is derived outside the database (the graph files, the in-memory vectors)."""
        with self.files.locked():
            self.files.remove_strays(keep=None)
        with self._load_lock:
            self._vectors = None

    @contextlib.contextmanager
    def reader(self) -> Iterator[IndexReader]:
        """One read snapshot of the index, through the operations search may ask of it (no table names)."""
        with self.db.read() as conn:
            yield SqliteIndexReader(conn, self.keyword_queries, first_row=self.first_row)

    def pending_count(self) -> int:
        with self.db.read() as conn:
            return self._pending(conn)

    def _pending(self, conn: apsw.Connection) -> int:
        """Sources waiting for a batch: markers, and the new events not marked yet when events are indexed."""
        marked = conn.execute("SELECT count(*) FROM semantic_pending WHERE memory_row > ?", (self.first_row,))
        pending = int(marked.fetchone()[0])
        if self.indexes_events:
            pending += int(conn.execute(UNMARKED_EVENT_COUNT).fetchone()[0])
        return pending

    def _mark_new_events(self) -> None:
        """Mark the events appended since the last batch (when events are indexed; see ``mark_new_events``)."""
        if not self.indexes_events or not self.db.query(UNMARKED_EVENTS)[0][0]:
            return
        with self.db.write() as conn:
            mark_new_events(conn)

    def status(self) -> dict[str, Any]:
        with self.db.read() as conn:
            state = IndexState.read(conn)
            compatible = state.compatible_with(self.signature, self.keyword_signature)
            kind = None if self.indexes_events else MEMORIES
            sources = stores.source_count(conn, kind)
            indexed = stores.indexed_count(conn, kind) if compatible else 0
            pending = self._pending(conn)
            chunks = conn.execute("SELECT count(*) FROM semantic_chunks").fetchone()[0] if compatible else 0
        vectors = self._vectors
        return {
            "indexed_count": indexed,
            "source_count": sources,
            "pending": pending,
            "chunks": chunks,
            "compatible": compatible,
            "dirty": state.dirty,
            "graph": vectors is not None and vectors.graph is not None,
            "graph_file": self.graph_file_state(state),
            "graph_file_error": self._unsaved_error if self._unsaved(state) else None,
            "graph_rebuild": self.last_rebuild,
        }

    def graph_file_state(self, state: IndexState) -> str:
        """The graph file as it is on disk now: ``present`` (verified), ``missing``, ``damaged``,
        ``rebuilding`` (being rebuilt or published), ``unsaved`` (this process's graph is current in memory,
        but writing its file failed: a full disk; retried with backoff, see ``graph_file_error``) or ``none``
        (nothing published yet)."""
        if self._unsaved(state):
            return "unsaved"
        if self._rebuilding or state.dirty:
            return "rebuilding"
        if state.hnsw_file is None:
            return "none"
        return self.files.problem(state) or "present"

    def _unsaved(self, state: IndexState) -> bool:
        """Did this process's last publish fail, with no file published since (by it or another process)?"""
        return self._unpublished is not None and state.dirty

    def _report_graph_problem(self, state: IndexState, problem: str) -> None:
        """Log a damaged, missing or unfinished graph file once (per file and problem) and keep it for status."""
        if self._reported == (state.hnsw_file, problem):
            return
        self._reported = (state.hnsw_file, problem)
        reason = GRAPH_PROBLEMS.get(problem, problem)
        self.last_rebuild = {"reason": reason, "at": now_iso()}
        log.warning("project %s: %s; rebuilding it from the stored embeddings", self.name, reason)

    # -- indexing -------------------------------------------------------------------------------

    def run_batch(self, max_chunks: int | None = None) -> BatchReport:
        """Index one bounded batch of pending memories (the background indexer's step). Raises
        EmbeddingUnavailable (nothing stored), and SemanticSettingsMismatch for an index built with other
        settings, which only :meth:`backfill` (``obsmem index``) replaces."""
        with self._indexing() as free:
            if not free:
                return BatchReport(busy=True)
            report = BatchReport(reset=self.ensure_compatible(adopt=False))
            if not report.reset:
                report.reset = self._reset_if_damaged()
            self._mark_new_events()
            plan = self._plan(max_chunks or self.settings.index.batch_chunks)
            crash_point("batch:read")
            if plan:
                self._commit(self._embed(plan), report)
            report.remaining = self.pending_count()
            return report

    def backfill(self, progress: Callable[[BatchReport], None] | None = None) -> BatchReport:
        """Index everything pending now, batch after batch, each committed as :meth:`run_batch` would.

        The model encodes batch N+1 (in a helper thread, holding no lock) while this thread commits batch
        N, so the SQLite writes hide behind the model's time; the graph grows as batches commit, one
        thread, beside the model. Raises IndexBusy when another indexer holds the project. It is the explicit
        run (``obsmem index``, ``Obsmem.index``), so an index built with other settings is replaced by one
        built with these.
        """
        with self._indexing() as free:
            if not free:
                raise IndexBusy("another indexer is working on this project; try again when it has finished")
            # An explicit run: the operator's way to switch an index to this process's settings.
            total = BatchReport(reset=self.ensure_compatible(adopt=True))
            if not total.reset:
                total.reset = self._reset_if_damaged()
            self._mark_new_events()
            budget = self.settings.index.batch_chunks
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="obsmem-encode") as model:
                # Batches are planned in row order, each after the one being encoded.
                upcoming = self._plan(budget)
                crash_point("batch:read")
                encoding = model.submit(self._encode, self._reuse(upcoming)) if upcoming else None
                while encoding is not None:
                    embedded = encoding.result()
                    upcoming = self._plan(budget, after_row=embedded.plan[-1].memory_row)
                    crash_point("batch:read")
                    encoding = model.submit(self._encode, self._reuse(upcoming)) if upcoming else None
                    report = BatchReport()
                    self._commit(embedded, report, grow_graph=True)
                    total.memories += report.memories
                    total.chunks_embedded += report.chunks_embedded
                    total.chunks_reused += report.chunks_reused
                    total.neighbours_rewritten += report.neighbours_rewritten
                    if encoding is None and self.pending_count():
                        self._mark_new_events()
                        upcoming = self._plan(budget)  # rows that changed behind us: another round
                        encoding = model.submit(self._encode, self._reuse(upcoming)) if upcoming else None
                    if progress is not None:
                        report.remaining = self.pending_count()
                        progress(report)
            total.remaining = self.pending_count()
            return total

    def _reset_if_damaged(self) -> bool:
        """Before indexing: load the stored vectors, or catch up with what was committed since they were
        loaded, which checks them (see :meth:`vectors`); damaged ones reset the index here, so the batches
        that follow rebuild it instead of writing beside it. Returns whether they did.

        No batch reloads every vector: the first batch of a process loads them once (the process holds them
        anyway, for searches and for the graph its maintenance builds and publishes), and each later one
        reads only the rows committed since (one state read when nothing was). Rows damaged after this
        process loaded them are found by the next process that loads them; the copy held here is whole."""
        resets = self._damage_resets
        self.vectors()
        return self._damage_resets != resets

    def indexing_elsewhere(self) -> bool:
        """Does a batch hold this project's indexing lock now (in this process or another)?"""
        if self._batch_lock.locked():
            return True
        with self._project_lock() as free:
            return not free

    @contextlib.contextmanager
    def _indexing(self) -> Iterator[bool]:
        """Both indexing locks (this process's and the project's); yields False if busy."""
        if not self._batch_lock.acquire(blocking=False):
            yield False
            return
        try:
            with self._project_lock() as free:
                yield free
        finally:
            self._batch_lock.release()

    def _project_lock(self) -> contextlib.AbstractContextManager[bool]:
        """The project's indexing lock across processes, not waited for (yields whether it was free): a
        lock file beside the database."""
        return self.files.locked(INDEXING_LOCK, blocking=False)

    def _plan(self, budget: int, *, after_row: int | None = None) -> list[PlannedSource]:
        """Up to ``budget`` chunks' worth of pending sources, in indexing order after ``after_row``."""
        with self.db.read() as conn:
            rows = read_pending(conn, self.pending_queries, budget, after_row)
        return plan_batch(rows, budget, self.chunking)

    def _embed(self, plan: list[PlannedSource]) -> EmbeddedBatch:
        return self._encode(self._reuse(plan))

    def _reuse(self, plan: list[PlannedSource]) -> EmbeddedBatch:
        """The plan with the embeddings already stored for its chunks (re-chunked unchanged text)."""
        return keep_stored_embeddings(plan, self._stored_embeddings)

    def _stored_embeddings(self, keys: list[str]) -> dict[str, bytes]:
        with self.db.read() as conn:
            return stores.stored_embeddings(conn, keys)

    def _encode(self, embedded: EmbeddedBatch) -> EmbeddedBatch:
        """Embed the chunks not reused. A model call: no lock or transaction is held, no database used."""
        chunks = [chunk for item in embedded.plan for chunk in item.chunks if chunk.key not in embedded.reused]
        if chunks:
            fresh = self.embedder.embed_documents([chunk.text for chunk in chunks])
            embedded.width = int(fresh.shape[1])
            embedded.fresh = dict(zip([chunk.key for chunk in chunks], fresh, strict=True))
        crash_point("batch:embedded")
        return embedded

    def _commit(self, embedded: EmbeddedBatch, report: BatchReport, *, grow_graph: bool = False) -> None:
        """One transaction: the plan's memories whose pending entry is unchanged get their derived rows
        replaced (or removed), then the keyword rows of their neighbours are brought up to date."""
        with self.db.write() as conn:
            state = IndexState.read(conn)
            if state.signature != self.signature:
                return  # reset by another process meanwhile; the next batch starts over
            width = embedded.width if embedded.width is not None else state.dimensions
            if state.dimensions is None:
                update_state(conn, dimensions=width)
            elif width != state.dimensions:
                raise EmbeddingUnavailable(
                    f"the embedding model returned {width}-dimensional vectors; the index holds "
                    f"{state.dimensions}-dimensional ones"
                )
            _, version = bump_version(conn)
            # A few statements per batch rather than per memory: the indexing thread shares the cores with
            # the model, so every statement it saves is time the model gets (docs/benchmarks.md).
            rows = json.dumps([item.memory_row for item in embedded.plan])
            changes = {int(row): change for row, change in conn.execute(_PENDING_CHANGES, (rows,))}
            current = [item for item in embedded.plan if changes.get(item.memory_row, _GONE) == item.change]
            indexed_before = {row for (row,) in conn.execute(_INDEXED_AMONG, (rows,))}
            for item in current:
                if item.memory_row in indexed_before:
                    stores.remove_chunks(conn, item.memory_row, version, self.keywords)
            written = [(item, item.memory) for item in current if item.memory is not None]
            conn.executemany(
                "INSERT INTO semantic_sources(memory_row, memory_id, content_hash, chunk_count) VALUES (?, ?, ?, ?)",
                [(item.memory_row, memory[0], content_hash(memory[1]), len(item.chunks)) for item, memory in written],
            )
            chunks: dict[int, list[tuple[int, str]]] = {}  # memory row -> its new chunks' (label, text)
            embeddings: list[tuple[int, bytes]] = []  # (label, float32 bytes)
            for item, (_, _, date, session_id) in written:
                chunks[item.memory_row] = labelled = []
                for chunk in item.chunks:
                    if chunk.key in embedded.reused:
                        blob = embedded.reused[chunk.key]
                        report.chunks_reused += 1
                    else:
                        blob = np.ascontiguousarray(embedded.fresh[chunk.key], dtype=np.float32).tobytes()
                        report.chunks_embedded += 1
                    label = stores.insert_chunk_row(
                        conn,
                        key=chunk.key,
                        memory_row=item.memory_row,
                        position=chunk.position,
                        date=date,
                        session_id=session_id,
                        text=chunk.text,
                    )
                    labelled.append((label, chunk.text))
                    embeddings.append((label, blob))
            stores.insert_vectors(conn, embeddings)
            processed = [item.memory_row for item in current]
            conn.executemany("DELETE FROM semantic_pending WHERE memory_row = ?", [(row,) for row in processed])
            report.memories += len(processed)
            report.neighbours_rewritten += self.keywords.sync(conn, processed, chunks)
            crash_point("batch:written")
        crash_point("batch:committed")
        if self._vectors is not None or grow_graph:
            vectors = self.vectors()  # apply the commit to the in-memory vectors (and graph) now
            if grow_graph and vectors is not None and vectors.graph is None and vectors.live:
                index = self.settings.index
                vectors.build_graph(m=index.hnsw_m, ef_construction=index.hnsw_ef_construction, threads=1)

    # -- in-memory vectors and the graph file ----------------------------------------------------

    def vectors(self, *, wait: float = 30.0) -> VectorSet | None:
        """The vectors as committed now (loaded on first use); None while the index is incompatible."""
        if not self._load_lock.acquire(timeout=wait):
            raise IndexBusy("the semantic index is being loaded; try again shortly")
        try:
            with self.db.read() as conn:
                state = IndexState.read(conn)
                if not state.compatible_with(self.signature, self.keyword_signature):
                    return None
                current = self._vectors
                try:
                    if current is not None and current.refresh(conn, state):
                        return current
                    loaded = read_vector_set(conn, state, ef_search=self.settings.index.hnsw_ef_search)
                except DamagedVectors as damage:
                    problem = str(damage)
                    loaded = None
                else:
                    problem = None
            if problem is not None:
                self._reset_damaged(problem)
                return None
            if loaded is not None:
                self._attach_file_graph(loaded)
            self._vectors = loaded
            return loaded
        finally:
            self._load_lock.release()

    def _reset_damaged(self, problem: str) -> None:
        """Stored vectors that do not fit the state (a cut or retyped blob, edited dimensions): derived data
        like any other, so it is dropped and every source queued again, as for changed settings; searches
        answer ``index_building`` until a batch has rebuilt it (called holding the load lock)."""
        with self.db.write() as conn:
            self._reset_derived(conn)
        with self.files.locked():  # the graph files go as in _forget_derived (which takes the load lock we hold)
            self.files.remove_strays(keep=None)
        self._vectors = None
        self._damage_resets += 1
        self.last_rebuild = {"reason": "the stored vectors were damaged", "at": now_iso()}
        log.warning("project %s: %s; the semantic index was reset and is rebuilt from the memories", self.name, problem)

    def _attach_file_graph(self, vectors: VectorSet) -> None:
        with self.files.locked(blocking=False) as free:
            if not free:
                return  # a publish is running; the graph comes with the next maintenance
            state = self.state()
            if state.dirty:
                self._report_graph_problem(state, "unfinished")
                return  # maintenance repairs it
            graph = self.files.load(state, max_elements=vectors.live + 1024, ef=self.settings.index.hnsw_ef_search)
            if graph is not None:
                vectors.attach_graph(graph)
            elif state.hnsw_file is not None:
                self._report_graph_problem(state, self.files.problem(state) or "damaged")

    def maintain(self) -> None:
        """Repair a dirty or damaged graph file, build the graph if missing, publish if enough changed."""
        vectors = self.vectors()
        if vectors is None:
            return
        with self.files.locked(blocking=False) as free:
            if not free:
                return
            state = self.state()
            # Dirty after our own failed publish: the file was never written whole, but the graph in memory is
            # (publishing reads it, never changes it), so it is published again without a rebuild.
            republish = state.dirty and vectors.graph is not None and vectors.graph is self._unpublished
            if state.dirty or (state.hnsw_file is not None and self.files.verified_path(state) is None):
                if not republish:
                    problem = "unfinished" if state.dirty else (self.files.problem(state) or "damaged")
                    self._report_graph_problem(state, problem)
                with self.db.write() as conn:
                    update_state(
                        conn,
                        hnsw_file=None,
                        hnsw_bytes=None,
                        hnsw_checksum=None,
                        hnsw_version=None,
                        hnsw_count=None,
                        dirty=0,
                    )
                self.files.remove_strays(keep=None)  # the old file is never loaded while dirty: free its space
                if not republish:
                    with vectors.lock:
                        vectors.graph = None
                state = self.state()
            else:
                self.files.remove_strays(keep=state.hnsw_file)
            if vectors.live == 0:
                return
            rebuilt = False
            self._rebuilding = state.hnsw_file is None and self._reported is not None
            try:
                if vectors.needs_graph_rebuild():
                    index = self.settings.index
                    vectors.build_graph(m=index.hnsw_m, ef_construction=index.hnsw_ef_construction)
                    rebuilt = True
                if (
                    rebuilt
                    or state.hnsw_file is None
                    or vectors.changes_since_publish >= self.settings.index.publish_min_changes
                ):
                    self.publish(vectors)
            finally:
                self._rebuilding = False

    def publish(self, vectors: VectorSet) -> None:
        """Write the graph file now (caller holds the file lock)."""
        with vectors.lock:
            if vectors.graph is None:
                return
            try:
                self.files.publish(self.db, vectors.graph, version=vectors.version)
            except BaseException as failure:
                self._unpublished = vectors.graph  # the state stays dirty; see maintain
                # What status names, so an operator knows what to fix (free disk space for storage_full).
                self._unsaved_error = failure.code if isinstance(failure, ObsmemError) else StorageError.code
                raise
            self._unpublished = self._unsaved_error = None
            vectors.changes_since_publish = 0

    def close(self) -> None:
        with self._load_lock:
            self._vectors = None
