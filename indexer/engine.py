"""Semantic indexing for every project of a data directory: one embedder, one index per project."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from obsmem.indexer.embedders import Embedder, make_embedder
from obsmem.indexer.project import BatchReport, ProjectIndex
from obsmem.indexer.scheduler import IndexBatchScheduler
from obsmem.indexer.sources import UNMARKED_EVENTS
from obsmem.projects import ProjectRegistry
from obsmem.settings import SemanticSettings

ANY_SOURCE_PENDING = "SELECT EXISTS (SELECT 1 FROM semantic_pending)"
ANY_MEMORY_PENDING = "SELECT EXISTS (SELECT 1 FROM semantic_pending WHERE memory_row > 0)"

log = logging.getLogger("obsmem.indexer")


def pin_math_threads(threads: int = 1) -> None:
    """Pin BLAS to ``threads`` for single-query work (a 10k-vector scan: 12 ms default, <1 ms pinned)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")
    except Exception:  # threadpoolctl missing or no BLAS found: keep the defaults
        pass


class SemanticIndexer:
    def __init__(
        self, settings: SemanticSettings, projects: ProjectRegistry, *, embedder: Embedder | None = None
    ) -> None:
        self.settings = settings
        self.projects = projects
        self.embedder = embedder or make_embedder(settings.embedding)
        self._indexes: dict[str, ProjectIndex] = {}
        self._lock = threading.Lock()
        self._scheduler: IndexBatchScheduler | None = None
        pin_math_threads()

    def project(self, name: str) -> ProjectIndex:
        """The index of an existing project (``project_not_found`` otherwise)."""
        db = self.projects.get(name)
        with self._lock:
            index = self._indexes.get(name)
            if index is None or index.db is not db:
                index = self._indexes[name] = ProjectIndex(name, db, self.settings, self.embedder)
            return index

    # -- work -----------------------------------------------------------------------------------

    def run_batch(self, name: str, max_chunks: int | None = None) -> BatchReport:
        return self.project(name).run_batch(max_chunks)

    def backfill(
        self, name: str, progress: Callable[[BatchReport], None] | None = None, *, every_core: bool = False
    ) -> dict[str, Any]:
        """Index everything pending now, in the foreground, then build and publish the graph.

        ``every_core``: nothing else in this process needs a core (a one-shot ``obsmem index``), so the
        model may use them all; a serving process keeps one for queries."""
        index = self.project(name)
        with self.embedder.every_core() if every_core and self._scheduler is None else contextlib.nullcontext():
            total = index.backfill(progress)
        index.maintain()
        return total.to_dict() | index.status()

    def is_indexing(self, name: str) -> bool:
        """Is anyone indexing ``name`` now: this process's background indexer, or another process holding
        the project's indexing lock (a server's or worker's batch, or ``obsmem index``)?"""
        return self._scheduler is not None or self.project(name).indexing_elsewhere()

    # -- background: the indexer's own scheduler ------------------------------------------------

    def start_background(self) -> None:
        """Start this process's :class:`IndexBatchScheduler` (unless ``semantic.index.background`` is off)."""
        if self._scheduler is not None or not self.settings.index.background:
            return
        self._scheduler = IndexBatchScheduler(
            self._scheduled_batch,
            lambda name: self.project(name).maintain(),
            self._discover,
            poll_seconds=self.settings.index.poll_seconds,
        )
        self._scheduler.start()
        for name in self.projects.names():
            self._scheduler.notify(name)

    def _scheduled_batch(self, name: str) -> int | None:
        report = self.run_batch(name)
        return None if report.busy else report.remaining

    def _discover(self) -> list[str]:
        found = []
        for name in self.projects.names():
            try:
                db = self.projects.get(name)
                # With events not indexed, an edited or deleted event's marker (negative row) is never
                # consumed: only the memories' markers are work, or the project would get an empty batch
                # every poll.
                pending = ANY_SOURCE_PENDING if self.settings.index.events else ANY_MEMORY_PENDING
                if db.query(pending)[0][0] or (self.settings.index.events and db.query(UNMARKED_EVENTS)[0][0]):
                    found.append(name)
            except Exception:  # an unreadable project is reported when used, not here
                continue
        return found

    def notify(self, name: str) -> None:
        if self._scheduler is not None:
            self._scheduler.notify(name)

    def release(self, name: str) -> None:
        """Drop one project's in-memory index (vectors, graph); it loads again on its next use."""
        with self._lock:
            index = self._indexes.pop(name, None)
        if index is not None:
            index.close()

    def close(self) -> None:
        if self._scheduler is not None:
            self._scheduler.stop()
            self._scheduler = None
        with self._lock:
            for index in self._indexes.values():
                index.close()
            self._indexes.clear()
        self.embedder.close()
