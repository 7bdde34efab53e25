"""kill -9 during ingestion: every acknowledged write survives, nothing partial, the storage stays sound."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem.app import Obsmem
from obsmem.projects import ProjectRegistry
from support.http_server import free_port, settings_for, storage_toml, write_config
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


# -- kill -9 of a server, on either backend ---------------------------------------------------------
#
# The test above is SQLite's by nature: it checks the file (integrity_check, the FTS index) after a writer
# process dies. The one below kills an HTTP server instead, on each backend: whatever the server answered
# 200 for must be stored, whole, once it is started again on the same storage.

SERVER_ROUNDS = 4
WRITERS = 3


def _start_server(tmp_path: Path, storage: dict[str, Any], round_number: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = write_config(tmp_path / f"server-{round_number}.toml", keys=[], extra=storage_toml(storage))
    command = [sys.executable, "-m", "obsmem.surfaces.http", "--config", str(config)]
    command += ["--data-dir", str(tmp_path / "data"), "--port", str(port)]
    env = {name: value for name, value in os.environ.items() if not name.startswith("OBSMEM_")}
    with open(tmp_path / f"server-{round_number}.log", "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, (tmp_path / f"server-{round_number}.log").read_text(errors="replace")[-2000:]
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/v1/health", timeout=1.0).status_code == 200:
                return process, base
        assert time.monotonic() < deadline, "the server did not answer /v1/health within 60 s"
        time.sleep(0.1)


class _Writer:
    """Appends batches (and observations citing them) until the server goes away; records what was acknowledged."""

    def __init__(self, base: str, name: str, seed: int) -> None:
        self.base, self.session, self.rng = base, name, random.Random(seed)
        self.batches: list[tuple[str, int, int]] = []
        self.memories: set[str] = set()
        self.failure: BaseException | None = None  # anything but the server going away fails the test
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as failure:  # noqa: BLE001 (reported by the test's thread)
            self.failure = failure

    def _write(self) -> None:
        project = f"{self.base}/v1/projects/crash"
        with httpx.Client(timeout=30) as client, contextlib.suppress(httpx.HTTPError):
            for batch in itertools.count(1):
                size = self.rng.randint(1, 40)
                events = [
                    {"role": self.rng.choice(["user", "assistant"]), "content": f"batch {batch} item {i} " + "x" * i}
                    for i in range(size)
                ]
                response = client.post(f"{project}/sessions/{self.session}/events", json={"events": events})
                assert response.status_code == 200, response.text
                receipt = response.json()
                self.batches.append((self.session, receipt["last_seq"] - receipt["appended"] + 1, receipt["last_seq"]))
                items = [
                    {
                        "session_id": self.session,
                        "timestamp": f"2026-0{self.rng.randint(1, 9)}-1{self.rng.randint(0, 9)} 10:00",
                        "content": f"observation {self.session}-{batch}-{k} about MapToolArguments",
                        "source_refs": [receipt["last_seq"]],
                    }
                    for k in range(self.rng.randint(1, 4))
                ]
                response = client.post(f"{project}/observations", json={"observations": items})
                assert response.status_code == 200 and not response.json()["rejected"], response.text
                self.memories.update(entry["memory_id"] for entry in response.json()["added"])


def _check_acknowledged(service: Obsmem, batches: list[tuple[str, int, int]], memories: set[str]) -> None:
    db = service.database("crash")
    for session, first, last in batches:
        count = db.query(
            "SELECT count(*) FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?", (session, first, last)
        )[0][0]
        assert count == last - first + 1, (session, first, last)
    # Batches are all or nothing: seqs are contiguous and the session row agrees with the events.
    for session, last_seq, event_count, stored, top in db.query(
        "SELECT s.session_id, s.last_seq, s.event_count, count(e.id), max(e.seq)"
        " FROM sessions s JOIN events e USING (session_id) GROUP BY s.session_id, s.last_seq, s.event_count"
    ):
        assert last_seq == event_count == stored == top, session
    assert memories <= {row[0] for row in db.query("SELECT memory_id FROM memories")}
    orphans = db.query(
        "SELECT count(*) FROM memories m WHERE NOT EXISTS"
        " (SELECT 1 FROM observation_sources s WHERE s.memory_row = m.id)"
    )
    assert orphans == [(0,)]


@pytest.mark.slow
def test_acknowledged_http_writes_survive_kill_9_of_the_server(tmp_path: Path, backend_storage: dict[str, Any]) -> None:
    storage = backend_storage.get("storage", {})
    rng = random.Random(20261202)
    batches: list[tuple[str, int, int]] = []
    memories: set[str] = set()
    for round_number in range(SERVER_ROUNDS):
        process, base = _start_server(tmp_path, storage, round_number)
        writers = [_Writer(base, f"r{round_number}-w{k}", rng.randrange(2**32)) for k in range(WRITERS)]
        for writer in writers:
            writer.thread.start()
        deadline = time.monotonic() + 30
        while not all(w.batches or w.failure for w in writers) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.5))
        process.kill()  # SIGKILL, mid-request for some writer
        process.wait(timeout=30)
        for writer in writers:
            writer.thread.join(timeout=60)
            assert not writer.thread.is_alive() and writer.failure is None, writer.failure
            batches += writer.batches
            memories |= writer.memories
        # Started again on the same storage: everything acknowledged so far is there.
        with Obsmem(settings_for(tmp_path, storage=storage)) as service:
            _check_acknowledged(service, batches, memories)
    assert len(batches) > SERVER_ROUNDS * WRITERS and memories
