"""Workers: threads that claim jobs from every project's queue and run their handlers.

The same pool runs inside ``obsmem serve`` and as ``obsmem worker`` (any number of processes may run
against one data directory; the database arbitrates). Its handlers and housekeeping tasks come from the
pipeline (observe and reflect jobs; clearing stale activity rows and resuming sessions left over a
threshold) and are wired in by the app floor, so this module knows nothing about what a job does. The
indexer registers nothing here: it runs its batches on its own scheduler
(:class:`obsmem.indexer.scheduler.IndexBatchScheduler`).

While a handler runs, a heartbeat thread renews its lease every third of the lease time. If a renewal
fails the lease is lost: :attr:`JobContext.lost` is set and the handler's next fenced commit raises
:class:`~obsmem.work.queue.LeaseLost`, so its work is rolled back and left to whoever holds the job now.

Housekeeping runs on an APScheduler interval: reap expired leases, prune old finished jobs, then each
registered task.

Durability: the connections of worker, heartbeat and housekeeping threads commit with
``synchronous=NORMAL`` (no fsync per commit), while appends keep ``FULL``. Everything a worker writes can
be derived again: in WAL mode a commit lost to a power cut is lost whole (observations together with their
coverage rows, a job's state change with its event), so the work is simply done again, and the next FULL
commit of an append flushes the worker's earlier commits with it. What this buys is short worker write
transactions: an append that has to wait for one waits microseconds instead of a disk flush.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import apsw

from obsmem.errors import ObsmemError
from obsmem.projects import ProjectRegistry
from obsmem.settings import JobSettings
from obsmem.storage import ProjectDatabase, sql_dialect
from obsmem.work.queue import JobQueue, Lease, LeaseLost, sanitise_reason

log = logging.getLogger(__name__)


@dataclass
class JobContext:
    """What a handler gets: the job, its project's database and queue, and the lease state."""

    project: str
    db: ProjectDatabase
    queue: JobQueue
    lease: Lease
    lost: threading.Event = field(default_factory=threading.Event)

    @contextlib.contextmanager
    def fenced_write(self) -> Iterator[apsw.Connection]:
        """A write transaction that commits only while this worker still holds the job."""
        with self.db.write() as conn:
            self.queue.check_fence(conn, self.lease)
            yield conn

    def raise_if_lost(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"job {self.lease.job_id} lost its lease")


Handler = Callable[[JobContext], None]
HousekeepingTask = Callable[[str, ProjectDatabase], None]


def relax_durability(db: ProjectDatabase) -> None:
    """This thread's connection to ``db`` commits without an fsync (see the module docstring). On PostgreSQL
    connections are pooled and shared with appends, so every commit keeps the server's durability."""
    if sql_dialect(db) == "postgres":
        return
    db.connection().execute("PRAGMA synchronous=NORMAL")


