"""One project's semantic index: incremental batches, compatibility, the in-memory vectors, the graph file.

:meth:`ProjectIndex.run_batch` is the single entry point for indexing work — the background thread,
``obsmem index`` and (later) a durable job queue all call it. One batch:

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

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from obsmem.indexer import stores
from obsmem.indexer.chunker import Chunk, ChunkSettings, chunk_text
from obsmem.indexer.embedders import Embedder
from obsmem.indexer.hnsw_file import IndexFiles
from obsmem.indexer.state import IndexState, bump_version, index_signature, update_state
from obsmem.indexer.vectors import VectorSet, read_vector_set

from obsmem.errors import EmbeddingUnavailable, IndexBusy
from obsmem.faults import crash_point
from obsmem.settings_semantic import SemanticSettings
from obsmem.storage.connection import ProjectDatabase

log = logging.getLogger("obsmem.indexer")

INDEX_DIRECTORY = "semantic"
INDEXING_LOCK = ".indexing.lock"


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


@dataclass
class BatchReport:
    memories: int = 0  # memories whose derived rows were written or removed
    chunks_embedded: int = 0  # chunks sent to the model
    chunks_reused: int = 0  # chunks whose stored embedding was kept
    remaining: int = 0  # memories still pending after the batch
    busy: bool = False  # another indexer holds this project
    reset: bool = False  # the derived data was dropped (settings changed)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class _Planned:
    memory_row: int
    change: int
    memory: tuple[str, str, str, str] | None  # memory_id, content, date, session_id; None if deleted
    chunks: list[Chunk] = field(default_factory=list)


class ProjectIndex:
    def __init__(self, name: str, db: ProjectDatabase, settings: SemanticSettings, embedder: Embedder) -> None:
        self.name = name
        self.db = db
        self.settings = settings
        self.embedder = embedder
        self.chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
        self.signature = index_signature(embedder.identity, self.chunking)
        self.tokenizer = settings.bm25.tokenizer
        self.files = IndexFiles(Path(db.path).parent / INDEX_DIRECTORY)
        self._vectors: VectorSet | None = None
        self._load_lock = threading.Lock()
        self._batch_lock = threading.Lock()

    # -- state ----------------------------------------------------------------------------------

    def state(self) -> IndexState:
        with self.db.read() as conn:
            return IndexState.read(conn)

    def ensure_compatible(self) -> bool:
        """Reset derived data if the signature changed; rebuild the keyword table if its tokenizer did."""
        state = self.state()
        if state.compatible_with(self.signature, self.tokenizer):
            return False
        reset = False
        with self.db.write() as conn:
            state = IndexState.read(conn)
            if state.signature != self.signature:
                stores.reset_derived(conn, self.signature, self.tokenizer)
                reset = True
            elif state.fts_tokenizer != self.tokenizer:
                stores.create_fts(conn, self.tokenizer)
        if reset:
            log.info("project %s: index settings changed; rebuilding derived data", self.name)
            with self.files.locked():
                self.files.remove_strays(keep=None)
            with self._load_lock:
                self._vectors = None
        return reset

    def pending_count(self) -> int:
        return int(self.db.query("SELECT count(*) FROM semantic_pending")[0][0])

    def status(self) -> dict[str, Any]:
        with self.db.read() as conn:
            state = IndexState.read(conn)
            compatible = state.compatible_with(self.signature, self.tokenizer)
            sources = stores.source_count(conn)
            indexed = stores.indexed_count(conn) if compatible else 0
            pending = conn.execute("SELECT count(*) FROM semantic_pending").fetchone()[0]
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
            "graph_file": state.hnsw_file is not None,
        }

    # -- indexing -------------------------------------------------------------------------------

    def run_batch(self, max_chunks: int | None = None) -> BatchReport:
        """Index one bounded batch of pending memories. Raises EmbeddingUnavailable (nothing stored)."""
        if not self._batch_lock.acquire(blocking=False):
            return BatchReport(busy=True)
        try:
            with self.files.locked(INDEXING_LOCK, blocking=False) as free:
                if not free:
                    return BatchReport(busy=True)
                report = BatchReport(reset=self.ensure_compatible())
                self._index_batch(report, max_chunks or self.settings.index.batch_chunks)
                report.remaining = self.pending_count()
                return report
        finally:
            self._batch_lock.release()

    def _plan(self, budget: int) -> list[_Planned]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT p.memory_row, p.change, m.memory_id, m.content, m.date, m.session_id"
                " FROM semantic_pending AS p LEFT JOIN memories AS m ON m.id = p.memory_row"
                " ORDER BY p.memory_row LIMIT ?",
                (budget,),
            ).fetchall()
        plan: list[_Planned] = []
        chunk_total = 0
        for memory_row, change, memory_id, content, date, session_id in rows:
            item = _Planned(memory_row, change, None)
            if memory_id is not None:
                item.memory = (memory_id, content, date, session_id)
                item.chunks = chunk_text(memory_id, content, self.chunking)
            if plan and chunk_total + len(item.chunks) > budget:
                break
            plan.append(item)
            chunk_total += len(item.chunks)
        return plan

    def _index_batch(self, report: BatchReport, budget: int) -> None:
        plan = self._plan(budget)
        crash_point("batch:read")
        if not plan:
            return
        keys = [chunk.key for item in plan for chunk in item.chunks]
        with self.db.read() as conn:
            reused = stores.stored_embeddings(conn, keys)
        texts = [chunk.text for item in plan for chunk in item.chunks if chunk.key not in reused]
        fresh = self.embedder.embed_documents(texts) if texts else None
        crash_point("batch:embedded")
        fresh_by_key: dict[str, np.ndarray] = {}
        if fresh is not None:
            new_keys = [chunk.key for item in plan for chunk in item.chunks if chunk.key not in reused]
            fresh_by_key = dict(zip(new_keys, fresh, strict=True))
        with self.db.write() as conn:
            state = IndexState.read(conn)
            if state.signature != self.signature:
                return  # reset by another process meanwhile; the next batch starts over
            width = fresh.shape[1] if fresh is not None else state.dimensions
            if state.dimensions is None:
                update_state(conn, dimensions=width)
            elif width != state.dimensions:
                raise EmbeddingUnavailable(
                    f"the embedding model returned {width}-dimensional vectors; the index holds "
                    f"{state.dimensions}-dimensional ones"
                )
            _, version = bump_version(conn)
            for item in plan:
                current = conn.execute(
                    "SELECT change FROM semantic_pending WHERE memory_row = ?", (item.memory_row,)
                ).fetchone()
                if current is None or current[0] != item.change:
                    continue  # changed again (or done by another indexer): a later batch takes it
                stores.remove_chunks(conn, item.memory_row, version)
                if item.memory is not None:
                    memory_id, content, date, session_id = item.memory
                    conn.execute(
                        "INSERT INTO semantic_sources(memory_row, memory_id, content_hash, chunk_count)"
                        " VALUES (?, ?, ?, ?)",
                        (item.memory_row, memory_id, content_hash(content), len(item.chunks)),
                    )
                    for chunk in item.chunks:
                        if chunk.key in reused:
                            vector = np.frombuffer(reused[chunk.key], dtype=np.float32)
                            report.chunks_reused += 1
                        else:
                            vector = fresh_by_key[chunk.key]
                            report.chunks_embedded += 1
                        stores.insert_chunk(
                            conn,
                            key=chunk.key,
                            memory_row=item.memory_row,
                            position=chunk.position,
                            date=date,
                            session_id=session_id,
                            text=chunk.text,
                            vector=vector,
                        )
                conn.execute("DELETE FROM semantic_pending WHERE memory_row = ?", (item.memory_row,))
                report.memories += 1
            crash_point("batch:written")
        crash_point("batch:committed")
        if self._vectors is not None:
            self.vectors()  # apply the commit to the in-memory vectors now

    # -- in-memory vectors and the graph file ----------------------------------------------------

    def vectors(self, *, wait: float = 30.0) -> VectorSet | None:
        """The vectors as committed now (loaded on first use); None while the index is incompatible."""
        if not self._load_lock.acquire(timeout=wait):
            raise IndexBusy("the semantic index is being loaded; try again shortly")
        try:
            with self.db.read() as conn:
                state = IndexState.read(conn)
                if not state.compatible_with(self.signature, self.tokenizer):
                    return None
                current = self._vectors
                if current is not None and current.refresh(conn, state):
                    return current
                loaded = read_vector_set(conn, state, ef_search=self.settings.index.hnsw_ef_search)
            if loaded is not None:
                self._attach_file_graph(loaded)
            self._vectors = loaded
            return loaded
        finally:
            self._load_lock.release()

    def _attach_file_graph(self, vectors: VectorSet) -> None:
        with self.files.locked(blocking=False) as free:
            if not free:
                return  # a publish is running; the graph comes with the next maintenance
            state = self.state()
            if state.dirty:
                return  # maintenance repairs it
            graph = self.files.load(state, max_elements=vectors.live + 1024, ef=self.settings.index.hnsw_ef_search)
            if graph is not None:
                vectors.attach_graph(graph)

    def maintain(self) -> None:
        """Repair a dirty or damaged graph file, build the graph if missing, publish if enough changed."""
        vectors = self.vectors()
        if vectors is None:
            return
        with self.files.locked(blocking=False) as free:
            if not free:
                return
            state = self.state()
            if state.dirty or (state.hnsw_file is not None and self.files.verified_path(state) is None):
                log.warning(
                    "project %s: index file unfinished or damaged; rebuilding it from stored embeddings",
                    self.name,
                )
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
                self.files.remove_strays(keep=None)
                with vectors.lock:
                    vectors.graph = None
                state = self.state()
            else:
                self.files.remove_strays(keep=state.hnsw_file)
            if vectors.live == 0:
                return
            rebuilt = False
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

    def publish(self, vectors: VectorSet) -> None:
        """Write the graph file now (caller holds the file lock)."""
        with vectors.lock:
            if vectors.graph is None:
                return
            self.files.publish(self.db, vectors.graph, version=vectors.version)
            vectors.changes_since_publish = 0

    def close(self) -> None:
        with self._load_lock:
            self._vectors = None
