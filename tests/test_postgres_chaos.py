"""The multi-node chaos test, fast variant: three ``obsmem serve`` and two ``obsmem worker`` processes on one
PostgreSQL database, clients appending and searching over all servers, a follower of the event stream on
each, and a random server or worker killed with SIGKILL (and restarted) in every round; in the second round
a worker is also paused with SIGSTOP for longer than the lease, so jobs it held are taken over and its late
commits must be fenced.

Afterwards every acknowledged write is present, every job ended done or failed once with its effects
applied once (no event observed twice, paused worker or not), no event is left uncovered unless a failed
observe job of its session explains it, and every follower saw every event (the checks:
``support.cluster.check_cluster``).
``benchmarks/postgres_chaos.py`` runs the long version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.cluster import PROJECT, Cluster, run_chaos, unexplained_uncovered
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer


def test_kill_9_of_servers_and_workers_loses_and_repeats_nothing(tmp_path: Path, postgres_dsn: str) -> None:
    script = PipelineScript(ObserverScript(delay=0.05), ReflectorScript(), DropperScript())
    with ScriptedChatServer(script) as chat:
        cluster = Cluster(tmp_path, postgres_dsn, chat.base_url)
        figures = run_chaos(cluster, rounds=3, round_seconds=2.5, clients=3, seed=16, pause_every=2)
    assert sum(figures["kills"].values()) == 3 and figures["pauses"] == 1
    assert figures["acknowledged_writes_checked"] > 0 and figures["jobs_checked"] > 0
    assert figures["searches"] > 0 and figures["searches_found"] == figures["searches"]
    assert figures["jobs_by_kind"].get("observe", 0) > 0
    assert min(figures["events_seen_per_follower"]) == figures["events_in_log"] > 0


def test_the_checks_name_uncovered_events_that_no_failed_job_explains(tmp_path: Path, postgres_dsn: str) -> None:
    settings = load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as service:
        for session in ("lost", "gave-up"):
            service.append_events(PROJECT, session, [{"role": "user", "seq": 1, "content": "never observed"}])
        db: Any = service.store.get(PROJECT)  # type: ignore[attr-defined]
        assert sorted(unexplained_uncovered(db)) == [("gave-up", 1), ("lost", 1)]
        with db.write() as conn:
            conn.execute(
                "INSERT INTO jobs(kind, order_key, state, attempts, max_attempts, run_after, created_at, updated_at)"
                " VALUES ('observe', 'session:gave-up', 'failed', 3, 3, 0, '2026-01-01', '2026-01-01')"
            )
        assert unexplained_uncovered(db) == [("lost", 1)]
