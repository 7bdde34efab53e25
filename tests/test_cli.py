"""The `obsmem` command line: run the commands, then open the real database and check what they did."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import click
import httpx
import pytest
from click.testing import CliRunner, Result

from obsmem import __version__
from obsmem.app import Obsmem
from obsmem.retrieval import MODES
from obsmem.surfaces.cli import COMMANDS, cli
from obsmem.surfaces.cli import search as search_command

ROOT = Path(__file__).resolve().parent.parent

CHAT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "The login test fails with KeyError in auth/session.py:42"},
    {
        "role": "assistant",
        "content": "Reading the file first.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "auth/session.py", "start": 30}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def load(token):\n    return SESSIONS[token]"},
    {"role": "assistant", "content": "Decided: SESSIONS.get(token) and raise AuthExpired [bold]x[/bold]."},
]
# seq: 1 system, 2 user, 3 assistant text, 4 tool_call, 5 tool_result, 6 assistant decision


def observation(content: str, timestamp: str, refs: list[Any], **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "content": content, "timestamp": timestamp, "source_refs": refs, **extra}


OBSERVATIONS = [
    observation(
        "User reported KeyError in auth/session.py:42 in the login test",
        "2025-03-04 10:12",
        [2],
        importance="high",
    ),
    observation(
        "Decided SESSIONS.get(token) and raise AuthExpired [bold]x[/bold]",
        "2025-03-05 11:00",
        [4, 5, 6],
        importance="critical",
    ),
    observation("Agent read auth/session.py from line 30", "2025-03-04 10:13", [4]),
]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def database(data_dir: Path, project: str) -> apsw.Connection:
    path = data_dir / "projects" / project / "obsmem.db"
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)


@pytest.fixture
def loaded(data_dir: Path, tmp_path: Path) -> Path:
    """A project `proj` with the chat transcript (session s1) and its three observations."""
    ok(run(data_dir, "ingest", "proj", str(write_jsonl(tmp_path / "chat.jsonl", CHAT)), "--session", "s1"))
    ok(
        run(
            data_dir,
            "ingest",
            "proj",
            "--observations",
            str(write_jsonl(tmp_path / "obs.jsonl", OBSERVATIONS)),
        )
    )
    return data_dir


# -- ingest -------------------------------------------------------------------------------------------------


def test_the_version_has_one_source() -> None:
    # The package metadata (pyproject's dynamic version) and `obsmem --version` both read obsmem.__version__.
    assert importlib.metadata.version("obsmem") == __version__
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"obsmem, version {__version__}"


def test_dash_h_is_help_for_the_group_and_for_a_command() -> None:
    # The group looks at argv before click parses it; that look must not leave the group with `--help` only.
    for args in (["-h"], ["--help"], ["search", "-h"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
        assert result.output.startswith("Usage: "), args
    assert "-h, --help" in CliRunner().invoke(cli, ["--help"]).output


def test_ingest_openai_messages_keeps_tool_names_and_parsed_arguments(data_dir: Path, tmp_path: Path) -> None:
    result = ok(
        run(
            data_dir,
            "ingest",
            "proj",
            str(write_jsonl(tmp_path / "chat.jsonl", CHAT)),
            "--session",
            "s1",
            "--json",
        )
    )
    receipt = json.loads(result.stdout)["events"]
    assert receipt == {
        "events": 6,
        "appended": 6,
        "duplicates": 0,
        "sessions": {"s1": {"appended": 6, "duplicates": 0, "last_seq": 6}},
        "problems": {},
        "problem_lines": [],
    }
    rows = (
        database(data_dir, "proj")
        .execute("SELECT seq, role, type, content, tool_name, tool_args, tool_call_id FROM events ORDER BY seq")
        .fetchall()
    )
    assert [(r[1], r[2]) for r in rows] == [
        ("system", "message"),
        ("user", "message"),
        ("assistant", "message"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "message"),
    ]
    call, answer = rows[3], rows[4]
    assert call[4] == "read_file" and json.loads(call[5]) == {"path": "auth/session.py", "start": 30}
    assert call[6] == "call_1"
    assert answer[4] == "read_file" and answer[3] == "def load(token):\n    return SESSIONS[token]"


def test_ingest_obsmem_events_with_their_own_sessions_and_reingest_is_idempotent(
    data_dir: Path, tmp_path: Path
) -> None:
    events = [
        {"session_id": "a", "role": "user", "type": "message", "content": "run the tests"},
        {
            "session_id": "a",
            "role": "assistant",
            "type": "tool_call",
            "tool_name": "bash",
            "tool_args": {"cmd": "pytest -x"},
        },
        {
            "session_id": "b",
            "seq": 7,
            "role": "tool",
            "type": "tool_result",
            "tool_name": "bash",
            "content": "1 failed",
            "created_at": "2025-03-04T10:12:00Z",
        },
    ]
    path = write_jsonl(tmp_path / "events.jsonl", events)
    first = ok(run(data_dir, "ingest", "proj", str(path)))
    assert "3 appended" in first.stdout and "session" in first.stdout
    again = json.loads(ok(run(data_dir, "ingest", "proj", str(path), "--json")).stdout)["events"]
    assert again["appended"] == 0 and again["duplicates"] == 3
    conn = database(data_dir, "proj")
    assert conn.execute("SELECT session_id, seq FROM events ORDER BY session_id, seq").fetchall() == [
        ("a", 1),
        ("a", 2),
        ("b", 7),
    ]
    assert conn.execute("SELECT session_id, event_count, last_seq FROM sessions ORDER BY 1").fetchall() == [
        ("a", 2, 2),
        ("b", 1, 7),
    ]
    assert conn.execute("SELECT created_at FROM events WHERE seq = 7").fetchone()[0] == "2025-03-04T10:12:00.000Z"


def test_ingest_observations_prints_the_receipt_and_exits_1_on_rejections(data_dir: Path, tmp_path: Path) -> None:
    ok(run(data_dir, "ingest", "proj", str(write_jsonl(tmp_path / "chat.jsonl", CHAT)), "--session", "s1"))
    lines: list[Any] = [
        OBSERVATIONS[0],  # 0 added
        OBSERVATIONS[1],  # 1 added
        "",  # 2 blank: skipped
        "{not json",  # 3 rejected
        observation("cites nothing real", "2025-03-04 10:12", [99]),  # 4 unknown_source_ref
        OBSERVATIONS[0],  # 5 duplicate of 0
        observation("impossible day", "2025-02-30 10:12", [2]),  # 6 invalid date
        {**observation("other session", "2025-03-04 10:12", [1]), "session_id": "ghost"},  # 7
    ]
    path = write_jsonl(tmp_path / "obs.jsonl", lines)
    result = run(data_dir, "ingest", "proj", "--observations", str(path), "--json")
    assert result.exit_code == 1
    assert "rejected" in result.stderr
    receipt = json.loads(result.stdout)["observations"]
    assert [e["index"] for e in receipt["added"]] == [0, 1]
    assert all(len(e["id"]) == 12 and e["memory_id"].startswith(e["id"]) for e in receipt["added"])
    assert [(e["index"], e["id"]) for e in receipt["duplicates"]] == [(5, receipt["added"][0]["id"])]
    assert [(e["index"], e["code"]) for e in receipt["rejected"]] == [
        (3, "invalid_request"),
        (4, "unknown_source_ref"),
        (6, "invalid_request"),
        (7, "session_not_found"),
    ]
    assert receipt["rejected"][0]["message"].startswith("line 4: not valid JSON")
    assert receipt["rejected"][2]["message"].startswith("observations.6.timestamp")
    stored = database(data_dir, "proj").execute("SELECT memory_id, importance FROM memories ORDER BY date").fetchall()
    assert stored == [
        (receipt["added"][0]["memory_id"], "high"),
        (receipt["added"][1]["memory_id"], "critical"),
    ]

    table = run(data_dir, "ingest", "proj", "--observations", str(path))
    assert table.exit_code == 1
    assert "0 added, 3 already stored, 4 rejected" in table.stdout
    assert "unknown_source_ref" in table.stdout and "session_not_found" in table.stdout


def test_ingest_events_and_observations_in_one_command(data_dir: Path, tmp_path: Path) -> None:
    result = ok(
        run(
            data_dir,
            "ingest",
            "proj",
            str(write_jsonl(tmp_path / "chat.jsonl", CHAT)),
            "--session",
            "s1",
            "--observations",
            str(write_jsonl(tmp_path / "obs.jsonl", OBSERVATIONS)),
            "--json",
        )
    )
    both = json.loads(result.stdout)
    assert both["events"]["appended"] == 6 and len(both["observations"]["added"]) == 3


def test_a_bad_transcript_stores_nothing_and_names_the_line(data_dir: Path, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [CHAT[1], {"role": "robot", "content": "?"}])
    result = run(data_dir, "ingest", "proj", str(path), "--session", "s1")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: invalid_request: line 2:")
    assert not (data_dir / "projects" / "proj").exists()  # nothing stored, not even an empty project


def test_ingesting_a_different_transcript_over_a_session_is_a_conflict(loaded: Path, tmp_path: Path) -> None:
    other = write_jsonl(tmp_path / "other.jsonl", [{"role": "user", "content": "something else"}])
    result = run(loaded, "ingest", "proj", str(other), "--session", "s1")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: seq_conflict: ")
    assert database(loaded, "proj").execute("SELECT count(*) FROM events").fetchone()[0] == 6


def test_ingest_usage_errors(data_dir: Path, tmp_path: Path) -> None:
    nothing = run(data_dir, "ingest", "proj")
    assert nothing.exit_code == 2 and "give a FILE" in nothing.stderr
    missing = run(data_dir, "ingest", "proj", str(tmp_path / "missing.jsonl"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    path = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    bad_project = run(data_dir, "ingest", "../etc", str(path), "--session", "s1")
    assert bad_project.exit_code == 2 and bad_project.stderr.startswith("error: invalid_project: ")
    bad_session = run(data_dir, "ingest", "proj", str(path), "--session", "no spaces")
    assert bad_session.exit_code == 2 and bad_session.stderr.startswith("error: invalid_session: --session")
    no_session = run(data_dir, "ingest", "proj", str(path))  # chat messages carry no session_id
    assert no_session.exit_code == 2 and "line 1: no session_id" in no_session.stderr
    assert "--session SESSION" in no_session.stderr  # the error says what to do
    assert not (data_dir / "projects").exists()


def test_import_progress_reports_bytes_then_events(data_dir: Path, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", CHAT * 1)
    reports: list[tuple[str, int, int]] = []
    with Obsmem(data_dir=data_dir) as service:
        service.import_jsonl("proj", path, "s1", progress=lambda *report: reports.append(report))
    size = path.stat().st_size
    assert reports[0] == ("read", size, size)
    assert reports[-1] == ("store", 6, 6)


def test_the_progress_bar_follows_both_phases(capsys: pytest.CaptureFixture[str]) -> None:
    from obsmem.surfaces.cli_render import file_progress

    with file_progress(False) as nothing:
        assert nothing is None
    with file_progress(True) as report:
        assert report is not None
        report("read", 2048, 4096)
        report("read", 4096, 4096)
        report("store", 10, 10)
    assert capsys.readouterr().out == ""  # the bar never mixes into the data on stdout


def test_an_unusable_data_directory_is_an_io_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    result = run(blocker / "data", "ingest", "proj", str(write_jsonl(tmp_path / "c.jsonl", CHAT)), "--session", "s")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: io_error: Not a directory") and "Traceback" not in result.stderr


# -- search -------------------------------------------------------------------------------------------------


def test_search_prints_a_table_and_json(loaded: Path) -> None:
    table = ok(run(loaded, "search", "proj", "keyerror")).stdout
    assert "1 hit (exact mode, newest first)" in table
    as_json = json.loads(ok(run(loaded, "search", "proj", "keyerror", "--json")).stdout)
    assert as_json["mode"] == "exact" and as_json["truncated"] is False and as_json["partial"] is False
    [hit] = as_json["hits"]
    assert hit["id"] in table and "2025-03-04 10:12" in table and "high" in table
    assert set(hit) == {"id", "memory_id", "kind", "session_id", "date", "importance", "content"}

    markup = ok(run(loaded, "search", "proj", "[bold]")).stdout
    assert "[bold]x[/bold]" in markup  # user text is shown as written, never as rich markup


def test_search_options_reach_the_search(loaded: Path) -> None:
    def dates(*args: str) -> list[str]:
        return [h["date"] for h in json.loads(ok(run(loaded, "search", "proj", *args, "--json")).stdout)["hits"]]

    assert dates("auth/session") == ["2025-03-04 10:13", "2025-03-04 10:12"]
    assert dates("a") == ["2025-03-05 11:00", "2025-03-04 10:13", "2025-03-04 10:12"]
    assert dates("a", "--before", "2025-03-04 10:12") == ["2025-03-04 10:12"]
    assert dates("a", "--after", "2025-03-05") == ["2025-03-05 11:00"]
    assert dates("a", "--session", "s1") == dates("a")
    assert dates("a", "--session", "other") == []
    limited = json.loads(ok(run(loaded, "search", "proj", "a", "--limit", "1", "--json")).stdout)
    assert len(limited["hits"]) == 1 and limited["truncated"] is True
    assert "More memories matched" in ok(run(loaded, "search", "proj", "a", "--limit", "1")).stdout
    assert "No memory matched" in ok(run(loaded, "search", "proj", "zebra")).stdout


def test_search_mode_choices_and_default_follow_the_retrieval_modes(data_dir: Path) -> None:
    """The --mode choices come from the retrieval layer and the help names the default of the loaded settings
    (test_cli_hybrid.py covers the others), so a new mode or the default can never be misdescribed."""
    mode = next(p for p in search_command.params if p.name == "mode")
    assert isinstance(mode.type, click.Choice) and tuple(mode.type.choices) == MODES
    text = " ".join(ok(run(data_dir, "search", "--help")).stdout.split())
    assert "[default: exact (no [semantic] section)]" in text
    assert "[default: exact]" not in text
    refused = run(data_dir, "search", "proj", "x", "--mode", "fuzzy")
    assert refused.exit_code == 2 and "fuzzy" in refused.output


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["search", "nope", "x"], "project_not_found", 1),
        (["search", "proj", "x", "--after", "2025-02-30"], "invalid_date", 2),
        (["search", "proj", "x", "--after", "2025-03-05", "--before", "2025-03-04"], "invalid_date", 2),
        (["search", "proj", "x", "--before", "2025-03-04T10:00+02:00"], "invalid_date", 2),
        (["search", "proj", ""], "invalid_query", 2),
        (["search", "proj", "x", "--limit", "51"], "invalid_request", 2),
        (["search", "proj", "x", "--session", "bad session"], "invalid_session", 2),
        (["search", "Bad/Name", "x"], "invalid_project", 2),
        (["recall", "proj", "ABC"], "invalid_id", 2),
        (["recall", "proj", "0000000000zz"], "invalid_id", 2),
        (["recall", "proj", "000000000000"], "not_found", 1),
        (["recall", "nope", "000000000000"], "project_not_found", 1),
        (["status", "nope"], "project_not_found", 1),
    ],
)
def test_errors_print_code_and_message_and_exit_by_kind(
    loaded: Path, args: list[str], code: str, exit_code: int
) -> None:
    result = run(loaded, *args)
    assert result.exit_code == exit_code
    assert result.stderr.startswith(f"error: {code}: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_reads_never_create_a_project(data_dir: Path) -> None:
    assert run(data_dir, "search", "ghost", "x").exit_code == 1
    assert run(data_dir, "recall", "ghost", "000000000000").exit_code == 1
    assert not (data_dir / "projects" / "ghost").exists()


# -- recall and status ---------------------------------------------------------------------------------------


def test_recall_shows_the_memory_and_its_source_events(loaded: Path) -> None:
    hit = json.loads(ok(run(loaded, "search", "proj", "AuthExpired", "--json")).stdout)["hits"][0]
    recalled = json.loads(ok(run(loaded, "recall", "proj", hit["id"], "--json")).stdout)
    assert recalled["memory"]["memory_id"] == hit["memory_id"]
    assert [(e["seq"], e["type"]) for e in recalled["sources"]] == [
        (4, "tool_call"),
        (5, "tool_result"),
        (6, "message"),
    ]
    assert recalled["sources"][0]["tool_args"] == {"path": "auth/session.py", "start": 30}
    assert recalled["supporting"] == []

    shown = ok(run(loaded, "recall", "proj", hit["memory_id"], "--session", "s1")).stdout
    assert hit["memory_id"] in shown and "Source events (3)" in shown
    assert "read_file" in shown and '"start": 30' in shown and "SESSIONS[token]" in shown

    elsewhere = run(loaded, "recall", "proj", hit["id"], "--session", "s2")
    assert elsewhere.exit_code == 1
    assert "session 's2'" in elsewhere.stderr and "pass --session from a search hit" in elsewhere.stderr
    assert "session_id" not in elsewhere.stderr and "memory_search" not in elsewhere.stderr


def test_recall_of_a_reflection_lists_supporting_observations(loaded: Path) -> None:
    from obsmem.memories import ReflectionIn, add_reflection

    hits = json.loads(ok(run(loaded, "search", "proj", "auth/session", "--json")).stdout)["hits"]
    with Obsmem(data_dir=loaded) as service, service.database("proj").write() as conn:
        add_reflection(
            conn,
            ReflectionIn(
                "s1",
                "Login KeyError fixed by SESSIONS.get",
                tuple(h["memory_id"] for h in hits),
                "2025-03-06 09:00",
            ),
        )
    reflection = json.loads(ok(run(loaded, "search", "proj", "fixed by", "--json")).stdout)["hits"][0]
    assert reflection["kind"] == "reflection" and "importance" not in reflection
    shown = ok(run(loaded, "recall", "proj", reflection["id"])).stdout
    assert "Supporting observations (2)" in shown and all(h["id"] in shown for h in hits)
    assert "reflection" in ok(run(loaded, "search", "proj", "fixed by")).stdout


def test_status_of_one_project_and_of_all(loaded: Path, tmp_path: Path) -> None:
    ok(run(loaded, "ingest", "other", str(write_jsonl(tmp_path / "o.jsonl", CHAT[:2])), "--session", "x"))
    one = json.loads(ok(run(loaded, "status", "proj", "--json")).stdout)
    assert {k: one[k] for k in ("project", "sessions", "events", "observations", "reflections")} == {
        "project": "proj",
        "sessions": 1,
        "events": 6,
        "observations": 3,
        "reflections": 0,
    }
    every = json.loads(ok(run(loaded, "status", "--json")).stdout)
    assert Path(every["data_dir"]) == loaded.resolve()
    assert [(p["project"], p["events"]) for p in every["projects"]] == [("other", 2), ("proj", 6)]
    table = ok(run(loaded, "status")).stdout
    assert "proj" in table and "other" in table and "observations" in table


def test_status_of_an_empty_data_directory(data_dir: Path) -> None:
    assert "No projects" in ok(run(data_dir, "status")).stdout
    assert json.loads(ok(run(data_dir, "status", "--json")).stdout)["projects"] == []


# -- settings ------------------------------------------------------------------------------------------------


def test_data_dir_and_config_come_from_flags_or_the_environment(loaded: Path, tmp_path: Path) -> None:
    by_env = CliRunner().invoke(cli, ["status", "--json"], env={"OBSMEM_DATA_DIR": str(loaded)})
    assert [p["project"] for p in json.loads(by_env.stdout)["projects"]] == ["proj"]

    config = tmp_path / "obsmem.toml"
    config.write_text(f'data_dir = "{loaded.as_posix()}"\n[search]\ndefault_limit = 1\n', encoding="utf-8")
    by_flag = CliRunner().invoke(cli, ["--config", str(config), "search", "proj", "a", "--json"])
    assert len(json.loads(by_flag.stdout)["hits"]) == 1
    by_env = CliRunner().invoke(cli, ["search", "proj", "a", "--json"], env={"OBSMEM_CONFIG": str(config)})
    assert len(json.loads(by_env.stdout)["hits"]) == 1
    flag_wins = CliRunner().invoke(
        cli, ["--config", str(config), "--data-dir", str(tmp_path / "empty"), "status", "--json"]
    )
    assert json.loads(flag_wins.stdout)["projects"] == []


def test_bad_settings_are_a_clear_error(data_dir: Path, tmp_path: Path) -> None:
    missing = CliRunner().invoke(cli, ["--config", str(tmp_path / "nope.toml"), "status"])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: configuration_error: settings file not found")
    typo = tmp_path / "typo.toml"
    typo.write_text("[server]\nprot = 9000\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["--config", str(typo), "status"])
    assert result.exit_code == 1 and "server.prot" in result.stderr and "Traceback" not in result.stderr


# -- the command group ---------------------------------------------------------------------------------------


def test_every_registered_command_loads_and_help_lists_it() -> None:
    listing = CliRunner().invoke(cli, ["--help"]).stdout
    for name in COMMANDS:
        assert cli.get_command(None, name) is not None  # type: ignore[arg-type]
        assert name in listing


def test_runs_as_a_module_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "OBSMEM_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "obsmem.surfaces.cli", "search", "nope", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: project_not_found: project 'nope' does not exist\n"
    listing = subprocess.run(
        [sys.executable, "-m", "obsmem.surfaces.cli", "demo", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert listing.returncode == 0 and "--data-dir" in listing.stdout


# -- demo ----------------------------------------------------------------------------------------------------

STAND_IN_SAMPLE = '''
"""A small stand-in for obsmem.sample, used until the real sample project is installed beside the CLI."""

from obsmem.events import append_events
from obsmem.memories import add_observations

SAMPLE_PROJECT = "sample"


def load_sample(db):
    append_events(db, "s1", [
        {"role": "user", "content": "The login test fails with KeyError"},
        {"role": "assistant", "type": "tool_call", "tool_name": "read_file",
         "tool_args": {"path": "auth.py"}},
        {"role": "tool", "type": "tool_result", "tool_name": "read_file", "content": "SESSIONS[token]"},
    ])
    append_events(db, "s2", [{"role": "user", "content": "Bump the retry limit to 5 in worker.py"}])
    receipt = add_observations(db, [
        {"session_id": "s1", "content": "Login test fails with KeyError in auth.py",
         "timestamp": "2025-03-04 10:00", "importance": "high", "source_refs": [1, 3]},
        {"session_id": "s1", "content": "Agent read auth.py", "timestamp": "2025-03-04 10:01",
         "source_refs": [2]},
        {"session_id": "s2", "content": "User asked to raise the retry limit to 5 in worker.py",
         "timestamp": "2025-03-20 09:30", "importance": "medium", "source_refs": [1]},
    ])
    return {"sessions": 2, "events": 4, "observations": len(receipt.added)}


def questions():
    return []


def demo_queries():
    return [
        {"query": "KeyError", "why": "an exact identifier"},
        {"query": "retry limit", "after": "2025-03-15", "before": "2025-03-31",
         "why": "a phrase in a date window"},
        {"query": "auth.py", "why": "a file path"},
        {"query": "kubernetes", "why": "nothing answers this"},
    ]
'''


@pytest.fixture
def stand_in_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "stand_in_sample.py"
    path.write_text(STAND_IN_SAMPLE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("obsmem.sample", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "obsmem.sample", module)
    return module


def test_demo_searches_and_recalls_the_sample(stand_in_sample: Any, tmp_path: Path) -> None:
    result = ok(CliRunner().invoke(cli, ["demo"]))
    out = result.stdout
    assert "Loaded 2 sessions, 4 events, 3 observations" in out
    assert out.count("obsmem search sample") == 4 and out.count("obsmem recall sample") == 2
    assert "a phrase in a date window" in out and "No memory matched" in out
    assert "Source events (2)" in out and "Source events (1)" in out
    assert "temporary directory, now removed" in out
    assert not (tmp_path / "xdg-data").exists()  # the usual data directory is never touched


def test_demo_json_and_a_kept_directory(stand_in_sample: Any, tmp_path: Path) -> None:
    kept = tmp_path / "demo-data"
    shown = json.loads(ok(CliRunner().invoke(cli, ["demo", "--data-dir", str(kept), "--json"])).stdout)
    assert shown["project"] == "sample" and shown["loaded"]["observations"] == 3
    assert [len(s["result"]["hits"]) for s in shown["searches"]] == [1, 1, 2, 0]
    assert [r["memory"]["session_id"] for r in shown["recalls"]] == ["s1", "s2"]
    assert database(kept, "sample").execute("SELECT count(*) FROM memories").fetchone()[0] == 3
    again = CliRunner().invoke(cli, ["demo", "--data-dir", str(kept)])
    assert again.exit_code == 2 and "not empty" in again.stderr


def test_demo_ignores_the_users_settings(stand_in_sample: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "obsmem.toml"
    config.write_text("[search]\ndefault_limit = 1\n", encoding="utf-8")
    monkeypatch.setenv("OBSMEM_CONFIG", str(config))
    monkeypatch.setenv("OBSMEM_DATA_DIR", str(tmp_path / "real-data"))
    shown = json.loads(ok(CliRunner().invoke(cli, ["demo", "--json"])).stdout)
    assert len(shown["searches"][2]["result"]["hits"]) == 2
    assert not (tmp_path / "real-data").exists()


@pytest.mark.slow  # model load included: importing torch alone takes 3-12 s on two cores
def test_demo_with_the_bundled_sample(tmp_path: Path) -> None:
    # How long the demo takes is a benchmark's business (a shared, loaded machine makes a timed assertion flaky);
    # the generous timeout only stops a hung run.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-m", "obsmem.surfaces.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("obsmem recall") == 2 and "Source events" in done.stdout
    assert "hit" in done.stdout
    assert "obsmem eval questions --modes exact,hybrid" in done.stdout and "hit@10" in done.stdout
    assert not (tmp_path / "xdg-data").exists()


# -- serve and mcp (run once the HTTP and MCP surfaces are installed) ----------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_answers_over_http_from_the_same_data_directory(loaded: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "obsmem.surfaces.cli",
            "--data-dir",
            str(loaded),
            "serve",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{base}/v1/health", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "serve did not answer within 60 s"
                time.sleep(0.2)
        assert health.status_code == 200
        found = httpx.post(f"{base}/v1/projects/proj/search", json={"query": "keyerror"}, timeout=10).json()
        expected = json.loads(ok(run(loaded, "search", "proj", "keyerror", "--json")).stdout)
        assert found["hits"] == expected["hits"]
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_mcp_serves_the_tools_over_stdio(loaded: Path) -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    expected = json.loads(ok(run(loaded, "search", "proj", "keyerror", "--json")).stdout)["hits"][0]["id"]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "obsmem.surfaces.cli", "--data-dir", str(loaded), "mcp", "proj"],
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        cwd=str(loaded),  # as an agent starts it: from anywhere but a source checkout
    )

    async def session() -> tuple[set[str], str]:
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = {tool.name for tool in (await client.list_tools()).tools}
                answer = await client.call_tool("memory_search", {"query": "keyerror"})
                text = "".join(getattr(part, "text", "") for part in answer.content)
                return tools, text

    tools, text = anyio.run(session)
    assert {"memory_search", "recall"} <= tools
    assert expected in text


def test_forget_deletes_a_memory_and_keeps_its_events(loaded: Path) -> None:
    hits = json.loads(ok(run(loaded, "search", "proj", "a", "--json")).stdout)["hits"]
    target = hits[0]
    result = ok(run(loaded, "forget", "proj", target["id"]))
    assert result.stdout.startswith(f"Deleted observation {target['id']}")
    db = database(loaded, "proj")
    assert db.execute("SELECT count(*) FROM memories WHERE memory_id = ?", (target["memory_id"],)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 6
    again = run(loaded, "forget", "proj", target["id"])
    assert again.exit_code == 1 and again.stderr.startswith("error: not_found: ")


@pytest.mark.parametrize(
    "command",
    [
        ["search", "proj", "x"],
        ["recall", "proj", "000000000000"],
        ["forget", "proj", "000000000000"],
        ["events", "proj"],
        ["status", "proj"],
        ["mcp", "proj"],
    ],
)
def test_a_bad_session_is_refused_naming_the_flag(loaded: Path, command: list[str]) -> None:
    result = run(loaded, *command, "--session", "bad session")
    assert result.exit_code == 2 and result.stderr.startswith("error: invalid_session: --session must be ")


def test_recall_and_forget_name_the_flag_that_passes_a_session(loaded: Path) -> None:
    """The service's not_found text tells HTTP and tool callers to pass session_id; the CLI takes --session."""
    for command in ("recall", "forget"):
        result = run(loaded, command, "proj", "000000000000", "--session", "s2")
        assert result.exit_code == 1
        assert result.stderr == (
            "error: not_found: no memory with id 000000000000 in session 's2'; pass --session from a search hit\n"
        )
        unscoped = run(loaded, command, "proj", "000000000000")
        assert unscoped.stderr.endswith("; use an id from a search hit or the rendered memory\n")


