"""kill -9 during ingestion: every acknowledged write survives, nothing partial, the file stays sound."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from obsmem.projects import ProjectRegistry
from support.processes import support_command, support_environment

ROUNDS = 25


def _run_and_kill(data_dir: Path, seed: int, rng: random.Random) -> list[str]:
    proc = subprocess.Popen(
        support_command("crash_writer", str(data_dir), str(seed)),
        env=support_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acks: list[str] = []
    reader = threading.Thread(target=lambda: acks.extend(line.strip() for line in proc.stdout), daemon=True)  # type: ignore[union-attr]
    reader.start()
    # Wait until the writer is really writing, then kill it at a random moment.
    deadline = time.monotonic() + 30
    while not acks and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
    time.sleep(rng.uniform(0.0, 0.4))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    return acks


@pytest.mark.slow
def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    acked_events: list[tuple[str, int, int]] = []
    acked_memories: set[str] = set()
    for round_number in range(ROUNDS):
        for line in _run_and_kill(tmp_path, round_number, rng):
            kind, *rest = line.split()
            if kind == "E":
                acked_events.append((rest[0], int(rest[1]), int(rest[2])))
            elif kind == "O":
                acked_memories.add(rest[0])
        registry = ProjectRegistry(tmp_path)
        db = registry.get("crash")
        try:
            assert db.query("PRAGMA integrity_check") == [("ok",)]
            db.connection().execute("INSERT INTO memory_trigrams(memory_trigrams) VALUES ('integrity-check')")
            for session, first, last in acked_events:
                count = db.query(
                    "SELECT count(*) FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?", (session, first, last)
                )[0][0]
                assert count == last - first + 1, (round_number, session, first, last)
            # Batches are all or nothing: seqs are contiguous and the session row agrees with the events.
            for session, last_seq, event_count, stored, top in db.query(
                "SELECT s.session_id, s.last_seq, s.event_count, count(e.id), max(e.seq)"
                " FROM sessions s JOIN events e USING (session_id) GROUP BY s.session_id"
            ):
                assert last_seq == event_count == stored == top, session
            stored_ids = {row[0] for row in db.query("SELECT memory_id FROM memories")}
            assert acked_memories <= stored_ids
            assert db.query(
                "SELECT count(*) FROM memories m WHERE NOT EXISTS"
                " (SELECT 1 FROM observation_sources s WHERE s.memory_row = m.id)"
            ) == [(0,)]
        finally:
            registry.close()
    assert len(acked_events) > ROUNDS and acked_memories
