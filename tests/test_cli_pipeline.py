"""The pipeline's CLI commands: view, observe, events, status (with --session and --live), worker."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from obsmem.surfaces.cli import cli
from support.pipeline_service import user, words
from support.scripted_chat import ScriptedChatServer

SETTINGS = """
[model]
base_url = "{url}"
model_id = "scripted"
max_retries = 0

[observer]
buffer_tokens = 100

[jobs]
poll_seconds = 0.05
retry_backoff_seconds = 0.01
"""


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


@pytest.fixture
def data_dir(tmp_path: Path, server: ScriptedChatServer) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "obsmem.toml").write_text(SETTINGS.format(url=server.base_url))
    return data


def transcript(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(user(f"message {i}: " + words(60))) + "\n" for i in range(n)))
    return path


def run_worker_until(data_dir: Path, condition: str, timeout: float = 30) -> None:
    """Start `obsmem worker`, wait until ``condition`` (SQL returning one truthy value), stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "obsmem.surfaces.cli", "--data-dir", str(data_dir), "worker", "--grace", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    import apsw

    db = apsw.Connection(str(data_dir / "projects" / "p" / "obsmem.db"))
    db.set_busy_timeout(5000)
    try:
        deadline = time.monotonic() + timeout
        while not db.execute(condition).fetchone()[0]:
            assert time.monotonic() < deadline, "the worker did not finish in time"
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        db.close()
    assert proc.returncode == 0, stderr
    assert b"worker stopping" in stderr and b"message 0" not in stderr  # no conversation text in logs


def test_worker_observes_and_view_prints_the_memory(data_dir: Path, tmp_path: Path) -> None:
    ok(run(data_dir, "ingest", "p", str(transcript(tmp_path)), "--session", "s1"))
    empty = ok(run(data_dir, "view", "p", "s1"))
    assert empty.stdout == "" and "No memory yet" in empty.stderr
    assert json.loads(ok(run(data_dir, "view", "p", "s1", "--json")).stdout)["empty"] is True

    run_worker_until(data_dir, "SELECT count(*) = 4 FROM coverage")
    shown = ok(run(data_dir, "view", "p", "s1")).stdout
    assert shown.startswith('<obsmem-memory session="s1">') and "Observations:" in shown
    assert "recall" in shown and shown.count("[medium]") == 4
    data = json.loads(ok(run(data_dir, "view", "p", "s1", "--json")).stdout)
    assert data["observations"] == 4 and not data["empty"] and data["text"] == shown.rstrip("\n")
    first_id = shown.split("- [", 1)[1][:12]
    assert "event" in ok(run(data_dir, "recall", "p", first_id)).stdout


def test_observe_queues_once_and_events_lists_the_cycle(data_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "short.jsonl"
    path.write_text(json.dumps(user("deploy target is eu-west-1")) + "\n")
    ok(run(data_dir, "ingest", "p", str(path), "--session", "s1"))
    first = json.loads(ok(run(data_dir, "observe", "p", "s1", "--json")).stdout)
    again = json.loads(ok(run(data_dir, "observe", "p", "s1", "--json")).stdout)
    assert first["queued"] and not again["queued"] and again["job_id"] == first["job_id"]
    assert "already queued" in ok(run(data_dir, "observe", "p", "s1")).stdout
    run_worker_until(data_dir, "SELECT count(*) = 1 FROM coverage")
    lines = ok(run(data_dir, "events", "p", "--json")).stdout.splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds == ["om_observation_start", "om_observation_end"]
    table = ok(run(data_dir, "events", "p", "--session", "s1")).stdout
    assert "om_observation_end" in table and "1 observations" in table
    after = json.loads(lines[0])["id"]
    assert len(ok(run(data_dir, "events", "p", "--after-id", str(after), "--json")).stdout.splitlines()) == 1


def test_events_says_when_there_are_none_and_json_prints_no_lines(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(run(data, "ingest", "p", str(transcript(tmp_path, 1)), "--session", "s1"))
    assert ok(run(data, "events", "p")).stdout == "No pipeline events in p.\n"
    narrowed = ok(run(data, "events", "p", "--session", "s1", "--after-id", "7")).stdout
    assert narrowed == "No pipeline events of session s1 in p after id 7.\n"
    as_json = ok(run(data, "events", "p", "--json"))
    assert as_json.stdout == "" and as_json.stderr == ""  # JSON Lines: no events, no lines


def test_status_of_a_session_and_of_projects(data_dir: Path, tmp_path: Path) -> None:
    ok(run(data_dir, "ingest", "p", str(transcript(tmp_path)), "--session", "s1"))
    state = json.loads(ok(run(data_dir, "status", "p", "--session", "s1", "--json")).stdout)
    assert state["status"] == "idle" and state["pending_tokens"] > 100 and state["jobs"]["queued"] == 1
    assert set(state) >= {
        "status",
        "pending_tokens",
        "threshold",
        "threshold_percent",
        "observation_tokens",
        "reflection_threshold",
        "generation_count",
        "current_activity",
        "last_error",
    }
    shown = ok(run(data_dir, "status", "p", "--session", "s1")).stdout
    assert "Session s1 of p: idle" in shown and "Backlog" in shown and "1 queued" in shown
    project = json.loads(ok(run(data_dir, "status", "p", "--json")).stdout)
    assert project["observer"] == "enabled" and project["jobs"]["queued"] == 1 and project["events"] == 4
    assert "background observation enabled; jobs 1 queued" in ok(run(data_dir, "status")).stdout


def test_status_usage_errors(data_dir: Path) -> None:
    assert run(data_dir, "status", "--session", "s1").exit_code == 2
    assert run(data_dir, "status", "p", "--session", "s1", "--live", "--json").exit_code == 2
    missing = run(data_dir, "status", "nope", "--session", "s1")
    assert missing.exit_code == 1 and "project_not_found" in missing.stderr


def test_observe_without_a_model_fails_clearly(tmp_path: Path) -> None:
    data = tmp_path / "plain"
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(user("hello")) + "\n")
    ok(run(data, "ingest", "p", str(path), "--session", "s1"))
    result = run(data, "observe", "p", "s1")
    assert result.exit_code == 1 and "observation_off" in result.stderr
    reflect = run(data, "reflect", "p", "s1")
    assert reflect.exit_code == 1 and "reflection_off" in reflect.stderr
    for refused in (result, reflect):  # says what to set, and speaks of no server to a CLI user
        assert "set base_url and model_id under [model]" in refused.stderr and "server" not in refused.stderr
    assert json.loads(ok(run(data, "status", "p", "--session", "s1", "--json")).stdout)["observer"] == (
        "not_configured"
    )


def test_live_status_redraws_until_interrupted(data_dir: Path, tmp_path: Path) -> None:
    import pty

    ok(run(data_dir, "ingest", "p", str(transcript(tmp_path)), "--session", "s1"))
    controller, terminal = pty.openpty()  # a terminal, so the view really redraws
    proc = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "obsmem.surfaces.cli",
            "--data-dir",
            str(data_dir),
            "status",
            "p",
            "--session",
            "s1",
            "--live",
            "--interval",
            "0.1",
        ],
        stdout=terminal,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + 60
    try:
        while shown.count(b"Backlog") < 3 and time.monotonic() < deadline:  # several redraws
            ready = select.select([controller], [], [], 0.5)[0]
            if ready:
                shown += os.read(controller, 65536)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        os.close(controller)
    assert shown.count(b"Backlog") >= 3 and b"Session s1 of p" in shown
    assert proc.returncode == 0, stderr