class WorkerPool:
    """Job-running threads plus the housekeeping schedule, over all projects of one data directory."""

    def __init__(
        self,
        registry: ProjectRegistry,
        handlers: Mapping[str, Handler],
        settings: JobSettings,
        *,
        housekeeping: Sequence[HousekeepingTask] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.handlers = dict(handlers)
        self.settings = settings
        self.housekeeping_tasks = list(housekeeping)
        self.clock = clock
        self.owner_prefix = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._queues: dict[str, JobQueue] = {}
        self._queues_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._scheduler: object | None = None
        self._rotation = 0

    # -- queues --------------------------------------------------------------------------------

    def queue(self, project: str) -> JobQueue:
        with self._queues_lock:
            queue = self._queues.get(project)
            if queue is None:
                queue = JobQueue(
                    self.registry.get(project),
                    lease_seconds=self.settings.lease_seconds,
                    retry_backoff_seconds=self.settings.retry_backoff_seconds,
                    max_attempts=self.settings.max_retries + 1,
                    clock=self.clock,
                )
                self._queues[project] = queue
            return queue

    def _projects(self) -> list[str]:
        names = self.registry.names()
        if not names:
            return names
        self._rotation = (self._rotation + 1) % len(names)
        return names[self._rotation :] + names[: self._rotation]

    # -- running jobs --------------------------------------------------------------------------

    def run_next(self, owner: str | None = None) -> bool:
        """Claim and run one ready job from any project. Returns whether one ran."""
        owner = owner or f"{self.owner_prefix}:{threading.current_thread().name}"
        for project in self._projects():
            try:
                queue = self.queue(project)
                relax_durability(queue.db)
                if not queue.has_work(self.handlers):
                    continue
                lease = queue.claim(owner, self.handlers)
            except ObsmemError as exc:
                log.warning("cannot poll project %s: %s", project, exc.code)
                continue
            if lease is None:
                continue
            self._run(project, queue, lease)
            return True
        return False

    def _run(self, project: str, queue: JobQueue, lease: Lease) -> None:
        context = JobContext(project, queue.db, queue, lease)
        stop_heartbeat = threading.Event()
        heart = threading.Thread(
            target=self._heartbeat,
            args=(context, stop_heartbeat),
            name=f"heartbeat-{lease.job_id}",
            daemon=True,
        )
        heart.start()
        started = time.monotonic()
        try:
            self.handlers[lease.kind](context)
        except LeaseLost:
            log.warning("job %s (%s) lost its lease; its work was not committed", lease.job_id, lease.kind)
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded; KeyboardInterrupt re-raised
            reason = sanitise_reason(exc)
            outcome = queue.fail(lease, reason, retry=getattr(exc, "retryable", True))
            log.warning(
                "job %s (%s) attempt %d/%d failed: %s -> %s",
                lease.job_id,
                lease.kind,
                lease.attempt,
                lease.max_attempts,
                reason,
                outcome,
            )
            if not isinstance(exc, Exception):
                raise
        else:
            if not queue.complete(lease):
                log.warning("job %s (%s) finished after losing its lease", lease.job_id, lease.kind)
            else:
                log.info("job %s (%s) done in %d ms", lease.job_id, lease.kind, (time.monotonic() - started) * 1000)
        finally:
            stop_heartbeat.set()
            heart.join(timeout=5)

    def _heartbeat(self, context: JobContext, stop: threading.Event) -> None:
        interval = max(0.05, self.settings.lease_seconds / 3)
        lease = context.lease
        relax_durability(context.db)
        while not stop.wait(interval):
            try:
                renewed = context.queue.heartbeat(lease)
            except Exception as exc:  # noqa: BLE001 - a failed renewal is retried until the lease runs out
                log.warning("heartbeat of job %s failed: %s", lease.job_id, type(exc).__name__)
                if self.clock() >= lease.expires:
                    context.lost.set()
                    return
                continue
            if renewed is None:
                context.lost.set()
                return
            lease = renewed

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, *, threads: int | None = None, housekeeping: bool = True) -> None:
        if self._threads:
            return
        self._stop.clear()
        for number in range(threads or self.settings.worker_threads):
            thread = threading.Thread(target=self._loop, name=f"obsmem-worker-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if housekeeping:
            self._start_scheduler()

    def run_until(self, stop: threading.Event, *, threads: int | None = None, grace_seconds: float = 30.0) -> None:
        """Run jobs and housekeeping until ``stop`` is set, then stop claiming and wait for running jobs.

        A job still running after ``grace_seconds`` is left to its lease, which expires and hands it to
        another worker. The wait wakes every second so that a signal handler on the calling thread runs.
        """
        self.start(threads=threads)
        try:
            while not stop.wait(1.0):
                pass
        finally:
            log.info("worker stopping: running jobs have %.0f s to finish", grace_seconds)
            self.stop(timeout=grace_seconds)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                ran = self.run_next()
            except Exception as exc:  # noqa: BLE001 - a broken poll must not kill the worker thread
                log.error("worker loop error: %s", type(exc).__name__)
                ran = False
            if not ran:
                self._wake.wait(self.settings.poll_seconds)

    def wake(self) -> None:
        """New work was queued in this process: poll now rather than at the next interval."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.shutdown(wait=False)  # type: ignore[attr-defined]
            self._scheduler = None
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads = []

    @property
    def running(self) -> bool:
        return bool(self._threads)

    # -- housekeeping --------------------------------------------------------------------------

    def _start_scheduler(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(daemon=True, job_defaults={"coalesce": True, "max_instances": 1})
        scheduler.add_job(
            self.housekeep,
            "interval",
            seconds=self.settings.housekeeping_seconds,
            id="obsmem-housekeeping",
        )
        scheduler.start()
        self._scheduler = scheduler
        # The first pass runs at once (crash leftovers from before this start), off the caller's thread.
        threading.Thread(target=self.housekeep, name="obsmem-housekeeping-first", daemon=True).start()

    def housekeep(self) -> None:
        """One housekeeping pass over every project. Never raises."""
        for project in self.registry.names():
            try:
                queue = self.queue(project)
                relax_durability(queue.db)
                reaped = queue.reap_expired()
                if reaped:
                    log.info("project %s: %d expired job lease(s) reaped", project, reaped)
                queue.prune_finished(self.settings.keep_finished_days * 86400)
            except Exception as exc:  # noqa: BLE001
                log.warning("housekeeping of project %s failed: %s", project, type(exc).__name__)
                continue
            for task in self.housekeeping_tasks:
                try:
                    task(project, queue.db)
                except Exception as exc:  # noqa: BLE001
                    log.warning(
                        "housekeeping task %s on %s failed: %s",
                        getattr(task, "__name__", task),
                        project,
                        type(exc).__name__,
                    )
        self.wake()

    # -- tests and one-shot runs ---------------------------------------------------------------

    def drain(self, timeout: float = 30.0, *, project: str | None = None) -> bool:
        """Run jobs in this thread until no job is queued or running (delayed retries included)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.run_next():
                continue
            names = [project] if project else self.registry.names()
            busy = False
            for name in names:
                counts = self.queue(name).counts()
                if counts["queued"] or counts["running"]:
                    busy = True
            if not busy:
                return True
            time.sleep(0.02)
        return False
