"""The durable job queue: background work that survives crashes, in the project database.

Delivery is at least once, so every handler must be idempotent (the Observer is: coverage rows say what
was already observed). The rules:

- **Claim** takes the oldest ready job whose ``order_key`` has no earlier unfinished job, sets a lease
  (owner, expiry) and increments ``fence``. Jobs of one session therefore run one at a time, in order.
- **Heartbeat** extends an unexpired lease. Once a lease has expired it cannot be renewed: the worker has
  lost the job and must stop.
- **Fencing**: a handler commits its results with :meth:`JobQueue.check_fence` inside the same write
  transaction, which requires ``state = 'running'``, the same ``fence`` and an unexpired lease. A worker
  that stalled past its lease (paused, swapped out, partitioned) can no longer commit anything, even if
  nobody has reclaimed the job yet.
- **Failure**: an attempt that raises, or whose lease expires (the worker died), is retried after an
  exponential backoff until ``max_attempts`` (3 retries = 4 attempts by default); the transition to
  ``failed`` writes exactly one ``job_failed`` event in the same transaction, with a sanitised reason.
- **Dedupe**: at most one *queued* job per ``dedupe_key``; enqueueing a duplicate returns the queued one.
  A job going back to the queue for a retry absorbs a newer queued duplicate (marked ``merged_into``), so
  its attempt count, and with it the eventual ``job_failed``, is never reset by new work arriving.

All times are Unix seconds from the queue's clock (``time.time`` unless a test passes another).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import now_iso
from obsmem.errors import ObsmemError
from obsmem.storage import ProjectDatabase, sql_dialect
from obsmem.work import eventlog

MAX_BACKOFF_SECONDS = 900.0
MAX_REASON_CHARS = 300
ACTIVE_STATES = ("queued", "running")


# Queued jobs that may run now: due, and first in line for their order key (no earlier unfinished job).
_READY_SQL = (
    "SELECT j.id FROM jobs AS j WHERE j.state = 'queued' AND j.run_after <= ? AND (j.order_key IS NULL OR"
    " NOT EXISTS (SELECT 1 FROM jobs AS o WHERE o.order_key = j.order_key AND o.id != j.id"
    "  AND (o.state = 'running' OR (o.state = 'queued' AND o.id < j.id))))"
)


class LeaseLost(ObsmemError):
    """The job's lease expired or was taken over; this worker must not commit."""

    code = "lease_lost"
    status = 409


def sanitise_reason(exc: BaseException) -> str:
    """A failure reason safe to store and show: a stable code and our own message, never foreign text.

    Our errors promise safe messages (no memory text, keys or response bodies); anything else is named
    by its type only, because its message may quote data.
    """
    reason = f"{exc.code}: {exc.message}" if isinstance(exc, ObsmemError) else f"internal_error: {type(exc).__name__}"
    return reason[:MAX_REASON_CHARS]


@dataclass(frozen=True)
class Lease:
    """One claim of one job. ``attempt`` counts from 1."""

    job_id: int
    kind: str
    payload: dict[str, Any]
    order_key: str | None
    attempt: int
    max_attempts: int
    fence: int
    owner: str
    expires: float

    @property
    def session_id(self) -> str | None:
        value = self.payload.get("session_id")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class EnqueueResult:
    job_id: int
    created: bool  # False: folded into a job with the same dedupe key that was already queued


def backoff_seconds(base: float, attempt: int) -> float:
    """Delay before retrying after failed attempt ``attempt`` (1-based): base, 2x base, 4x base, ..."""
    return min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1)))


