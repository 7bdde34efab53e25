"""The job queue on one PostgreSQL database shared by several processes' pools: every job runs exactly
once, jobs of one order key one at a time and in order (what SQLite's single writer gives, given here by
the project's writer lock)."""

from __future__ import annotations

import threading
from collections import defaultdict

from obsmem.storage import PostgresStore
from obsmem.work import JobQueue

JOBS = 60
KEYS = 6


def test_workers_on_two_pools_run_every_job_once_in_order_per_key(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn, pool_size=3) for _ in range(2)]  # two "servers"
    try:
        first = JobQueue(stores[0].get("proj", create=True), lease_seconds=60.0)
        ids = [first.enqueue("work", {"n": n}, order_key=f"k{n % KEYS}").job_id for n in range(JOBS)]
        running: dict[str, int] = {}
        done: list[int] = []
        order: dict[str, list[int]] = defaultdict(list)
        problems: list[str] = []
        guard = threading.Lock()

        def worker(store: PostgresStore, name: str) -> None:
            queue = JobQueue(store.get("proj"), lease_seconds=60.0)
            idle = 0
            while idle < 20:
                lease = queue.claim(name)
                if lease is None:
                    idle += 1
                    threading.Event().wait(0.02)
                    continue
                idle = 0
                key = lease.order_key or ""
                with guard:
                    if key in running:
                        problems.append(f"{key} ran {running[key]} and {lease.job_id} at once")
                    running[key] = lease.job_id
                    order[key].append(lease.job_id)
                with guard:
                    running.pop(key, None)
                    done.append(lease.job_id)
                assert queue.complete(lease)

        threads = [
            threading.Thread(target=worker, args=(stores[index % 2], f"w{index}"), daemon=True) for index in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert problems == []
        assert sorted(done) == sorted(ids)  # each exactly once
        for key, claimed in order.items():
            assert claimed == sorted(claimed), key
        assert first.counts() == {"queued": 0, "running": 0, "done": JOBS, "failed": 0}
    finally:
        for store in stores:
            store.close()
