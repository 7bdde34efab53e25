"""Seeded interleavings of observe, reflect and drop jobs: two worker processes, kill -9 and stalls past
the lease, duplicate enqueues. The thresholds are tiny, so every session is reflected on (and pruned by
the Dropper) several times while it is still being observed.

For every seed, afterwards:

- every event is covered exactly once (whole, or parts that tile its text with one final part);
- no observation is lost or duplicated: each covered piece of a citable event has exactly one
  observation from the scripted Observer (whose text names the model call, so a chunk committed twice,
  or committed by a worker that had lost its lease, would show up as an extra observation);
- no job is stranded (nothing queued or running, nothing failed, no job_failed event);
- the coverage watermark never moved backwards (sampled throughout) and ends at the last seq;
- the backlog counters are back at zero and the database passes its integrity check;
- the active generation of each session is valid: the pointer names a promoted generation whose chain of
  parents runs, one number at a time, back to generation 1, and no generation is left running;
- the generation count never decreased (sampled throughout);
- no reflection cites a missing observation, and each cited only observations active when it was
  promoted; every reflection and drop record belongs to a promoted generation (a killed run left none);
- the projection equals the projection rebuilt from the ledger.

Disruptions per seed are bounded (at most 3, fewer than the 4 attempts a job has), so every job can
still succeed. ``OBSMEM_INTERLEAVING_SEEDS`` raises the number of seeds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.pipeline import project, render_projection
from obsmem.pipeline.reflect.generations import promoted_chain, rebuild_active_memory
from obsmem.settings import load_settings
from obsmem.work import JobQueue
from support.pipeline_service import words
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer

SEEDS = int(os.environ.get("OBSMEM_INTERLEAVING_SEEDS", "8"))
LEASE_SECONDS = 1.5
SESSIONS = ("alpha", "beta", "gamma")

SETTINGS_TOML = """
[model]
base_url = "{base_url}"
model_id = "scripted"
timeout_seconds = 10
max_retries = 1
retry_backoff_seconds = 0.01
context_window_tokens = 4096

[observer]
buffer_tokens = 300
max_chunks_per_job = 3

[reflector]
reflect_after_observation_tokens = 300
resume_after_failure_seconds = 0

[pools]
observations_max_tokens = 150

[jobs]
lease_seconds = {lease}
retry_backoff_seconds = 0.05
poll_seconds = 0.02
housekeeping_seconds = 0.5
"""


class Workers:
    """Two `obsmem worker` processes that can be killed, stalled and restarted."""

    def __init__(self, data_dir: Path, logs: Path) -> None:
        self.data_dir = data_dir
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = [self._spawn(0), self._spawn(1)]

    def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"worker-{slot}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        return subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "obsmem.surfaces.worker",
                "--data-dir",
                str(self.data_dir),
                "--threads",
                "2",
                "--grace",
                "2",
                "--log-level",
                "INFO",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self, slot: int) -> None:
        os.kill(self.procs[slot].pid, signal.SIGKILL)
        self.procs[slot].wait(timeout=30)
        self.procs[slot] = self._spawn(slot)

    def stall(self, slot: int, seconds: float) -> None:
        """Freeze a worker past its lease (heartbeats stop too), then let it run on."""
        os.kill(self.procs[slot].pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.kill(self.procs[slot].pid, signal.SIGCONT)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class WatermarkSampler(threading.Thread):
    """Samples each session's coverage watermark and generation count; neither may ever go down."""

    def __init__(self, memory: Obsmem) -> None:
        super().__init__(daemon=True)
        self.memory = memory
        self.stop_event = threading.Event()
        self.seen: dict[str, int] = {}
        self.generations: dict[str, int] = {}
        self.backwards: list[tuple[str, int, int]] = []
        self.samples = 0

    def run(self) -> None:
        db = self.memory.database("p", create=True)
        while not self.stop_event.wait(0.01):
            for session, mark in db.query("SELECT session_id, observed_through_seq FROM observer_progress"):
                if mark < self.seen.get(session, 0):
                    self.backwards.append((session, self.seen[session], mark))
                self.seen[session] = max(mark, self.seen.get(session, 0))
            for session, number in db.query("SELECT session_id, number FROM active_generation"):
                if number < self.generations.get(session, 0):
                    self.backwards.append((f"generation of {session}", self.generations[session], number))
                self.generations[session] = max(number, self.generations.get(session, 0))
            self.samples += 1


