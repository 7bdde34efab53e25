"""The indexer's own scheduler: one thread per process that decides when each project's next index batch runs.

It runs :meth:`ProjectIndex.run_batch` for projects that have work — after the service's own writes
(:meth:`IndexBatchScheduler.notify`), for every project at start-up, and for writes made by other
processes, which it finds by polling each project's pending queue every ``poll_seconds``. When a project
has no more pending work it gets maintenance (graph build, repair or publish). A failing embedding
endpoint is retried with exponential backoff (up to a minute) rather than hammered; the failure is
logged with its stage, never with memory text. Failed maintenance (a graph file that cannot be published
on a full disk) backs off the same way, counted apart from the batches: a batch that succeeds says
nothing about the disk. New writes waking a project bring neither forward: a write every second would
otherwise retry a failing endpoint (or log an index of other settings) every second.

This is a second scheduler beside the job queue's worker pool (:mod:`obsmem.work`), on purpose:

- its durable queue already exists: ``semantic_pending``, filled by triggers on ``memories`` inside the
  writer's own transaction, so a job row per write would only repeat it;
- indexing never gives up: pending memories stay pending, and a failing endpoint is retried for as long
  as it fails, where a job is marked failed after its last attempt;
- a batch updates the in-memory vectors of the process that runs it, so searches in the serving process
  see new memories without reloading them;
- the project's indexing lock file, not a lease, keeps two processes from indexing one project at once;
  the loser hears ``busy`` and polls again later.

It holds no durable state of its own: stopping it (or the process) loses nothing, and the next start
resumes from ``semantic_pending``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from obsmem.errors import ObsmemError

log = logging.getLogger("obsmem.indexer")

MAX_BACKOFF_SECONDS = 60.0


class IndexBatchScheduler:
    def __init__(
        self,
        run_batch: Callable[[str], int | None],
        maintain: Callable[[str], None],
        discover: Callable[[], list[str]],
        *,
        poll_seconds: float,
    ) -> None:
        """``run_batch(name)`` returns the pending count left (None if busy); ``discover()`` lists
        projects that may have pending work."""
        self._run_batch = run_batch
        self._maintain = maintain
        self._discover = discover
        self.poll_seconds = poll_seconds
        self._wanted: dict[str, float] = {}  # project -> earliest time to work on it
        self._cond = threading.Condition()
        self._stop = False
        self._failures: dict[str, int] = {}  # project -> batches failed in a row
        self._maintenance_failures: dict[str, int] = {}  # project -> maintenance runs failed in a row
        self._batch_after: dict[str, float] = {}  # project -> earliest time of its next batch, after a failure
        self._maintain_after: dict[str, float] = {}  # project -> earliest time of its next maintenance
        self._thread = threading.Thread(target=self._loop, name="obsmem-indexer", daemon=True)
        self.idle = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def notify(self, project: str) -> None:
        with self._cond:
            self._wanted[project] = min(self._wanted.get(project, 0.0), time.monotonic())
            self.idle.clear()
            self._cond.notify()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _next(self) -> str | None:
        with self._cond:
            next_poll = time.monotonic()
            while not self._stop:
                now = time.monotonic()
                ready = [name for name, at in self._wanted.items() if at <= now]
                if ready:
                    name = min(ready, key=lambda n: self._wanted[n])
                    del self._wanted[name]
                    return name
                if now >= next_poll:
                    self._cond.release()
                    try:
                        discovered = self._discover()
                    except Exception:  # a broken project must not stop the thread
                        log.exception("listing projects with pending index work failed")
                        discovered = []
                    finally:
                        self._cond.acquire()
                    for found in discovered:
                        self._wanted.setdefault(found, now)
                    next_poll = now + self.poll_seconds
                    if discovered:
                        continue
                if not self._wanted:
                    self.idle.set()
                wake = min([next_poll, *self._wanted.values()])
                self._cond.wait(max(0.0, wake - time.monotonic()))
            return None

    def _loop(self) -> None:
        while (name := self._next()) is not None:
            wait = self._batch_after.get(name, 0.0) - time.monotonic()
            if wait > 0:  # its last batch failed: it waits out its backoff, whoever woke the project
                self._later(name, wait)
                continue
            try:
                remaining = self._run_batch(name)
            except Exception as exc:
                delay = self._back_off(name, self._failures, exc, "indexing project")
                self._batch_after[name] = time.monotonic() + delay
                continue
            if remaining is None:  # another indexer holds the project
                self._later(name, self.poll_seconds)
                continue
            self._failures.pop(name, None)
            self._batch_after.pop(name, None)
            if remaining > 0:
                self._later(name, 0.0)
            else:
                self._maintain_when_due(name)

    def _maintain_when_due(self, name: str) -> None:
        wait = self._maintain_after.get(name, 0.0) - time.monotonic()
        if wait > 0:  # maintenance failed lately: it waits out its backoff, whoever woke the project
            self._later(name, wait)
            return
        try:
            self._maintain(name)
        except Exception as exc:
            delay = self._back_off(name, self._maintenance_failures, exc, "maintaining the semantic index of project")
            self._maintain_after[name] = time.monotonic() + delay
        else:
            self._maintenance_failures.pop(name, None)
            self._maintain_after.pop(name, None)

    def _back_off(self, name: str, failures: dict[str, int], exc: Exception, what: str) -> float:
        """Count one more failure in a row of ``name`` in ``failures``, log it and retry after a delay that
        doubles with each (2 s up to a minute); returns the delay. Called while ``exc`` is being handled."""
        count = failures[name] = failures.get(name, 0) + 1
        delay = min(MAX_BACKOFF_SECONDS, 2.0 ** min(count, 6))
        if isinstance(exc, ObsmemError):
            log.warning("%s %s failed: %s (retry in %.0f s)", what, name, exc.code, delay)
        else:
            log.exception("%s %s failed unexpectedly (retry in %.0f s)", what, name, delay)
        self._later(name, delay)
        return delay

    def _later(self, name: str, delay: float) -> None:
        with self._cond:
            at = time.monotonic() + delay
            self._wanted[name] = min(self._wanted.get(name, at), at)
            self._cond.notify()
