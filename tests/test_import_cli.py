"""``obsmem import`` and ``obsmem hook`` from the command line: discovery, receipts, follow, hooks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from obsmem.transcripts import find_transcripts
from support.transcripts import copy_fixture, read_line, stored_events, write_jsonl

RESUMED = "7b2d9e44-0a1c-4f6e-8b3d-5c9f1e2a7d02"


def run(data_dir: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], input=stdin, env=env, catch_exceptions=False)


def test_without_a_path_the_default_location_is_searched(tmp_path: Path) -> None:
    config = copy_fixture("claude-code", tmp_path)
    result = run(tmp_path / "data", "import", "claude-code", "--json", env={"CLAUDE_CONFIG_DIR": str(config)})
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout)
    assert receipt["totals"]["files"] == 3 and receipt["totals"]["added"] == 25
    listing = run(tmp_path / "data", "import", "claude-code", env={"CLAUDE_CONFIG_DIR": str(config)})
    assert "3 claude-code transcript(s) found" in listing.stderr and "unchanged" in listing.stdout


def test_problems_exit_1_and_name_file_and_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [{"type": "user", "sessionId": "s1", "cwd": "/w/p", "message": {"role": "user", "content": "ok"}}, "{broken"],
    )
    result = run(tmp_path / "data", "import", "claude-code", str(path))
    assert result.exit_code == 1
    assert "malformed_json" in result.stdout and "Traceback" not in result.output
    assert [row[4] for row in stored_events(tmp_path / "data", "p")] == ["ok"]


def test_a_path_that_does_not_exist_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    result = run(tmp_path / "data", "import", "claude-code", str(tmp_path / "nowhere.jsonl"))
    assert result.exit_code == 2
    assert f"Path '{tmp_path / 'nowhere.jsonl'}' does not exist" in result.stderr and "PATHS" in result.stderr
    assert not (tmp_path / "data").exists()


def test_openai_chat_and_obsmem_files_need_a_project_or_a_path(tmp_path: Path) -> None:
    chat = write_jsonl(
        tmp_path / "chat-1.jsonl", [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    )
    assert run(tmp_path / "data", "import", "openai-chat").exit_code == 2
    missing = run(tmp_path / "data", "import", "openai-chat", str(chat))
    assert missing.exit_code == 1 and "no_project" in missing.stdout
    ok = run(tmp_path / "data", "import", "openai-chat", str(chat), "--project", "chats", "--json")
    assert json.loads(ok.stdout)["totals"]["added"] == 2
    assert [row[:2] for row in stored_events(tmp_path / "data", "chats")] == [("chat-1", 1), ("chat-1", 2)]
    assert run(tmp_path / "data", "import", "openai-chat", str(chat), "--project", "Bad Name").exit_code == 2


def test_a_whole_project_export_is_restored_into_a_new_project(tmp_path: Path) -> None:
    chat = write_jsonl(tmp_path / "chat-1.jsonl", [{"role": "user", "content": "remember the blue door"}])
    assert run(tmp_path / "data", "import", "openai-chat", str(chat), "--project", "origin").exit_code == 0
    export = tmp_path / "origin.jsonl"
    assert run(tmp_path / "data", "export", "origin", "--output", str(export)).exit_code == 0
    restored = run(tmp_path / "data", "import", "obsmem", str(export), "--project", "copy", "--json")
    assert restored.exit_code == 0, restored.output
    receipt = json.loads(restored.stdout)
    assert (receipt["project"], receipt["exported_project"]) == ("copy", "origin")
    assert stored_events(tmp_path / "data", "copy") == stored_events(tmp_path / "data", "origin")
    again = run(tmp_path / "data", "import", "obsmem", str(export), "--project", "copy")
    assert again.exit_code != 0 and "project_not_empty" in again.output  # a restore never merges
    assert run(tmp_path / "data", "import", "obsmem", str(export)).exit_code == 2  # --project NEW is required


def test_the_hook_imports_the_sessions_sub_agents(tmp_path: Path) -> None:
    projects = copy_fixture("claude-code", tmp_path) / "projects"
    folder = projects / "-home-ann-src-shop"
    transcript = folder / "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01.jsonl"
    # An older version's sub-agent, written beside the sessions, naming this session in its records.
    older = [
        {
            "type": "user",
            "isSidechain": True,
            "agentId": "b22",
            "sessionId": "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01",
            "uuid": "y1",
            "parentUuid": None,
            "cwd": "/home/ann/src/shop",
            "message": {"role": "user", "content": "list the open invoices"},
        }
    ]
    write_jsonl(folder / "agent-b22.jsonl", older)
    write_jsonl(folder / "agent-c33.jsonl", [{**older[0], "sessionId": "another", "uuid": "z1", "agentId": "c33"}])
    payload = {"session_id": "1f0c2a6e", "transcript_path": str(transcript), "cwd": "/home/ann/src/shop"}
    result = run(tmp_path / "data", "hook", "claude-code", stdin=json.dumps(payload))
    assert result.exit_code == 0, result.output
    sessions = {row[0] for row in stored_events(tmp_path / "data", "shop")}
    assert sessions == {
        "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01",
        "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01:agent-a91f3c",  # from <session>/subagents/
        "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01:agent-b22",
    }


def test_the_hook_maps_a_transcript_without_a_cwd_by_the_payloads(tmp_path: Path) -> None:
    transcript = write_jsonl(
        tmp_path / "s9.jsonl",
        [{"type": "user", "sessionId": "s9", "uuid": "q1", "message": {"role": "user", "content": "first words"}}],
    )
    payload = {"session_id": "s9", "transcript_path": str(transcript), "cwd": "/home/ann/src/Payroll App"}
    result = run(tmp_path / "data", "hook", "claude-code", stdin=json.dumps(payload))
    assert result.exit_code == 0, result.output
    assert [row[4] for row in stored_events(tmp_path / "data", "payroll-app")] == ["first words"]


def test_the_claude_code_hook_imports_the_session_it_names(tmp_path: Path) -> None:
    projects = copy_fixture("claude-code", tmp_path) / "projects"
    transcript = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    payload = {
        "session_id": RESUMED,
        "transcript_path": str(transcript),
        "cwd": "/home/ann/src/shop",
        "hook_event_name": "Stop",
    }
    first = run(tmp_path / "data", "hook", "claude-code", stdin=json.dumps(payload))
    assert first.exit_code == 0 and first.stdout == ""
    assert len(stored_events(tmp_path / "data", "shop")) == 6
    again = run(
        tmp_path / "data", "hook", "claude-code", stdin=json.dumps({**payload, "hook_event_name": "SessionEnd"})
    )
    assert again.exit_code == 0 and len(stored_events(tmp_path / "data", "shop")) == 6


def test_gemini_hooks_answer_json(tmp_path: Path) -> None:
    chat = next((copy_fixture("gemini-cli", tmp_path) / ".gemini").rglob("*.jsonl"))
    payload = {
        "session_id": "c9d8",
        "transcript_path": str(chat),
        "cwd": "/home/ann/src/atlas",
        "hook_event_name": "SessionEnd",
    }
    result = run(tmp_path / "data", "hook", "gemini-cli", "--project", "atlas", stdin=json.dumps(payload))
    assert result.exit_code == 0 and json.loads(result.stdout) == {}
    assert len(stored_events(tmp_path / "data", "atlas")) == 5


def test_bad_hook_payloads_are_clear_errors(tmp_path: Path) -> None:
    payloads: list[str | bytes] = ["not json", "[1]", "{}", json.dumps({"transcript_path": str(tmp_path / "x.jsonl")})]
    for payload in [*payloads, b'{"transcript_path": "\xff"}']:
        result = CliRunner().invoke(
            cli, ["--data-dir", str(tmp_path / "data"), "hook", "claude-code"], input=payload, catch_exceptions=False
        )
        assert result.exit_code == 1, payload  # never 2: the agents read 2 as "block the agent"
        assert result.stderr.startswith("error: invalid_hook_payload: ") and "Traceback" not in result.output


def test_a_hook_payload_past_the_size_limit_is_named_as_too_large_not_as_bad_json(tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "s.jsonl", [{"type": "user", "sessionId": "s", "cwd": "/w/t"}])
    payload = json.dumps({"transcript_path": str(transcript), "prompt": "x" * 1_000_000})
    result = run(tmp_path / "data", "hook", "claude-code", stdin=payload)
    assert (result.exit_code, result.stderr) == (
        1,
        "error: invalid_hook_payload: the hook payload on stdin is larger than 1,000,000 bytes\n",
    )


@pytest.mark.parametrize(
    ("arguments", "environment", "named"),
    [
        (["hook", "claude-code", "--bogus"], {}, "No such option '--bogus'"),
        (["hook", "claude"], {}, "'claude' is not one of"),
        (["hook"], {}, "Missing argument"),
        (["hook", "claude-code", "--project"], {}, "'--project' requires an argument"),
        (["hook", "claude-code"], {"OBSMEM_DATA_DIR": "{file}"}, "--data-dir"),
        (["--data-dir", "{file}", "hook", "claude-code"], {}, "--data-dir"),
        (["hook", "claude-code"], {"OBSMEM_CONFIG": "{directory}"}, "--config"),
        # Mistakes before the command name: the command line still runs the hook.
        (["--bogus", "hook", "claude-code"], {}, "--bogus"),
        (["--bogus=1", "hook", "claude-code"], {}, "--bogus"),
        (["--bogus", "value", "hook", "claude-code"], {}, "--bogus"),
        (["--data-dir", "hook", "claude-code"], {}, "claude-code"),  # an empty $DIR left --data-dir's value out
        (["--data-dir", "{directory}", "--bogus", "hook", "claude-code"], {}, "--bogus"),
        (["--sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5", "hook", "claude-code"], {}, "No such option"),
    ],
)
def test_every_failure_of_the_hook_exits_1_usage_mistakes_included(
    tmp_path: Path, arguments: list[str], environment: dict[str, str], named: str
) -> None:
    regular_file = tmp_path / "a-file"
    regular_file.write_text("", encoding="utf-8")
    fill = {"{file}": str(regular_file), "{directory}": str(tmp_path)}
    payload = json.dumps({"transcript_path": str(tmp_path / "x" / "s1.jsonl"), "cwd": "/x"})
    result = CliRunner().invoke(
        cli,
        [fill.get(argument, argument) for argument in arguments],
        input=payload,
        env={name: fill[value] for name, value in environment.items()},
        catch_exceptions=False,
    )
    assert result.exit_code == 1  # never 2: the agents read 2 as "block the agent"
    assert result.stderr.startswith("error: invalid_request: ") and named in result.stderr
    assert result.stderr.count("\n") == 1 and "Usage:" not in result.stderr
    assert "Xq7Lm2Pz9Rt4" not in result.stderr  # an error never echoes a secret


def test_other_commands_keep_exit_2_for_usage_mistakes(tmp_path: Path) -> None:
    assert run(tmp_path / "data", "import", "claude-code", "--bogus").exit_code == 2
    assert run(tmp_path / "data", "search", "hook").exit_code == 2  # "hook" as an argument names no command
    assert run(tmp_path / "data", "--bogus", "search", "hook").exit_code == 2
    assert run(tmp_path / "data", "serach", "p", "hook").exit_code == 2  # "hook" after a misspelt command


def following(data: Path, path: Path) -> subprocess.Popen[str]:
    """``obsmem import claude-code PATH --follow`` in a process of its own, one JSON line per round."""
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(data)]
    return subprocess.Popen(
        [*command, "import", "claude-code", str(path), "--follow", "--interval", "0.1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )


def test_follow_imports_growth_and_stops_on_sigterm(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "live" / "s.jsonl",
        [{"type": "user", "sessionId": "live", "cwd": "/w/live", "message": {"role": "user", "content": "one"}}],
    )
    process = following(tmp_path / "data", path)
    try:
        assert json.loads(read_line(process))["added"] == 1
        write_jsonl(
            path,
            [
                {
                    "type": "assistant",
                    "sessionId": "live",
                    "message": {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
                }
            ],
            mode="a",
        )
        assert json.loads(read_line(process))["added"] == 1
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0 and "stopped" in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(stored_events(tmp_path / "data", "live")) < 2:
        time.sleep(0.05)
    assert [row[4] for row in stored_events(tmp_path / "data", "live")] == ["one", "two"]


def test_follow_waits_for_a_transcript_not_written_yet(tmp_path: Path) -> None:
    """A missing PATH is a typo without --follow; with it, the file the agent is about to write."""
    path = tmp_path / "live" / "s.jsonl"
    process = following(tmp_path / "data", path)
    try:
        assert json.loads(read_line(process))["added"] == 0  # a round ran: nothing refused the path
        write_jsonl(
            path,
            [{"type": "user", "sessionId": "live", "cwd": "/w/live", "message": {"role": "user", "content": "one"}}],
        )
        assert json.loads(read_line(process))["added"] == 1
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0


def test_the_progress_bar_counts_bytes_over_all_files() -> None:
    from obsmem.surfaces import cli_import

    bar = cli_import._progress(True, 100)
    with bar as report:
        assert report is not None
        report("a.jsonl", 30, 60)
        report("b.jsonl", 40, 40)
        report("a.jsonl", 60, 60)  # a file's reports replace each other, never add up
        assert bar.bar is not None and bar.bar.tasks[0].completed == 100
    with cli_import._progress(False, 100) as nothing:
        assert nothing is None


def test_an_agents_home_given_as_path_yields_only_its_sessions(tmp_path: Path) -> None:
    home = copy_fixture("claude-code", tmp_path)
    write_jsonl(home / "history.jsonl", [{"display": "prompt", "timestamp": 1, "project": "/w"}])
    codex = copy_fixture("codex", tmp_path)
    write_jsonl(codex / "history.jsonl", [{"session_id": "x", "ts": 1, "text": "prompt"}])
    assert len(find_transcripts("claude-code", home)) == 3
    assert len(find_transcripts("codex", codex)) == 2


@pytest.mark.parametrize(
    "text",
    [
        '[transcripts.project_map]\n"relative/path" = "shop"\n',
        '[transcripts.project_map]\n"/home/ann/shop" = "Not A Slug"\n',
        "[transcripts]\nmax_tool_output_chars = 10\n",
    ],
)
def test_bad_transcript_settings_are_configuration_errors(tmp_path: Path, text: str) -> None:
    config = tmp_path / "obsmem.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config)
    assert "transcripts" in caught.value.message


def test_the_project_map_comes_from_the_settings_file(tmp_path: Path) -> None:
    config = tmp_path / "obsmem.toml"
    config.write_text('[transcripts.project_map]\n"/home/ann/src" = "ann"\n', encoding="utf-8")
    home = copy_fixture("claude-code", tmp_path)
    result = run(tmp_path / "data", "--config", str(config), "import", "claude-code", str(home), "--json")
    assert json.loads(result.stdout)["files"][0]["projects"] == ["ann"]


@pytest.mark.parametrize("source", ["claude-code", "openai-chat", "gemini-cli"])
def test_an_import_that_stores_nothing_creates_no_project(tmp_path: Path, source: str) -> None:
    name = "session-1.json" if source == "gemini-cli" else "session-1.jsonl"
    empty = tmp_path / name
    empty.write_text("" if source != "gemini-cli" else '{"sessionId": "s1", "messages": []}', encoding="utf-8")
    result = run(tmp_path / "data", "import", source, str(empty), "--project", "brandnew", "--json")
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout)
    assert receipt["totals"]["added"] == 0 and receipt["files"][0]["status"] == "imported"
    assert receipt["files"][0]["projects"] == ["brandnew"]
    assert not (tmp_path / "data" / "projects" / "brandnew").exists()
    table = run(tmp_path / "data", "import", source, str(empty), "--project", "brandnew")
    assert table.exit_code == 0 and "0 event(s) added" in table.stdout
    missing = run(tmp_path / "data", "search", "brandnew", "x")
    assert (missing.exit_code, missing.stderr) == (1, "error: project_not_found: project 'brandnew' does not exist\n")


def test_a_tilde_naming_no_user_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    # Path.expanduser raises RuntimeError for a ~user without a home directory: every such path was a traceback.
    payload = json.dumps({"transcript_path": "~no-such-user-x9/s.jsonl"})
    hooked = run(tmp_path / "data", "hook", "claude-code", stdin=payload)
    refused = "error: invalid_hook_payload: transcript_path names no readable file\n"
    assert (hooked.exit_code, hooked.stderr) == (1, refused)
    # A user name the system cannot look up at all (a NUL byte, which JSON can carry): ValueError, not RuntimeError.
    hooked = run(tmp_path / "data", "hook", "claude-code", stdin=json.dumps({"transcript_path": "~a\u0000b/s.jsonl"}))
    assert (hooked.exit_code, hooked.stderr) == (1, refused)
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as memory:
        report = memory.import_transcripts("claude-code", ["~no-such-user-x9/s.jsonl"], project="p").files[0]
    assert (report.status, list(report.problems)) == ("missing", ["file_missing"])
    transcript = write_jsonl(tmp_path / "s.jsonl", [{"type": "user", "sessionId": "s", "cwd": "/w/t"}])
    payload = json.dumps({"transcript_path": str(transcript)})
    for flag, what in (("--config", "settings file"), ("--data-dir", "data directory")):
        result = CliRunner().invoke(
            cli, [flag, "~no-such-user-x9/obsmem", "hook", "claude-code"], input=payload, catch_exceptions=False
        )
        assert (result.exit_code, result.stderr) == (
            1,
            f"error: configuration_error: {what} ~no-such-user-x9/obsmem: no home directory for its ~\n",
        )


def test_a_fifo_named_like_a_sub_agent_file_does_not_hang_the_hook(tmp_path: Path) -> None:
    # The hook read the first line of every agent-*.jsonl beside the session to find its sub-agents, FIFOs too.
    said = {"type": "user", "sessionId": "s1", "cwd": "/w/fifo", "message": {"role": "user", "content": "hi"}}
    transcript = write_jsonl(tmp_path / "project" / "s1.jsonl", [said])
    os.mkfifo(tmp_path / "project" / "agent-zz.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(tmp_path / "data"), "hook", "claude-code"],
        input=json.dumps({"transcript_path": str(transcript)}),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert [row[4] for row in stored_events(tmp_path / "data", "fifo")] == ["hi"]