def workload(memory: Obsmem, rng: random.Random, seconds: float) -> None:
    """Appends across sessions, with an oversized event, system messages, a late gap and duplicate jobs."""
    db = memory.database("p", create=True)
    queue = JobQueue(db)
    gap_session = rng.choice(SESSIONS)
    gap_seq: int | None = None
    oversized_done = False
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        session = rng.choice(SESSIONS)
        batch: list[dict[str, object]] = []
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.1:
                batch.append({"role": "system", "content": "Follow the house style. " + words(rng.randint(5, 50))})
            elif roll < 0.3:
                batch.append(
                    {
                        "role": "assistant",
                        "type": "tool_call",
                        "tool_name": "read_file",
                        "tool_args": {"path": f"src/mod{rng.randint(1, 99)}.py", "line": rng.randint(1, 500)},
                    }
                )
            else:
                batch.append(
                    {
                        "role": rng.choice(["user", "assistant"]),
                        "content": f"turn {rng.random():.6f} " + words(rng.randint(5, 120)),
                    }
                )
        if not oversized_done and rng.random() < 0.15:
            batch.append(
                {
                    "role": "tool",
                    "type": "tool_result",
                    "tool_name": "cat",
                    "content": "\n".join(f"line {n} " + words(10, "data") for n in range(250)),
                }
            )
            oversized_done = True
        if session == gap_session and gap_seq is None and rng.random() < 0.5:
            last = memory.append_events("p", session, batch).last_seq
            gap_seq = last + 1
            memory.append_events("p", session, [{"role": "user", "seq": last + 2, "content": "after the gap"}])
        else:
            memory.append_events("p", session, batch)
        if rng.random() < 0.25:
            memory.observe("p", session)  # a forced request, deduplicated against queued ones
            queue.enqueue("observe", {"session_id": session, "force": True}, order_key=f"session:{session}")
        time.sleep(rng.uniform(0.0, 0.08))
    if gap_seq is not None:
        memory.append_events("p", gap_session, [{"role": "user", "seq": gap_seq, "content": "late: " + words(30)}])
    for session in SESSIONS:
        memory.observe("p", session)


def settle(memory: Obsmem, timeout: float) -> None:
    """Wait until nothing is queued or running, every event is covered and no reflection is due."""
    db = memory.database("p")
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        busy = db.query("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')")[0][0]
        uncovered = db.query(
            "SELECT count(*) FROM events AS e WHERE NOT EXISTS (SELECT 1 FROM coverage AS c"
            " WHERE c.session_id = e.session_id AND c.seq = e.seq AND c.final = 1)"
        )[0][0]
        due = [s for s in SESSIONS if memory.pipeline.reflect.due(db, s) is not None]
        if not busy and not uncovered and not due:
            # Quiet for longer than a housekeeping interval: nothing left to queue more work.
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.8:
                return
        else:
            quiet_since = None
        time.sleep(0.1)
    raise AssertionError(
        f"not settled after {timeout} s: {busy} jobs active, {uncovered} events uncovered, reflection due: {due}"
    )


def reflected(memory: Obsmem) -> bool:
    """Some session has a promoted generation that retired observations (a whole reflect + drop cycle)."""
    return bool(
        memory.database("p").query(
            "SELECT EXISTS (SELECT 1 FROM generations WHERE state = 'promoted' AND observations_dropped > 0)"
        )[0][0]
    )


