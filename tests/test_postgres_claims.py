"""Job claims on PostgreSQL take rows with ``FOR UPDATE SKIP LOCKED`` instead of the project's writer lock:
claimers do not wait for a writer or for each other, and under concurrent claimers in several threads and
processes (with failures, retries and abandoned leases) no attempt of a job is claimed twice and every job
ends done or failed exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg

from obsmem.storage import PostgresStore
from obsmem.work import JobQueue, eventlog

JOBS = 120
THREADS = 4
PROCESSES = 2
LEASE_SECONDS = 1.0
WORKER_IDLE_LIMIT = 40  # empty claims in a row (at 50 ms) before a worker stops

# One worker loop, run in threads here and in child processes: it claims until the queue stays empty,
# and for each claim completes it, fails it (retried until the attempts run out) or abandons it (its lease
# expires and the reaper retries or fails it). It reports what it did.
WORKER_SOURCE = textwrap.dedent(
    """
    import json, random, time
    from obsmem.storage import PostgresStore
    from obsmem.work import JobQueue

    def run_worker(store, name, seed, lease_seconds, idle_limit):
        rng = random.Random(seed)
        queue = JobQueue(store.get("proj"), lease_seconds=lease_seconds, retry_backoff_seconds=0.05, max_attempts=3)
        claims, completed, failed = [], [], []
        idle = 0
        while idle < idle_limit:
            lease = queue.claim(name)
            if lease is None:
                idle += 1
                time.sleep(0.05)
                continue
            idle = 0
            claims.append([lease.job_id, lease.fence])
            roll = rng.random()
            if roll < 0.7:
                if queue.complete(lease):
                    completed.append(lease.job_id)
            elif roll < 0.9:
                if queue.fail(lease, "scripted failure") == "failed":
                    failed.append(lease.job_id)
            # else: abandoned, as by a killed worker; the lease runs out
        return {"claims": claims, "completed": completed, "failed": failed}
    """
)

namespace: dict[str, object] = {}
exec(WORKER_SOURCE, namespace)  # the same loop the child processes run
run_worker = namespace["run_worker"]


def test_a_claim_does_not_wait_for_the_projects_writer(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn, pool_size=3)
    try:
        db = store.get("proj", create=True)
        queue = JobQueue(db)
        queue.enqueue("work", {"n": 1}, order_key="k")
        holding = threading.Event()
        release = threading.Event()

        def writer() -> None:
            with db.write():
                holding.set()
                release.wait(timeout=30)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        assert holding.wait(timeout=10)
        try:
            started = time.monotonic()
            lease = queue.claim("w1")  # under the writer lock this would wait until the release
            waited = time.monotonic() - started
        finally:
            release.set()
            thread.join(timeout=10)
        assert lease is not None and lease.payload == {"n": 1}
        assert waited < 5.0
        assert queue.complete(lease)
    finally:
        store.close()


def test_a_job_row_held_by_another_claimer_is_skipped_not_waited_for(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn, pool_size=3)
    try:
        db = store.get("proj", create=True)
        queue = JobQueue(db)
        first = queue.enqueue("work", {"n": 1}, order_key="a").job_id
        second = queue.enqueue("work", {"n": 2}, order_key="b").job_id
        with psycopg.connect(postgres_dsn) as other:
            other.execute(f"SELECT id FROM {db.schema}.jobs WHERE id = %s FOR UPDATE", (first,))
            lease = queue.claim("w1")  # the first job's row is locked by a claim in flight
            assert lease is not None and lease.job_id == second
            assert queue.claim("w2") is None  # nothing else is free: no wait, no double claim
            other.rollback()
        lease_first = queue.claim("w2")
        assert lease_first is not None and lease_first.job_id == first
    finally:
        store.close()


def test_concurrent_claimers_in_threads_and_processes_finish_every_job_once(postgres_dsn: str, tmp_path: Path) -> None:
    stores = [PostgresStore(postgres_dsn, pool_size=3) for _ in range(2)]
    try:
        queue = JobQueue(stores[0].get("proj", create=True), max_attempts=3)
        ids = {queue.enqueue("work", {"n": n}, order_key=f"k{n % 10}" if n % 2 else None).job_id for n in range(JOBS)}
        script = tmp_path / "worker.py"
        script.write_text(
            WORKER_SOURCE
            + textwrap.dedent(
                """
                import sys
                store = PostgresStore(sys.argv[1], pool_size=2)
                try:
                    name, seed, lease, idle = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
                    print(json.dumps(run_worker(store, name, seed, lease, idle)))
                finally:
                    store.close()
                """
            )
        )
        env = dict(os.environ, PYTHONSAFEPATH="1")
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(script),
                    postgres_dsn,
                    f"p{index}",
                    str(100 + index),
                    str(LEASE_SECONDS),
                    str(WORKER_IDLE_LIMIT),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for index in range(PROCESSES)
        ]
        reports: list[dict[str, list]] = []
        guard = threading.Lock()

        def thread_worker(index: int) -> None:
            report = run_worker(stores[index % 2], f"t{index}", index, LEASE_SECONDS, WORKER_IDLE_LIMIT)  # type: ignore[operator]
            with guard:
                reports.append(report)

        threads = [threading.Thread(target=thread_worker, args=(index,), daemon=True) for index in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads)
        for child in children:
            out, err = child.communicate(timeout=240)
            assert child.returncode == 0, err[-2000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))

        # The workers may stop while abandoned leases still run: let the reaper account for them.
        deadline = time.monotonic() + 30
        while queue.counts()["queued"] + queue.counts()["running"] and time.monotonic() < deadline:
            queue.reap_expired()
            lease = queue.claim("finisher")
            if lease is not None:
                reports.append({"claims": [[lease.job_id, lease.fence]], "completed": [], "failed": []})
                assert queue.complete(lease)
                reports[-1]["completed"].append(lease.job_id)
            else:
                time.sleep(0.1)

        claims = [tuple(claim) for report in reports for claim in report["claims"]]
        assert len(claims) == len(set(claims)), "an attempt of a job was claimed twice"
        assert len({process_claim[0] for process_claim in claims}) == JOBS
        completed = [job for report in reports for job in report["completed"]]
        assert len(completed) == len(set(completed)), "a job was completed twice"
        counts = queue.counts()
        assert counts["queued"] == counts["running"] == 0
        assert counts["done"] + counts["failed"] == JOBS
        done = {row["id"] for row in queue.list_jobs(states=("done",), limit=JOBS)}
        failed = {row["id"] for row in queue.list_jobs(states=("failed",), limit=JOBS)}
        assert done == set(completed)
        assert done | failed == ids and not done & failed
        failures = eventlog.list_events(queue.db.connection(), types=("job_failed",), limit=JOBS + 1)
        failed_ids = [event.job_id for event in failures]
        assert sorted(failed_ids) == sorted(failed), "every failed job has exactly one job_failed"
        scripted = [job for report in reports for job in report["failed"]]
        assert len(scripted) == len(set(scripted)) and set(scripted) <= failed
    finally:
        for store in stores:
            store.close()
