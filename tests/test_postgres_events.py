"""The pipeline event log on PostgreSQL: what is recorded is listed as on SQLite, and followers on any
server are woken by LISTEN/NOTIFY at the commit (never by a rollback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage import EventSignal, PostgresStore
from obsmem.work import JobQueue, eventlog

WAIT_BOUND = 30.0


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_dsn, pool_size=3)
    yield store
    store.close()


def test_a_follower_on_another_connection_is_woken_at_the_commit(store: PostgresStore, postgres_dsn: str) -> None:
    db = store.get("proj", create=True)
    signal = EventSignal(postgres_dsn)
    try:
        token = signal.version(db.schema)
        woken = threading.Event()

        def follow() -> None:
            if signal.wait(db.schema, token, WAIT_BOUND):
                woken.set()

        follower = threading.Thread(target=follow)
        follower.start()
        started = time.monotonic()
        with db.write() as conn:
            eventlog.record(conn, "om_observation_end", session_id="s1", data={"n": 1})
            time.sleep(0.3)
            assert not woken.is_set()  # not before the commit
        follower.join(timeout=WAIT_BOUND)
        assert woken.is_set() and time.monotonic() - started < 10
        with db.read() as conn:
            events = eventlog.list_events(conn, after=0)
        assert [(e.type, e.session_id, e.data) for e in events] == [("om_observation_end", "s1", {"n": 1})]
    finally:
        signal.close()


def test_a_rollback_wakes_no_one_and_other_projects_are_apart(store: PostgresStore, postgres_dsn: str) -> None:
    db, other = store.get("proj", create=True), store.get("other", create=True)
    signal = EventSignal(postgres_dsn)
    try:
        token = signal.version(db.schema)
        with pytest.raises(RuntimeError), db.write() as conn:
            eventlog.record(conn, "om_observation_end", session_id="s1")
            raise RuntimeError("roll back")
        with other.write() as conn:
            eventlog.record(conn, "om_observation_end", session_id="s1")
        assert not signal.wait(db.schema, token, 1.0)
        assert signal.version(other.schema) == 1
    finally:
        signal.close()


def test_a_job_that_gives_up_is_listed_once_through_the_service(tmp_path: Path, postgres_dsn: str) -> None:
    settings = load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as memory:
        memory.append_events("p", "s1", [{"role": "user", "content": "x"}])
        queue = JobQueue(memory.store.get("p"), max_attempts=1)  # type: ignore[attr-defined]
        queue.enqueue("observe", {"session_id": "s1"}, order_key="session:s1")
        lease = queue.claim("w1")
        assert lease is not None and queue.fail(lease, "internal_error: RuntimeError") == "failed"
        events = memory.pipeline_events("p", types=("job_failed",))
        assert [(e.type, e.session_id, e.data["kind"]) for e in events] == [("job_failed", "s1", "observe")]
        jobs = memory.jobs("p")
        assert jobs.counts.failed == 1 and [job.state for job in jobs.jobs] == ["failed"]


def test_a_broken_listening_connection_stops_listening_at_once(store: PostgresStore, postgres_dsn: str) -> None:
    """Followers woken by the break read, then ask whether the signal still listens: it said so for the half
    second its thread waited before ending, they waited on it again, and the first event after a terminated
    listening connection reached the HTTP stream up to 5 s late (the wait's timeout) instead of at the next
    0.25 s poll."""
    db = store.get("proj", create=True)
    signal = EventSignal(postgres_dsn)
    try:
        token = signal.version(db.schema)
        assert signal.listening
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            listener = signal._conn.info.backend_pid
            admin.execute("SELECT pg_terminate_backend(%s)", (listener,))
        assert signal.wait(db.schema, token, WAIT_BOUND)  # woken by the break
        assert not signal.listening  # from the moment it woke its followers
    finally:
        signal.close()
