"""The durable job queue: leases, fencing, retries, exactly one job_failed, per-session order, dedupe."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.errors import ValidationFailed
from obsmem.projects import ProjectRegistry
from obsmem.settings import JobSettings
from obsmem.work import JobContext, JobQueue, LeaseLost, WorkerPool, backoff_seconds, eventlog, sanitise_reason


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=["sqlite", "postgres"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> ProjectRegistry:
    """The project databases the queue tests run on: SQLite files, then one PostgreSQL database (the queue's
    SQL and rules are the same on both)."""
    if request.param == "postgres":
        from obsmem.storage import PostgresStore

        reg = PostgresStore(request.getfixturevalue("postgres_dsn"), pool_size=4)
    else:
        reg = ProjectRegistry(tmp_path / "data")
    reg.get("proj", create=True)
    yield reg
    reg.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_queue(registry: ProjectRegistry, clock: Clock, **kw: float) -> JobQueue:
    options = {"lease_seconds": 10.0, "retry_backoff_seconds": 1.0, "max_attempts": 4} | kw
    return JobQueue(registry.get("proj"), clock=clock, **options)  # type: ignore[arg-type]


def job_failed_events(queue: JobQueue) -> list[eventlog.LoggedEvent]:
    return eventlog.list_events(queue.db.connection(), types=("job_failed",))


def test_claim_complete_and_nothing_left(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    job = queue.enqueue("observe", {"session_id": "s1"}, order_key="s1")
    assert job.created
    lease = queue.claim("w1")
    assert lease is not None and lease.job_id == job.job_id and lease.attempt == 1 and lease.fence == 1
    assert lease.session_id == "s1"
    assert queue.claim("w2") is None  # nothing else ready
    assert queue.complete(lease)
    assert queue.counts() == {"queued": 0, "running": 0, "done": 1, "failed": 0}
    assert not queue.has_work()


def test_dedupe_folds_queued_duplicates_only(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    first = queue.enqueue("observe", {"session_id": "s1"}, order_key="s1", dedupe_key="observe:s1")
    again = queue.enqueue("observe", {"session_id": "s1"}, order_key="s1", dedupe_key="observe:s1")
    assert again == type(again)(first.job_id, False)
    lease = queue.claim("w1")
    assert lease is not None
    # While it runs, new work for the session queues one more job (events may have arrived meanwhile).
    second = queue.enqueue("observe", {"session_id": "s1"}, order_key="s1", dedupe_key="observe:s1")
    assert second.created and second.job_id != first.job_id
    assert queue.enqueue("observe", {}, order_key="s1", dedupe_key="observe:s1").job_id == second.job_id


def test_jobs_of_one_session_run_in_order_others_in_parallel(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    a1 = queue.enqueue("observe", {"n": 1}, order_key="a").job_id
    a2 = queue.enqueue("observe", {"n": 2}, order_key="a").job_id
    b1 = queue.enqueue("observe", {"n": 3}, order_key="b").job_id
    first = queue.claim("w1")
    second = queue.claim("w2")
    assert first is not None and second is not None
    assert (first.job_id, second.job_id) == (a1, b1)  # a2 waits for a1
    assert queue.claim("w3") is None
    queue.complete(first)
    third = queue.claim("w3")
    assert third is not None and third.job_id == a2


def test_a_retry_waiting_for_backoff_still_blocks_later_jobs_of_its_session(
    registry: ProjectRegistry, clock: Clock
) -> None:
    queue = make_queue(registry, clock)
    a1 = queue.enqueue("observe", {}, order_key="a").job_id
    queue.enqueue("observe", {"later": True}, order_key="a")
    lease = queue.claim("w1")
    assert lease is not None and queue.fail(lease, "boom") == "retrying"
    assert queue.claim("w1") is None  # a1 backs off; a2 may not overtake it
    clock.advance(backoff_seconds(1.0, 1))
    again = queue.claim("w1")
    assert again is not None and again.job_id == a1 and again.attempt == 2


def test_always_failing_job_gives_up_after_four_attempts_with_one_event(
    registry: ProjectRegistry, clock: Clock
) -> None:
    queue = make_queue(registry, clock)
    job = queue.enqueue("observe", {"session_id": "s1"}, order_key="s1", dedupe_key="observe:s1").job_id
    outcomes = []
    delays = []
    for _ in range(4):
        lease = None
        waited = 0.0
        while lease is None:
            lease = queue.claim("w1")
            if lease is None:
                clock.advance(0.5)
                waited += 0.5
        delays.append(waited)
        # New work keeps arriving: it must not reset the attempt count of the failing job.
        queue.enqueue("observe", {"session_id": "s1"}, order_key="s1", dedupe_key="observe:s1")
        outcomes.append(queue.fail(lease, sanitise_reason(ValidationFailed("model said no"))))
    assert outcomes == ["retrying", "retrying", "retrying", "failed"]
    assert delays == [0.0, 1.0, 2.0, 4.0]  # exponential backoff
    events = job_failed_events(queue)
    assert len(events) == 1
    assert events[0].job_id == job and events[0].session_id == "s1"
    assert events[0].data == {"kind": "observe", "attempts": 4, "reason": "invalid_request: model said no"}
    # The duplicate that arrived during the last attempt survives as the next job.
    assert queue.counts()["failed"] == 1 and queue.counts()["queued"] == 1


def test_expired_lease_cannot_heartbeat_or_commit_and_is_reaped(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    queue.enqueue("observe", {}, order_key="s1")
    stale = queue.claim("w1")
    assert stale is not None
    clock.advance(5)
    renewed = queue.heartbeat(stale)
    assert renewed is not None and renewed.expires == clock.now + 10
    clock.advance(10.5)  # the worker stalled past its lease
    assert queue.heartbeat(stale) is None
    with pytest.raises(LeaseLost), queue.db.write() as conn:
        queue.check_fence(conn, stale)
    # Another worker reaps it at its next claim once the backoff has passed, with a new fence.
    clock.advance(backoff_seconds(1.0, 1))
    fresh = queue.claim("w2")
    assert fresh is not None and fresh.fence == stale.fence + 1 and fresh.attempt == 2
    with pytest.raises(LeaseLost), queue.db.write() as conn:
        queue.check_fence(conn, stale)
    assert not queue.complete(stale)
    assert queue.fail(stale, "late") == "lost"
    with queue.db.write() as conn:
        queue.check_fence(conn, fresh)
    assert queue.complete(fresh)


def test_worker_deaths_count_as_attempts_and_end_in_one_job_failed(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock, max_attempts=2)
    queue.enqueue("observe", {"session_id": "s9"}, order_key="s9")
    assert queue.claim("w1") is not None
    clock.advance(11)
    assert queue.reap_expired() == 1
    clock.advance(1)
    assert queue.claim("w2") is not None
    clock.advance(11)
    assert queue.reap_expired() == 1
    assert queue.reap_expired() == 0
    events = job_failed_events(queue)
    assert len(events) == 1 and events[0].data["reason"].startswith("lease_expired")


def test_worker_pool_runs_handlers_and_records_failures(tmp_path: Path) -> None:
    registry = ProjectRegistry(tmp_path / "data")
    db = registry.get("proj", create=True)
    seen: list[int] = []

    def ok(ctx: JobContext) -> None:
        with ctx.fenced_write() as conn:
            conn.execute("INSERT INTO om_events(type, created_at) VALUES ('test', 'now')")
        seen.append(ctx.lease.job_id)

    def broken(ctx: JobContext) -> None:
        raise RuntimeError("secret text that must not be stored")

    settings = JobSettings(retry_backoff_seconds=0.0, lease_seconds=5)
    pool = WorkerPool(registry, {"ok": ok, "broken": broken}, settings)
    queue = pool.queue("proj")
    queue.enqueue("ok", {})
    queue.enqueue("broken", {"session_id": "s1"})
    assert pool.drain(timeout=20)
    assert len(seen) == 1
    events = job_failed_events(queue)
    assert [e.data["reason"] for e in events] == ["internal_error: RuntimeError"]
    assert b"secret text" not in db.path.read_bytes()
    registry.close()


def test_worker_pool_threads_and_housekeeping_start_and_stop(tmp_path: Path) -> None:
    registry = ProjectRegistry(tmp_path / "data")
    registry.get("proj", create=True)
    done: list[int] = []
    pool = WorkerPool(
        registry,
        {"ok": lambda ctx: done.append(ctx.lease.job_id)},
        JobSettings(poll_seconds=0.05, housekeeping_seconds=0.1, lease_seconds=2),
        housekeeping=[lambda project, db: done.append(-1)],
    )
    pool.start(threads=2)
    pool.queue("proj").enqueue("ok", {})
    pool.wake()
    import time

    deadline = time.monotonic() + 10
    while (not any(x > 0 for x in done) or -1 not in done) and time.monotonic() < deadline:
        time.sleep(0.02)
    pool.stop()
    assert any(x > 0 for x in done) and -1 in done
    assert not pool.running
    registry.close()


def test_run_until_stop_lets_a_running_job_finish_within_the_grace(tmp_path: Path) -> None:
    import threading
    import time

    registry = ProjectRegistry(tmp_path / "data")
    registry.get("proj", create=True)
    started, release = threading.Event(), threading.Event()

    def slow(ctx: JobContext) -> None:
        started.set()
        assert release.wait(10)
        with ctx.fenced_write() as conn:
            conn.execute("INSERT INTO om_events(type, created_at) VALUES ('slow-done', 'now')")

    pool = WorkerPool(registry, {"slow": slow}, JobSettings(poll_seconds=0.02, lease_seconds=5))
    pool.queue("proj").enqueue("slow", {})
    stop = threading.Event()
    runner = threading.Thread(target=pool.run_until, args=(stop,), kwargs={"threads": 1, "grace_seconds": 10})
    runner.start()
    assert started.wait(10)
    stop.set()
    time.sleep(0.3)
    assert runner.is_alive()  # still inside its grace, waiting for the running job
    release.set()
    runner.join(timeout=15)
    assert not runner.is_alive() and not pool.running
    assert pool.queue("proj").counts() == {"queued": 0, "running": 0, "done": 1, "failed": 0}
    registry.close()


def test_idle_polls_see_no_work_behind_a_running_job_of_the_same_session(
    registry: ProjectRegistry, clock: Clock
) -> None:
    queue = make_queue(registry, clock)
    queue.enqueue("observe", {}, order_key="s1")
    queue.enqueue("observe", {}, order_key="s1")
    assert queue.has_work()
    running = queue.claim("w1")
    assert running is not None
    assert not queue.has_work()  # the second job waits its turn: polling must not take the write lock
    queue.complete(running)
    assert queue.has_work()


def test_heartbeats_keep_a_long_job_from_being_taken_over(tmp_path: Path) -> None:
    import threading
    import time

    registry = ProjectRegistry(tmp_path / "data")
    registry.get("proj", create=True)
    runs: list[int] = []

    def slow(ctx: JobContext) -> None:
        runs.append(ctx.lease.fence)
        time.sleep(1.5)  # three lease lengths
        with ctx.fenced_write() as conn:
            conn.execute("INSERT INTO om_events(type, created_at) VALUES ('slow-done', 'now')")

    settings = JobSettings(lease_seconds=0.5, retry_backoff_seconds=0.0, poll_seconds=0.02)
    first = WorkerPool(registry, {"slow": slow}, settings)
    second = WorkerPool(registry, {"slow": slow}, settings)
    first.queue("proj").enqueue("slow", {})
    runner = threading.Thread(target=first.run_next)
    runner.start()
    time.sleep(0.2)
    deadline = time.monotonic() + 1.8
    while time.monotonic() < deadline:
        assert not second.run_next()  # nothing to take over while the heartbeat renews the lease
        time.sleep(0.05)
    runner.join(timeout=10)
    assert runs == [1]
    assert first.queue("proj").counts()["done"] == 1
    registry.close()


def test_finished_jobs_are_pruned_failed_ones_kept_longer(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock, max_attempts=1)
    queue.enqueue("a", {})
    queue.enqueue("b", {})
    done = queue.claim("w")
    assert done is not None and queue.complete(done)
    failed = queue.claim("w")
    assert failed is not None and queue.fail(failed, "x") == "failed"
    queue.db.connection().execute("UPDATE jobs SET finished_at = '2000-01-01T00:00:00.000Z' WHERE state = 'done'")
    queue.db.connection().execute("UPDATE jobs SET finished_at = '2026-01-01T00:00:00.000Z' WHERE state = 'failed'")
    assert queue.prune_finished(keep_seconds=86400 * 30 * 12) == 1  # done: older than a year; failed: not 4 years
    assert queue.counts() == {"queued": 0, "running": 0, "done": 0, "failed": 1}


def test_queue_reads_for_one_order_key_follow_the_job_states(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    assert not queue.has_queued("session:s1", "observe")
    assert not queue.in_flight("session:s1")
    assert queue.state_counts("session:s1") == {"queued": 0, "running": 0}
    queue.enqueue("observe", {"session_id": "s1"}, order_key="session:s1", dedupe_key="observe:s1")
    queue.enqueue("reflect", {"session_id": "s1"}, order_key="session:s1")
    queue.enqueue("observe", {"session_id": "s2"}, order_key="session:s2")
    assert queue.has_queued("session:s1", "observe") and queue.has_queued("session:s1", "reflect")
    assert not queue.has_queued("session:s3", "observe")
    assert queue.has_queued_dedupe("observe:s1") and not queue.has_queued_dedupe("observe:s2")
    assert queue.state_counts("session:s1") == {"queued": 2, "running": 0}

    lease = queue.claim("w1", kinds=("observe",))
    assert lease is not None and lease.order_key == "session:s1"
    # The running observe job is in flight but no longer queued; its dedupe key is free again.
    assert not queue.has_queued("session:s1", "observe") and queue.in_flight("session:s1", "observe")
    assert not queue.has_queued_dedupe("observe:s1")
    assert queue.state_counts("session:s1") == {"queued": 1, "running": 1}
    assert queue.complete(lease)
    assert not queue.in_flight("session:s1", "observe")
    assert queue.in_flight("session:s1") and queue.in_flight("session:s1", "reflect")  # any kind: reflect waits

    reflect = queue.claim("w1", kinds=("reflect",))
    assert reflect is not None and queue.complete(reflect)
    assert not queue.in_flight("session:s1")
    assert queue.state_counts("session:s1") == {"queued": 0, "running": 0}
    assert queue.state_counts("session:s2") == {"queued": 1, "running": 0}


def test_queue_reads_see_a_callers_uncommitted_write(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock)
    with queue.db.write() as conn:
        queue.enqueue("observe", {}, order_key="session:s1", dedupe_key="observe:s1", conn=conn)
        assert queue.has_queued_dedupe("observe:s1", conn=conn)
        assert queue.state_counts("session:s1", conn=conn) == {"queued": 1, "running": 0}
    assert queue.has_queued_dedupe("observe:s1")


def test_last_failure_at_is_the_newest_job_failed_of_that_kind(registry: ProjectRegistry, clock: Clock) -> None:
    queue = make_queue(registry, clock, max_attempts=1)
    conn = queue.db.connection()
    assert eventlog.last_failure_at(conn, "s1", "observe") is None
    for kind in ("observe", "reflect", "observe"):
        queue.enqueue(kind, {"session_id": "s1"}, order_key="session:s1")
        lease = queue.claim("w1")
        assert lease is not None
        queue.fail(lease, "internal_error: RuntimeError")
    failed = job_failed_events(queue)
    assert [e.data["kind"] for e in failed] == ["observe", "reflect", "observe"]
    assert eventlog.last_failure_at(conn, "s1", "observe") == failed[2].created_at
    assert eventlog.last_failure_at(conn, "s1", "reflect") == failed[1].created_at
    assert eventlog.last_failure_at(conn, "s2", "observe") is None


def test_session_event_reads_find_the_newest_failure_and_a_success_after_it(registry: ProjectRegistry) -> None:
    db = registry.get("proj")
    failures, successes = ("om_observation_failed", "job_failed"), ("om_observation_end",)
    with db.write() as conn:
        assert eventlog.latest_session_event(conn, "s1", failures) is None
        first = eventlog.record(conn, "om_observation_failed", session_id="s1", data={"error": "a: b"})
        eventlog.record(conn, "om_observation_end", session_id="s1")
        last = eventlog.record(conn, "job_failed", session_id="s1", data={"reason": "c: d"})
        eventlog.record(conn, "om_observation_failed", session_id="s2")
    conn = db.connection()
    newest = eventlog.latest_session_event(conn, "s1", failures)
    assert newest is not None and newest.id == last and newest.type == "job_failed"
    assert newest.data == {"reason": "c: d"}
    assert eventlog.has_session_event_after(conn, "s1", first, successes)
    assert not eventlog.has_session_event_after(conn, "s1", last, successes)
    assert not eventlog.has_session_event_after(conn, "s2", 0, successes)


def test_worker_pool_logs_under_its_module_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    registry = ProjectRegistry(tmp_path / "data")
    registry.get("proj", create=True)

    def broken(ctx: JobContext) -> None:
        raise RuntimeError("secret text that must not be logged")

    pool = WorkerPool(registry, {"broken": broken}, JobSettings(retry_backoff_seconds=0.0, lease_seconds=5))
    pool.queue("proj").enqueue("broken", {})
    with caplog.at_level("DEBUG", logger="obsmem.work.pool"):
        assert pool.drain(timeout=20)
    registry.close()
    assert caplog.records and {record.name for record in caplog.records} == {"obsmem.work.pool"}
    assert "secret text" not in caplog.text
