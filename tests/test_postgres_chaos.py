"""The multi-node chaos test, fast variant: three ``obsmem serve`` and two ``obsmem worker`` processes on one
PostgreSQL database, clients appending and searching over all servers, a follower of the event stream on
each, and a random server or worker killed with SIGKILL (and restarted) in every round.

Afterwards every acknowledged write is present, every job ended done or failed once with its effects
applied once, and every follower saw every event (the checks: ``support.cluster.check_cluster``).
``benchmarks/postgres_chaos.py`` runs the long version.
"""

from __future__ import annotations

from pathlib import Path

from support.cluster import Cluster, run_chaos
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer


def test_kill_9_of_servers_and_workers_loses_and_repeats_nothing(tmp_path: Path, postgres_dsn: str) -> None:
    script = PipelineScript(ObserverScript(delay=0.05), ReflectorScript(), DropperScript())
    with ScriptedChatServer(script) as chat:
        cluster = Cluster(tmp_path, postgres_dsn, chat.base_url)
        figures = run_chaos(cluster, rounds=3, round_seconds=2.5, clients=3, seed=16)
    assert sum(figures["kills"].values()) == 3
    assert figures["acknowledged_writes_checked"] > 0 and figures["jobs_checked"] > 0
    assert figures["searches"] > 0 and figures["searches_found"] == figures["searches"]
    assert figures["jobs_by_kind"].get("observe", 0) > 0
    assert min(figures["events_seen_per_follower"]) == figures["events_in_log"] > 0
