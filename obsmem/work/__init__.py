"""Background work: the durable job queue, the worker pool that runs it, and the event log of what it did.

This is the one home of the pipeline's background work (observation, reflection, housekeeping):

- :mod:`~obsmem.work.queue`: :class:`JobQueue`, one per project database. Leases, fencing, retries with
  backoff, dedupe, and exactly one ``job_failed`` event for a job that gives up. It also answers the
  pipeline's bookkeeping reads (is a job queued or in flight for an order key, how many), so no other
  module names the ``jobs`` table and a second backend replaces one module.
- :mod:`~obsmem.work.pool`: :class:`WorkerPool`, the threads that claim jobs from every project's queue
  and run their handlers, plus the housekeeping schedule. It knows no job kind: the app floor hands it the
  pipeline's handlers and housekeeping tasks.
- :mod:`~obsmem.work.eventlog`: the append-only ``om_events`` table that status views and event streams
  read, through its functions only (the last failure of a job kind, a session's newest event of some types).

Semantic indexing does not run here: the indexer keeps its own scheduler
(:class:`obsmem.indexer.scheduler.IndexBatchScheduler`) over its own durable queue, the ``semantic_pending``
table (docs/architecture.md, "Who runs background work", says why).

This package is part of the base: it imports no stage, no app floor and no surface.
"""

from obsmem.work import eventlog
from obsmem.work.eventlog import LOGGED_EVENTS, MAX_EVENT_ID, PIPELINE_EVENTS
from obsmem.work.pool import Handler, HousekeepingTask, JobContext, WorkerPool
from obsmem.work.queue import EnqueueResult, JobQueue, Lease, LeaseLost, backoff_seconds, sanitise_reason

__all__ = [
    "LOGGED_EVENTS",
    "MAX_EVENT_ID",
    "PIPELINE_EVENTS",
    "EnqueueResult",
    "Handler",
    "HousekeepingTask",
    "JobContext",
    "JobQueue",
    "Lease",
    "LeaseLost",
    "WorkerPool",
    "backoff_seconds",
    "eventlog",
    "sanitise_reason",
]