def test_a_session_id_or_project_that_looks_like_a_secret_is_refused(data_dir: Path, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    secret = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    session = run(data_dir, "ingest", "proj", str(path), "--session", secret)
    assert session.exit_code == 2 and session.stderr.startswith("error: invalid_session: --session looks like a secret")
    project = run(data_dir, "ingest", "xoxb-2048-4096-zk9qmt3vlp8r", str(path), "--session", "s1")
    assert project.exit_code == 2 and project.stderr.startswith("error: invalid_project: project looks like a secret")
    for result in (session, project):
        assert secret not in result.output + result.stderr and "zk9qmt3vlp8r" not in result.stderr
    assert not (data_dir / "projects").exists()
    in_file = write_jsonl(tmp_path / "keyed.jsonl", [dict(record, session_id=secret) for record in CHAT])
    from_file = run(data_dir, "ingest", "proj", str(in_file))
    assert from_file.exit_code == 2 and "invalid_session" in from_file.stderr and secret not in from_file.stderr
    assert not (data_dir / "projects").exists()


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_writes_numbers_stored_before_they_were_refused_as_null(loaded: Path) -> None:
    """Tool arguments stored by an older version may hold NaN or Infinity; ``--json`` prints strict JSON."""
    writer = apsw.Connection(str(loaded / "projects" / "proj" / "obsmem.db"))
    stored = """'{"path": "auth/session.py", "start": NaN, "end": -Infinity}'"""
    writer.execute(f"UPDATE events SET tool_args = {stored} WHERE tool_args IS NOT NULL")
    assert writer.changes() == 1
    writer.close()
    expected = {"path": "auth/session.py", "start": None, "end": None}
    searched = ok(run(loaded, "search", "proj", "auth/session.py", "--scope", "conversation", "--json"))
    assert expected in [hit.get("tool_args") for hit in strict_json(searched.stdout)["hits"]]
    listed = strict_json(ok(run(loaded, "search", "proj", "SESSIONS.get", "--json")).stdout)
    recalled = strict_json(ok(run(loaded, "recall", "proj", listed["hits"][0]["id"], "--json")).stdout)
    assert expected in [event.get("tool_args") for event in recalled["sources"]]
    table = ok(run(loaded, "recall", "proj", listed["hits"][0]["id"]))
    assert "NaN" not in table.stdout and "Infinity" not in table.stdout
