"""kill -9 of the indexer at every step of a batch and of a graph publish, and at random moments.

Each round changes the memories (adds, deletes, an edit), runs the indexer in a subprocess that is
killed with SIGKILL — at a named crash point or after a random delay — then runs it again to the end.
After every round the index must hold exactly the current memories, hybrid results must equal the
brute-force reference, and the graph directory must hold only the recorded file.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from obsmem.faults import CRASH_ENV
from support.hybrid_reference import IN_STEP, index_matches_memories, reference_search
from support.model_server import ModelServer
from support.processes import support_command, support_environment
from support.semantic_service import add_memories, corpus, make_service

CRASH_POINTS = [
    "batch:read",
    "batch:embedded",
    "batch:neighbours",
    "batch:written",
    "batch:committed",
    "publish:dirty",
    "publish:written",
    "publish:renamed",
    "publish:committed",
    "publish:cleaned",
]
QUERIES = ("flaky auth clock", "docker release image", "postgres vacuum index")


def run_worker(data: Path, base_url: str, *, crash_at: str | None = None, kill_after: float | None = None) -> int:
    env = support_environment()
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    process = subprocess.Popen(support_command("index_worker", str(data), base_url), env=env)
    if kill_after is not None:
        try:
            return process.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
    return process.wait(timeout=120)


def mutate(service, rng: random.Random, round_number: int) -> None:
    start = 1000 + round_number * 20
    fresh = [(stamp, f"{text} r{round_number}") for stamp, text in corpus(start + 15, seed=round_number)[start:]]
    add_memories(service, "p", fresh, session=f"s{round_number % 3}")
    db = service.database("p")
    rows = [row[0] for row in db.query("SELECT memory_id FROM memories")]
    for memory_id in rng.sample(rows, 3):
        service.forget("p", memory_id)
    victim = rng.choice([row[0] for row in db.query("SELECT memory_id FROM memories")])
    with db.write() as conn:
        conn.execute("UPDATE memories SET content = content || ' edited' WHERE memory_id = ?", (victim,))


def check(service) -> None:
    db = service.database("p")
    settings = service.settings.semantic
    with db.read() as conn:
        assert index_matches_memories(conn, settings) == IN_STEP
    state = service.indexer.project("p").state()
    assert not state.dirty
    directory = db.path.parent / "semantic"
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == [state.hnsw_file]
    vectors = service.indexer.project("p").vectors()
    assert vectors is not None and vectors.graph is not None
    assert vectors.live == db.query("SELECT count(*) FROM semantic_chunks")[0][0]
    for query in QUERIES:
        for window in ({}, {"after": "2024-02-01", "before": "2024-03-15"}):
            with db.read() as conn:
                expected = reference_search(conn, settings, query, **window)
            assert [h.memory_id for h in service.search("p", query, **window).hits] == expected


@pytest.mark.slow
def test_kill_at_every_step_and_at_random_moments(tmp_path: Path, model_server: ModelServer) -> None:
    data = tmp_path / "data"
    rng = random.Random(2024)
    with make_service(data, model_server) as service:
        add_memories(service, "p", corpus(80))
    rounds = [("point", point) for point in CRASH_POINTS * 2] + [("random", None)] * 10
    for number, (kind, point) in enumerate(rounds):
        with make_service(data, model_server) as service:
            mutate(service, rng, number)
        if kind == "point":
            code = run_worker(data, model_server.base_url, crash_at=point)
            assert code == -signal.SIGKILL, f"round {number}: crash point {point} was not reached"
        else:
            run_worker(data, model_server.base_url, kill_after=rng.uniform(0.3, 2.5))
        assert run_worker(data, model_server.base_url) == 0
        with make_service(data, model_server) as service:
            service.indexer.project("p").maintain()
            check(service)
        assert not list((data / "projects" / "p" / "semantic").glob("*.tmp"))


def test_restart_repeats_no_finished_batch(tmp_path: Path, model_server: ModelServer) -> None:
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "p", corpus(40))
    # Killed right after its first batch committed (8 chunks; the backfill may already have encoded the
    # next batch, which is lost)...
    assert run_worker(data, model_server.base_url, crash_at="batch:committed") == -signal.SIGKILL
    embedded = len(model_server.texts_embedded())
    assert embedded in (8, 16)
    with make_service(data, model_server) as service:
        assert service.indexer.project("p").pending_count() == 32
    # ...the restart embeds only the other 32.
    assert run_worker(data, model_server.base_url) == 0
    assert len(model_server.texts_embedded()) - embedded == 32
    time.sleep(0)  # keep the module's imports used