def check_generations(memory: Obsmem) -> dict[str, int]:
    db = memory.database("p")
    assert db.query("SELECT count(*) FROM generations WHERE state = 'running'") == [(0,)]
    promoted = 0
    with db.read() as conn:
        for session in SESSIONS:
            chain = promoted_chain(conn, session)  # raises unless pointer -> ... -> generation 1
            promoted += len(chain)
            number, items = rebuild_active_memory(conn, session)
            assert number == len(chain)
            assert project(conn, session).text == render_projection(session, items, number).text, session
    # Every reflection and every drop record belongs to a promoted generation: no leftovers of killed runs.
    assert db.query(
        "SELECT count(*) FROM memories AS m WHERE m.kind = 'reflection' AND NOT EXISTS (SELECT 1 FROM"
        " generation_reflections AS gr JOIN generations AS g ON g.id = gr.generation_row"
        " WHERE gr.reflection_row = m.id AND g.state = 'promoted')"
    ) == [(0,)]
    assert db.query(
        "SELECT count(*) FROM dropped_observations AS d JOIN generations AS g ON g.id = d.generation_row"
        " WHERE g.state != 'promoted' OR g.session_id != d.session_id"
    ) == [(0,)]
    assert db.query(
        "SELECT coalesce(sum(reflections_added), 0), coalesce(sum(observations_dropped), 0) FROM generations"
    ) == db.query("SELECT (SELECT count(*) FROM generation_reflections), (SELECT count(*) FROM dropped_observations)")
    # No reflection cites a missing observation, or one of another session, or one dropped before it was made.
    assert db.query(
        "SELECT count(*) FROM reflection_supports AS s JOIN memories AS r ON r.id = s.reflection_row"
        " LEFT JOIN memories AS o ON o.id = s.observation_row"
        " WHERE o.id IS NULL OR o.kind != 'observation' OR o.session_id != r.session_id"
    ) == [(0,)]
    assert db.query(
        "SELECT count(*) FROM reflection_supports AS s"
        " JOIN generation_reflections AS gr ON gr.reflection_row = s.reflection_row"
        " JOIN generations AS made ON made.id = gr.generation_row"
        " JOIN dropped_observations AS d ON d.observation_row = s.observation_row"
        " JOIN generations AS gone ON gone.id = d.generation_row"
        " WHERE gone.number < made.number"
    ) == [(0,)]
    return {"generations": promoted, "dropped": db.query("SELECT count(*) FROM dropped_observations")[0][0]}


def check_invariants(memory: Obsmem, sampler: WatermarkSampler) -> None:
    db = memory.database("p")
    assert db.query("PRAGMA integrity_check") == [("ok",)]
    # Every event covered exactly once.
    pieces: dict[tuple[str, int], list[tuple[int, int | None, int]]] = {}
    for session, seq, start, end, final in db.query(
        "SELECT session_id, seq, part_start, part_end, final FROM coverage ORDER BY session_id, seq, part_start"
    ):
        pieces.setdefault((session, seq), []).append((start, end, final))
    events = db.query("SELECT session_id, seq, role FROM events ORDER BY session_id, seq")
    assert set(pieces) == {(s, q) for s, q, _ in events}
    for key, rows in pieces.items():
        if len(rows) == 1:
            assert rows[0] == (0, None, 1), key
        else:
            assert rows[0][0] == 0 and rows[-1][2] == 1, key
            assert all(rows[i][1] == rows[i + 1][0] for i in range(len(rows) - 1)), key
            assert all(final == 0 for _, _, final in rows[:-1]), key
    # No observation lost or duplicated.
    cited: dict[tuple[str, int], int] = {}
    for session, seq in db.query(
        "SELECT s.session_id, s.seq FROM observation_sources AS s JOIN memories AS m ON m.id = s.memory_row"
    ):
        cited[(session, seq)] = cited.get((session, seq), 0) + 1
    for session, seq, role in events:
        expected = 0 if role == "system" else len(pieces[(session, seq)])
        assert cited.get((session, seq), 0) == expected, (session, seq, role)
    # No job stranded or given up.
    states = dict(db.query("SELECT state, count(*) FROM jobs GROUP BY state"))
    assert set(states) <= {"done"}, states
    assert db.query("SELECT count(*) FROM om_events WHERE type = 'job_failed'") == [(0,)]
    # Watermark monotonic and complete; backlog counters consistent.
    assert sampler.backwards == [] and sampler.samples > 10
    for session, mark, last_seq, pending_tokens, pending_events in db.query(
        "SELECT p.session_id, p.observed_through_seq, s.last_seq, p.pending_tokens, p.pending_events"
        " FROM observer_progress AS p JOIN sessions AS s USING (session_id)"
    ):
        assert mark == last_seq, session
        assert (pending_tokens, pending_events) == (0, 0), session