class JobQueue:
    """The queue of one project database."""

    def __init__(
        self,
        db: ProjectDatabase,
        *,
        lease_seconds: float = 60.0,
        retry_backoff_seconds: float = 5.0,
        max_attempts: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.db = db
        self.lease_seconds = lease_seconds
        self.retry_backoff_seconds = retry_backoff_seconds
        self.max_attempts = max_attempts
        self.clock = clock

    # -- producing -----------------------------------------------------------------------------

    def enqueue(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        order_key: str | None = None,
        dedupe_key: str | None = None,
        delay: float = 0.0,
        conn: apsw.Connection | None = None,
    ) -> EnqueueResult:
        """Add a job; pass ``conn`` to make it part of a write transaction the caller holds."""
        if conn is not None:
            return self._enqueue(conn, kind, payload or {}, order_key, dedupe_key, delay)
        with self.db.write() as write_conn:
            return self._enqueue(write_conn, kind, payload or {}, order_key, dedupe_key, delay)

    def _enqueue(
        self,
        conn: apsw.Connection,
        kind: str,
        payload: dict[str, Any],
        order_key: str | None,
        dedupe_key: str | None,
        delay: float,
    ) -> EnqueueResult:
        now = now_iso()
        values = (
            kind,
            order_key,
            dedupe_key,
            json.dumps(payload, separators=(",", ":"), sort_keys=True),
            self.max_attempts,
            self.clock() + max(0.0, delay),
            now,
            now,
        )
        # Two rounds at most: on PostgreSQL a claim (which does not take the writer lock) may take the queued
        # duplicate between the conflict and the look-up; the insert then no longer conflicts.
        for _ in range(2):
            row = conn.execute(
                "INSERT INTO jobs(kind, order_key, dedupe_key, payload, max_attempts, run_after, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                values,
            ).fetchone()
            if row is not None:
                return EnqueueResult(int(row[0]), True)
            existing = conn.execute(
                "SELECT id FROM jobs WHERE dedupe_key = ? AND state = 'queued'", (dedupe_key,)
            ).fetchone()
            if existing is not None:
                return EnqueueResult(int(existing[0]), False)
        raise RuntimeError("a job with this dedupe key kept changing state while being enqueued")

    # -- consuming -----------------------------------------------------------------------------

    def has_work(self, kinds: Iterable[str] | None = None) -> bool:
        """A cheap read: is a job claimable now, or a lease expired? Lets idle polls skip the write lock."""
        now = self.clock()
        kind_sql, kind_params = _kind_filter(kinds, alias="j")
        row = (
            self.db.connection()
            .execute(
                f"SELECT EXISTS ({_READY_SQL}{kind_sql})"
                " OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires <= ?)",
                (now, *kind_params, now),
            )
            .fetchone()
        )
        return bool(row[0])

    def claim(self, owner: str, kinds: Iterable[str] | None = None) -> Lease | None:
        """Lease the next ready job, or return None. Expired leases are reaped first."""
        kind_sql, kind_params = _kind_filter(kinds, alias="j")
        if sql_dialect(self.db) == "postgres":
            return self._claim_skip_locked(owner, kind_sql, kind_params)
        with self.db.write() as conn:
            now = self.clock()
            self._reap(conn, now)
            row = conn.execute(f"{_READY_SQL}{kind_sql} ORDER BY j.id LIMIT 1", (now, *kind_params)).fetchone()
            if row is None:
                return None
            expires = now + self.lease_seconds
            claimed = conn.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, fence = fence + 1,"
                " lease_owner = ?, lease_expires = ?, updated_at = ? WHERE id = ?"
                " RETURNING id, kind, payload, order_key, attempts, max_attempts, fence",
                (owner, expires, now_iso(), row[0]),
            ).fetchone()
        job_id, kind, payload, order_key, attempts, max_attempts, fence = claimed
        return Lease(job_id, kind, json.loads(payload), order_key, attempts, max_attempts, fence, owner, expires)

    def _claim_skip_locked(self, owner: str, kind_sql: str, kind_params: list[str]) -> Lease | None:
        """PostgreSQL's claim: the job row is taken with ``FOR UPDATE SKIP LOCKED`` outside the project's
        writer lock, so workers claim different jobs at once instead of queueing behind each other (and
        behind every append). Everything that changes a *running* job (heartbeat, fence check, complete,
        fail, reaping) still takes the writer lock, so a claim, which only turns a queued row into a running
        one, is the only change made without it.

        Why the order-key rule still holds without the lock: a job is ready only if no earlier job of its
        key is queued or running in the statement's snapshot, and a job leaves those states only for done
        or failed, for good; a competing claimer skips the row another holds, and the row it then sees as
        queued still blocks the later jobs of that key. Enqueues commit in id order (they hold the writer
        lock), so no job appears behind a later one of its key.
        """
        now = self.clock()
        expired = (
            self.db.connection()
            .execute("SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires <= ?)", (now,))
            .fetchone()
        )
        if expired is not None and expired[0]:
            with self.db.write() as conn:
                self._reap(conn, self.clock())
        with self.db.row_locked_write() as conn:  # type: ignore[attr-defined]
            now = self.clock()
            expires = now + self.lease_seconds
            claimed = conn.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, fence = fence + 1,"
                " lease_owner = ?, lease_expires = ?, updated_at = ?"
                f" WHERE state = 'queued' AND id = ({_READY_SQL}{kind_sql} ORDER BY j.id LIMIT 1"
                " FOR UPDATE OF j SKIP LOCKED)"
                " RETURNING id, kind, payload, order_key, attempts, max_attempts, fence",
                (owner, expires, now_iso(), now, *kind_params),
            ).fetchone()
        if claimed is None:
            return None
        job_id, kind, payload, order_key, attempts, max_attempts, fence = claimed
        return Lease(job_id, kind, json.loads(payload), order_key, attempts, max_attempts, fence, owner, expires)

    def heartbeat(self, lease: Lease) -> Lease | None:
        """Extend the lease; None means it was lost (expired or taken over): stop working on it."""
        with self.db.write() as conn:
            now = self.clock()
            expires = now + self.lease_seconds
            conn.execute(
                "UPDATE jobs SET lease_expires = ?, updated_at = ?"
                " WHERE id = ? AND state = 'running' AND fence = ? AND lease_expires > ?",
                (expires, now_iso(), lease.job_id, lease.fence, now),
            )
            if conn.changes() == 0:
                return None
        return Lease(
            lease.job_id,
            lease.kind,
            lease.payload,
            lease.order_key,
            lease.attempt,
            lease.max_attempts,
            lease.fence,
            lease.owner,
            expires,
        )

    def check_fence(self, conn: apsw.Connection, lease: Lease) -> None:
        """Call inside the write transaction that commits a handler's results; raises :class:`LeaseLost`."""
        row = conn.execute(
            "SELECT 1 FROM jobs WHERE id = ? AND state = 'running' AND fence = ? AND lease_expires > ?",
            (lease.job_id, lease.fence, self.clock()),
        ).fetchone()
        if row is None:
            raise LeaseLost(f"job {lease.job_id} is no longer leased to this worker")

    def complete(self, lease: Lease, conn: apsw.Connection | None = None) -> bool:
        """Mark the job done; False if this claim no longer owns it (someone else will finish it)."""
        if conn is None:
            with self.db.write() as write_conn:
                return self._complete(write_conn, lease)
        return self._complete(conn, lease)

    def _complete(self, conn: apsw.Connection, lease: Lease) -> bool:
        stamp = now_iso()
        conn.execute(
            "UPDATE jobs SET state = 'done', lease_owner = NULL, lease_expires = NULL, last_error = NULL,"
            " updated_at = ?, finished_at = ? WHERE id = ? AND state = 'running' AND fence = ?",
            (stamp, stamp, lease.job_id, lease.fence),
        )
        return conn.changes() > 0

    def fail(self, lease: Lease, reason: str, *, retry: bool = True) -> str:
        """Record a failed attempt: ``'retrying'``, ``'failed'`` (gave up, job_failed written) or ``'lost'``.

        ``'lost'`` means this claim no longer owns the job; the reaper or the new owner accounts for it.
        """
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT attempts, max_attempts, dedupe_key, payload FROM jobs"
                " WHERE id = ? AND state = 'running' AND fence = ?",
                (lease.job_id, lease.fence),
            ).fetchone()
            if row is None:
                return "lost"
            attempts, max_attempts, dedupe_key, payload = row
            if retry and attempts < max_attempts:
                self._requeue(conn, lease.job_id, attempts, dedupe_key, reason)
                return "retrying"
            self._give_up(conn, lease.job_id, lease.kind, attempts, json.loads(payload), reason)
            return "failed"

    # -- maintenance ---------------------------------------------------------------------------

    def reap_expired(self) -> int:
        """Return jobs whose worker stopped heartbeating to the queue (or fail them). Returns the count."""
        if not self.has_work():
            return 0
        with self.db.write() as conn:
            return self._reap(conn, self.clock())

    def _reap(self, conn: apsw.Connection, now: float) -> int:
        expired = conn.execute(
            "SELECT id, kind, attempts, max_attempts, dedupe_key, payload, lease_expires FROM jobs"
            " WHERE state = 'running' AND lease_expires <= ?",
            (now,),
        ).fetchall()
        for job_id, kind, attempts, max_attempts, dedupe_key, payload, expired_at in expired:
            reason = "lease_expired: the worker stopped before finishing (killed, stalled or shut down)"
            if attempts < max_attempts:
                # The backoff counts from when the lease ran out, not from when someone noticed.
                self._requeue(conn, job_id, attempts, dedupe_key, reason, since=expired_at)
            else:
                self._give_up(conn, job_id, kind, attempts, json.loads(payload), reason)
        return len(expired)

    def _requeue(
        self,
        conn: apsw.Connection,
        job_id: int,
        attempts: int,
        dedupe_key: str | None,
        reason: str,
        since: float | None = None,
    ) -> None:
        stamp = now_iso()
        if dedupe_key is not None:
            conn.execute(
                "UPDATE jobs SET state = 'done', merged_into = ?, updated_at = ?, finished_at = ?"
                " WHERE dedupe_key = ? AND state = 'queued' AND id != ?",
                (job_id, stamp, stamp, dedupe_key, job_id),
            )
        conn.execute(
            "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires = NULL, last_error = ?,"
            " run_after = ?, updated_at = ? WHERE id = ?",
            (
                reason[:MAX_REASON_CHARS],
                (self.clock() if since is None else since) + backoff_seconds(self.retry_backoff_seconds, attempts),
                stamp,
                job_id,
            ),
        )

    def _give_up(
        self,
        conn: apsw.Connection,
        job_id: int,
        kind: str,
        attempts: int,
        payload: dict[str, Any],
        reason: str,
    ) -> None:
        stamp = now_iso()
        conn.execute(
            "UPDATE jobs SET state = 'failed', lease_owner = NULL, lease_expires = NULL, last_error = ?,"
            " updated_at = ?, finished_at = ? WHERE id = ?",
            (reason[:MAX_REASON_CHARS], stamp, stamp, job_id),
        )
        session_id = payload.get("session_id")
        eventlog.record(
            conn,
            "job_failed",
            session_id=session_id if isinstance(session_id, str) else None,
            job_id=job_id,
            data={"kind": kind, "attempts": attempts, "reason": reason[:MAX_REASON_CHARS]},
        )

    def prune_finished(self, keep_seconds: float) -> int:
        """Delete done jobs older than ``keep_seconds`` and failed ones older than four times that."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE jobs SET merged_into = NULL WHERE merged_into IN (SELECT id FROM jobs WHERE"
                " (state = 'done' AND finished_at < ?) OR (state = 'failed' AND finished_at < ?))",
                (_iso_ago(keep_seconds), _iso_ago(4 * keep_seconds)),
            )
            conn.execute(
                "DELETE FROM jobs WHERE (state = 'done' AND finished_at < ?) OR (state = 'failed' AND finished_at < ?)",
                (_iso_ago(keep_seconds), _iso_ago(4 * keep_seconds)),
            )
            return conn.changes()

    # -- reading -------------------------------------------------------------------------------
    #
    # The reads below serve the pipeline's bookkeeping (is a job already waiting? is the session busy?),
    # so no other module has to name the ``jobs`` table. Each takes an optional ``conn`` so a caller can
    # read inside the transaction or snapshot it already holds (an append's write, a status read).

    def _reader(self, conn: apsw.Connection | None) -> apsw.Connection:
        return conn if conn is not None else self.db.connection()

    def has_queued(self, order_key: str, kind: str, *, conn: apsw.Connection | None = None) -> bool:
        """Whether a job of ``kind`` waits (state ``queued``) under ``order_key``."""
        row = (
            self._reader(conn)
            .execute(
                "SELECT 1 FROM jobs WHERE order_key = ? AND kind = ? AND state = 'queued' LIMIT 1",
                (order_key, kind),
            )
            .fetchone()
        )
        return row is not None

    def has_queued_dedupe(self, dedupe_key: str, *, conn: apsw.Connection | None = None) -> bool:
        """Whether a job with ``dedupe_key`` waits: one indexed lookup, cheaper than an enqueue that folds."""
        row = (
            self._reader(conn)
            .execute("SELECT 1 FROM jobs WHERE dedupe_key = ? AND state = 'queued'", (dedupe_key,))
            .fetchone()
        )
        return row is not None

    def in_flight(self, order_key: str, kind: str | None = None, *, conn: apsw.Connection | None = None) -> bool:
        """Whether a job (of ``kind``, or of any kind when None) is queued or running under ``order_key``."""
        if kind is None:
            sql = "SELECT 1 FROM jobs WHERE order_key = ? AND state IN ('queued', 'running') LIMIT 1"
            params: tuple[str, ...] = (order_key,)
        else:
            sql = "SELECT 1 FROM jobs WHERE order_key = ? AND kind = ? AND state IN ('queued', 'running') LIMIT 1"
            params = (order_key, kind)
        return self._reader(conn).execute(sql, params).fetchone() is not None

    def state_counts(self, order_key: str, *, conn: apsw.Connection | None = None) -> dict[str, int]:
        """How many jobs under ``order_key`` are ``queued`` and ``running`` (both keys always present)."""
        found = dict(
            self._reader(conn)
            .execute(
                "SELECT state, count(*) FROM jobs WHERE order_key = ? AND state IN ('queued', 'running')"
                " GROUP BY state",
                (order_key,),
            )
            .fetchall()
        )
        return {state: int(found.get(state, 0)) for state in ACTIVE_STATES}

    def counts(self) -> dict[str, int]:
        rows = self.db.connection().execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall()
        found = dict(rows)
        return {state: int(found.get(state, 0)) for state in ("queued", "running", "done", "failed")}

    def list_jobs(self, *, states: tuple[str, ...] = (), limit: int = 100) -> list[dict[str, Any]]:
        sql = (
            "SELECT id, kind, order_key, state, attempts, max_attempts, run_after, lease_expires, last_error,"
            " created_at, updated_at, finished_at FROM jobs"
        )
        params: list[Any] = []
        if states:
            sql += f" WHERE state IN ({', '.join('?' for _ in states)})"
            params.extend(states)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        names = (
            "id",
            "kind",
            "order_key",
            "state",
            "attempts",
            "max_attempts",
            "run_after",
            "lease_expires",
            "last_error",
            "created_at",
            "updated_at",
            "finished_at",
        )
        return [dict(zip(names, row, strict=True)) for row in self.db.connection().execute(sql, params).fetchall()]


def _kind_filter(kinds: Iterable[str] | None, alias: str = "") -> tuple[str, list[str]]:
    if kinds is None:
        return "", []
    names = list(kinds)
    column = f"{alias}.kind" if alias else "kind"
    return f" AND {column} IN ({', '.join('?' for _ in names)})", names


def _iso_ago(seconds: float) -> str:
    from datetime import UTC, datetime, timedelta

    stamp = datetime.now(UTC) - timedelta(seconds=seconds)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
