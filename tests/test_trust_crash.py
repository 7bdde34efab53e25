"""kill -9 during a groom pass: the ledger and the notes agree afterwards, and no promotion is half-applied."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.faults import CRASH_ENV
from obsmem.settings import load_settings
from obsmem.trust.ledger import ledger_entries, record_judgment
from support.processes import support_command, support_environment

NOTES = 6


def _prepare(data: Path) -> None:
    """Six candidates (every other one an update of a trusted note) whose judgments resolved true."""
    with Obsmem(load_settings(data_dir=data)) as service:
        originals = [service.save_note("app", f"original fact {n}").note for n in range(NOTES // 2)]
        db = service.database("app")
        with db.write() as conn:
            conn.execute("UPDATE notes SET status = 'trusted'")  # as if promoted by an earlier pass
        for n, original in enumerate(originals):
            service.save_note("app", f"new fact {n}")
            service.update_note("app", original.id, f"corrected fact {n}")
        with db.write() as conn:
            candidates = conn.execute("SELECT note_id FROM notes WHERE status = 'candidate' ORDER BY id").fetchall()
            for n, (note_id,) in enumerate(candidates):
                record_judgment(conn, f"j{n:016x}", note_id, "fact", "human", None, "escalate", None)
        for n in range(len(candidates)):
            service.resolve_judgment("app", f"j{n:016x}", True)


def _groom(data: Path, crash_at: str | None) -> int:
    env = support_environment()
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run(support_command("groom_runner", str(data)), env=env, timeout=120, check=False).returncode


def _agree(data: Path) -> tuple[int, int]:
    """Check the notes against the ledger; return (trusted candidates promoted so far, superseded)."""
    with Obsmem(load_settings(data_dir=data)) as service, service.database("app").read() as conn:
        entries = ledger_entries(conn)
        statuses = dict(conn.execute("SELECT note_id, status FROM notes").fetchall())
        supersedes = dict(conn.execute("SELECT note_id, supersedes FROM notes").fetchall())
    promoted = [entry["note_id"] for entry in entries if entry["entry"] == "promoted"]
    superseded = [entry["note_id"] for entry in entries if entry["entry"] == "superseded"]
    assert len(promoted) == len(set(promoted))
    assert all(statuses[note_id] in ("trusted", "superseded") for note_id in promoted)
    # Every candidate with a resolved judgment is either still a candidate with no promotion, or promoted.
    judged = {entry["note_id"] for entry in entries if entry["entry"] == "resolved"}
    for note_id in judged:
        assert (statuses[note_id] == "candidate") == (note_id not in promoted)
    # A note is superseded exactly when the update that replaces it was promoted.
    replaced_by_promotion = {supersedes[note_id] for note_id in promoted if supersedes[note_id]}
    assert set(superseded) == replaced_by_promotion
    assert {note_id for note_id, status in statuses.items() if status == "superseded"} == replaced_by_promotion
    return len(promoted), len(superseded)


@pytest.mark.parametrize("crash_at", ["groom:note-promoted", "groom:committed"])
def test_kill_9_during_groom_leaves_the_ledger_and_the_notes_in_agreement(tmp_path: Path, crash_at: str) -> None:
    data = tmp_path / "data"
    _prepare(data)
    assert _groom(data, crash_at) == -signal.SIGKILL
    promoted, _ = _agree(data)
    assert promoted == (0 if crash_at == "groom:note-promoted" else 1)
    assert _groom(data, None) == 0
    assert _agree(data) == (NOTES, NOTES // 2)


def test_a_user_tier_judgment_killed_before_its_project_copy_gets_the_copy_on_retry(tmp_path: Path) -> None:
    """The user tier's database commits the judgment first; a worker killed before the project's copy is
    written leaves the job to a retry, which writes the copy and its event instead of skipping the note."""
    data = tmp_path / "data"
    settings = load_settings(data_dir=data, jobs={"lease_seconds": 0.5})
    with Obsmem(settings) as service:
        service.append_events("app", "s1", [{"role": "user", "content": "hello"}])
        note = service.save_note("app", "I review pull requests before lunch", tier="user").note
        service.search("app", "pull requests", trust="all")
        service.trust.dispatcher.flush()
        assert service.jobs("app").counts.queued == 1
    env = support_environment()
    env[CRASH_ENV] = "judging:user-recorded"
    killed = subprocess.run(support_command("judge_runner", str(data)), env=env, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL
    env.pop(CRASH_ENV)
    done = subprocess.run(support_command("judge_runner", str(data)), env=env, timeout=120, check=False)
    assert done.returncode == 0
    with Obsmem(settings) as service:
        [judgment] = service.judgments("app").judgments
        with service.database("app").read() as conn:
            copied = [(e["entry"], e["tier"], e["judgment_id"]) for e in ledger_entries(conn, note.note_id)]
            logged = conn.execute(
                "SELECT count(*) FROM om_events WHERE type = 'trust_judgment' AND data LIKE ?",
                (f"%{judgment.judgment_id}%",),
            ).fetchone()[0]
    assert copied == [("judged", "user", judgment.judgment_id)]
    assert logged == 1
