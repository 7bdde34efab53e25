"""``obsmem worker`` processes on one PostgreSQL database: a job whose worker dies is run again once its
lease expires, and two workers in two processes never run one job twice."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from support.cluster import Cluster
from support.pipeline_service import user, words
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer

DONE_LINE = re.compile(r"job (\d+) \((\w+)\) done in")


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def jobs(service: Obsmem) -> list[tuple[int, str, str, int]]:
    db: Any = service.store.get("chaos")  # type: ignore[attr-defined]
    return db.query("SELECT id, kind, state, attempts FROM jobs ORDER BY id")


def observations_per_event(service: Obsmem) -> Counter[tuple[str, int]]:
    db: Any = service.store.get("chaos")  # type: ignore[attr-defined]
    return Counter(db.query("SELECT session_id, seq FROM observation_sources"))


def test_a_job_whose_worker_dies_is_run_again_once_its_lease_expires(tmp_path: Path, postgres_dsn: str) -> None:
    script = PipelineScript(ObserverScript(delay=1.5), ReflectorScript(), DropperScript())
    with ScriptedChatServer(script) as chat:
        cluster = Cluster(tmp_path, postgres_dsn, chat.base_url, servers=0, workers=2, lease=1.5)
        first, second = cluster.workers
        try:
            with cluster.service() as service:
                service.append_events("chaos", "s1", [user(f"message {i}: " + words(30)) for i in range(3)])
                service.observe("chaos", "s1")
                first.start()
                wait_for(lambda: jobs(service)[0][2] == "running", 60, "the first worker to claim the job")
                wait_for(lambda: script.observer.calls > 0, 30, "the Observer's request")  # type: ignore[attr-defined]
                first.kill()  # mid-request: the job stays running under a lease nobody renews
                assert jobs(service)[0][2:] == ("running", 1)
                second.start()
                wait_for(lambda: jobs(service)[0][2] == "done", 60, "the second worker to finish the job")
                job_id, _, state, attempts = jobs(service)[0]
                assert (state, attempts) == ("done", 2)
                per_event = observations_per_event(service)
                assert sorted(per_event) == [("s1", 1), ("s1", 2), ("s1", 3)] and set(per_event.values()) == {1}
                # The first attempt's request was made, its answer never committed: the texts name the second.
                texts = [row[0] for row in service.store.get("chaos").query("SELECT content FROM memories")]  # type: ignore[attr-defined]
                assert all("observed in call 1" not in text for text in texts)
                lost = service.pipeline_events("chaos", types=("job_failed",))
                assert lost == []
        finally:
            cluster.stop()


def test_two_workers_in_two_processes_never_run_one_job_twice(tmp_path: Path, postgres_dsn: str) -> None:
    script = PipelineScript(ObserverScript(delay=0.05), ReflectorScript(), DropperScript())
    with ScriptedChatServer(script) as chat:
        cluster = Cluster(tmp_path, postgres_dsn, chat.base_url, servers=0, workers=2)
        try:
            with cluster.service() as service:
                for worker in cluster.workers:
                    worker.start()
                sessions = [f"s{n}" for n in range(8)]
                for round_ in range(4):
                    for session in sessions:
                        batch = [user(f"round {round_} message {i}: " + words(25)) for i in range(3)]
                        service.append_events("chaos", session, batch)
                for session in sessions:
                    service.observe("chaos", session)

                def settled() -> bool:
                    rows = jobs(service)
                    return bool(rows) and all(state in ("done", "failed") for _, _, state, _ in rows)

                wait_for(settled, 120, "every job to finish")
                rows = jobs(service)
        finally:
            cluster.stop()
        assert {state for _, _, state, _ in rows} == {"done"}
        assert all(attempts == 1 for *_, attempts in rows)  # claimed once each: nothing failed, nothing reaped
        done_by = [
            {int(job) for job, _ in DONE_LINE.findall(path.read_text(errors="replace"))}
            for path in sorted(cluster.logs.glob("worker-*.log"))
        ]
        assert len(done_by) == 2 and all(done_by), "both processes ran jobs"
        assert not done_by[0] & done_by[1], "a job ran in both processes"
        assert done_by[0] | done_by[1] == {job_id for job_id, *_ in rows}
        with cluster.service() as service:
            per_event = observations_per_event(service)
        assert len(per_event) == 8 * 12 and set(per_event.values()) == {1}