def run_seed(seed: int, root: Path) -> dict[str, int]:
    rng = random.Random(seed)
    data = root / f"seed-{seed}"
    logs = root / f"logs-{seed}"
    data.mkdir(parents=True)
    logs.mkdir()
    jitter_rng = random.Random(seed * 7919)
    lock = threading.Lock()

    def jitter() -> float:
        with lock:
            return jitter_rng.uniform(0.0, 0.25)

    def short_jitter() -> float:
        with lock:
            return jitter_rng.uniform(0.0, 0.1)

    script = PipelineScript(
        ObserverScript(jitter=jitter),
        ReflectorScript(group=3, jitter=short_jitter),
        DropperScript(jitter=short_jitter),
    )
    with ScriptedChatServer(script) as server:
        (data / "obsmem.toml").write_text(SETTINGS_TOML.format(base_url=server.base_url, lease=LEASE_SECONDS))
        memory = Obsmem(load_settings(data_dir=data))
        memory.append_events("p", "alpha", [{"role": "user", "content": "hello"}])  # create the project
        workers = Workers(data, logs)
        sampler = WatermarkSampler(memory)
        sampler.start()
        disruptions = rng.randint(1, 3)
        outcomes = {"kills": 0, "stalls": 0}
        plan = sorted(rng.uniform(0.3, 4.5) for _ in range(disruptions))

        def busy_slot(kind: str | None) -> int:
            """The worker running a job (of ``kind``) right now: most disruptions should hit work in flight."""
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                owners = memory.database("p").query(
                    "SELECT lease_owner FROM jobs WHERE state = 'running' AND kind = coalesce(?, kind)", (kind,)
                )
                pids = {int(owner.split(":")[1]) for (owner,) in owners}
                for slot, proc in enumerate(workers.procs):
                    if proc.pid in pids:
                        return slot
                time.sleep(0.01)
            return rng.randrange(2)

        def disrupt() -> None:
            started = time.monotonic()
            for at in plan:
                time.sleep(max(0.0, at - (time.monotonic() - started)))
                roll = rng.random()
                # Half the disruptions wait for a Reflector/Dropper run in flight, most others hit any job.
                slot = busy_slot("reflect") if roll < 0.5 else busy_slot(None) if roll < 0.85 else rng.randrange(2)
                if rng.random() < 0.6:
                    workers.kill(slot)
                    outcomes["kills"] += 1
                else:
                    workers.stall(slot, LEASE_SECONDS * rng.uniform(1.5, 2.5))
                    outcomes["stalls"] += 1

        chaos = threading.Thread(target=disrupt, daemon=True)
        chaos.start()
        try:
            workload(memory, rng, seconds=4.0)
            # On a loaded machine the Observer sees fewer, larger chunks and writes fewer observations, so
            # the pool may stay under the reflection threshold: keep the conversation going (bounded)
            # until a Reflector + Dropper cycle has been promoted, so every seed exercises all three jobs.
            deadline = time.monotonic() + 60
            while not reflected(memory) and time.monotonic() < deadline:
                workload(memory, rng, seconds=1.0)
                waited = time.monotonic() + 3.0
                while not reflected(memory) and time.monotonic() < waited:
                    time.sleep(0.1)
            chaos.join(timeout=60)
            settle(memory, timeout=120)
            sampler.stop_event.set()
            sampler.join(timeout=10)
            check_invariants(memory, sampler)
            counts = {
                **check_generations(memory),
                "events": memory.database("p").query("SELECT count(*) FROM events")[0][0],
                "model_calls": len(script.models),
                **outcomes,
                "retried_jobs": memory.database("p").query("SELECT count(*) FROM jobs WHERE attempts > 1")[0][0],
                "retried_reflect_jobs": memory.database("p").query(
                    "SELECT count(*) FROM jobs WHERE attempts > 1 AND kind = 'reflect'"
                )[0][0],
                "taken_over": memory.database("p").query("SELECT count(*) FROM generations WHERE claims > 1")[0][0],
                "fenced_out": memory.database("p").query(
                    "SELECT count(*) FROM om_events WHERE type IN ('om_observation_failed', 'om_reflection_failed')"
                    " AND (json_extract(data, '$.error') LIKE 'lease_lost%'"
                    "  OR json_extract(data, '$.error') LIKE 'generation_lost%')"
                )[0][0],
            }
        finally:
            sampler.stop_event.set()
            workers.stop()
            memory.close()
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_seeded_interleaving_keeps_every_invariant(seed: int, tmp_path: Path) -> None:
    counts = run_seed(1000 + seed, tmp_path)
    assert counts["events"] > 20 and counts["model_calls"] > 3
    assert counts["kills"] + counts["stalls"] >= 1
    assert counts["generations"] >= 1 and counts["dropped"] >= 1, counts
