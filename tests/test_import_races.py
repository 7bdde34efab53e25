"""Imports that meet each other or a file that changes under them: nothing is lost, nothing stored twice."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.transcripts import files, importer
from obsmem.transcripts.reports import ImportRun
from obsmem.transcripts.watermarks import UnsavedWatermarks, Watermark
from support.transcripts import stored_events, write_jsonl


def _rollout(path: Path, texts: list[str], session: str = "race-1") -> Path:
    meta = {"timestamp": "2025-04-11T10:00:00Z", "type": "session_meta", "payload": {"id": session, "cwd": "/w/race"}}
    said = [
        {
            "timestamp": "2025-04-11T10:00:02Z",
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        }
        for text in texts
    ]
    return write_jsonl(path, [meta, *said])


def test_an_import_of_a_file_another_import_is_storing_waits_for_it_and_stores_nothing_twice(
    service: Obsmem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hook firing while `obsmem import --follow` (or another hook) stores the same file: the second import
    # ran beside the first, merging against events the first stored after it looked, and stored them again.
    monkeypatch.setattr(importer, "CHUNK_EVENTS", 50)
    rollout = _rollout(tmp_path / "rollout-race.jsonl", [f"old request {i}" for i in range(10)])
    service.import_transcripts("codex", [rollout])
    _rollout(rollout, [f"request {i}" for i in range(300)])  # rewritten: the first import merges it
    second: list[ImportRun] = []
    runners: list[threading.Thread] = []

    def another_import(path: str, done: int, total: int) -> None:
        if runners or done >= total:
            return
        runner = threading.Thread(target=lambda: second.append(service.import_transcripts("codex", [rollout])))
        runners.append(runner)
        runner.start()
        runner.join(5)  # without waiting for the first, the second import runs to its end here

    first = service.import_transcripts("codex", [rollout], progress=another_import)
    runners[0].join()
    contents = [row[4] for row in stored_events(tmp_path / "data", "race")]
    assert len(contents) == len(set(contents)) == 310
    assert (first.added, second[0].added, second[0].files[0].status) == (300, 0, "unchanged")


@pytest.mark.parametrize("source", ["claude-code", "openai-chat", "gemini-cli", "opencode"])
def test_a_fifo_named_as_a_transcript_is_unreadable_not_waited_on(tmp_path: Path, source: str) -> None:
    # Opening a FIFO for reading waits for a writer: the import hung for good on a pipe named by mistake.
    fifo = tmp_path / ("session-1.json" if source in ("gemini-cli", "opencode") else "session-1.jsonl")
    os.mkfifo(fifo)
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(tmp_path / "data")]
    done = subprocess.run(
        [*command, "import", source, str(fifo), "--project", "pipes", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)["files"][0]
    assert (report["status"], report["problem_lines"]) == (
        "failed",
        [{"reason": "unreadable", "line": 0, "detail": "not a regular file"}],
    )


def test_a_secret_the_cut_of_a_long_tool_output_splits_is_redacted_whole(service: Obsmem, tmp_path: Path) -> None:
    # The cut ran before redaction, so a token straddling it was stored as a fragment no detector knows.
    token = "ghp_" + "Ab3dEf7hIjKl9nOpQr5tUvWx1zA2b3C4d5E6"
    output = "x" * 19_990 + " " + token + " and more"
    result = {"type": "tool_result", "tool_use_id": "t", "content": output}
    path = write_jsonl(
        tmp_path / "cut.jsonl",
        [
            {
                "type": "user",
                "sessionId": "cut-1",
                "cwd": "/w/cut",
                "message": {"role": "user", "content": [result]},
            }
        ],
    )
    assert service.import_transcripts("claude-code", [path]).added == 1
    [row] = stored_events(tmp_path / "data", "cut")
    assert "ghp_" not in row[4] and "Ab3dEf" not in row[4]
    assert row[4].startswith("x" * 19_990) and "[REDACTED:github_token]" in row[4]
    assert row[4].endswith("characters not stored]")


@pytest.mark.parametrize("source", ["claude-code", "gemini-cli"])
def test_a_file_that_stores_nothing_in_a_project_not_made_yet_is_not_read_again(
    service: Obsmem, tmp_path: Path, source: str
) -> None:
    # With no project to hold its watermark, every import read such a file again whole: each --follow round
    # re-read every session that held only bookkeeping records.
    if source == "claude-code":
        path = write_jsonl(tmp_path / "s.jsonl", [{"type": "summary", "summary": "x", "leafUuid": "u"}] * 3)
    else:
        path = tmp_path / "session-1.json"
        path.write_text(json.dumps({"sessionId": "g1", "messages": []}), encoding="utf-8")
    first = service.import_transcripts(source, [path], project="later")
    again = service.import_transcripts(source, [path], project="later")
    assert (first.files[0].status, again.files[0].status) == ("imported", "unchanged")
    assert not (tmp_path / "data" / "projects" / "later").exists()
    if source == "claude-code":
        said = {"type": "user", "sessionId": "s1", "cwd": "/w/x", "message": {"role": "user", "content": "hello"}}
        write_jsonl(path, [said], mode="a")
    else:
        said = {"id": "m1", "type": "user", "timestamp": "2025-05-01T10:00:00Z", "content": "hello"}
        path.write_text(json.dumps({"sessionId": "g1", "messages": [said]}), encoding="utf-8")
    grown = service.import_transcripts(source, [path], project="later")
    assert grown.added == 1 and grown.files[0].skipped.get("summary", 0) == 0
    assert [row[1:5] for row in stored_events(tmp_path / "data", "later")] == [(1, "user", "message", "hello")]
    assert service.import_transcripts(source, [path], project="later").files[0].status == "unchanged"


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("openai-chat", ['{"role": "user", "content": "first"}', '{"role": "assistant", "content": "last"}']),
        (
            "obsmem",
            [
                '{"role": "user", "type": "message", "content": "first"}',
                '{"role": "assistant", "type": "message", "content": "last"}',
            ],
        ),
    ],
)
def test_a_chat_file_without_a_final_newline_has_its_last_record_imported(
    service: Obsmem, tmp_path: Path, source: str, lines: list[str]
) -> None:
    # Files written whole often end without a newline: their last record was left as "still being written",
    # and never imported, without a word.
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    assert service.import_transcripts(source, [path], project="chats").added == 2
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('\n{"role": "user", "content": "more", "type": "message"}\n{"role": "user", "content": "hal')
    grown = service.import_transcripts(source, [path], project="chats")
    assert (grown.added, grown.problems) == (1, 0)
    assert [row[4] for row in stored_events(tmp_path / "data", "chats")] == ["first", "last", "more"]


def test_a_file_handed_to_a_reading_process_and_stored_meanwhile_by_another_import_is_planned_again(
    tmp_path: Path,
) -> None:
    # The second file is handed to a reading process with the watermark it had when the run began; another
    # import stores it before its turn, so the chunks read for the old watermark are dropped.
    first = _rollout(tmp_path / "rollout-a.jsonl", [f"a {i}" for i in range(200)])
    second = _rollout(tmp_path / "rollout-b.jsonl", [f"b {i}" for i in range(200)], "race-2")
    settings = load_settings(
        data_dir=tmp_path / "data", transcripts={"reading_processes": 2, "reading_min_megabytes": 0}
    )
    with Obsmem(settings) as memory:

        def store_the_second(path: str, done: int, total: int) -> None:
            if path == str(first) and done >= total:
                assert memory.import_transcripts("codex", [second]).added == 200

        run = memory.import_transcripts("codex", [first, second], progress=store_the_second)
    assert [report.status for report in run.files] == ["imported", "unchanged"]
    assert run.added == 200
    contents = [row[4] for row in stored_events(tmp_path / "data", "race")]
    assert len(contents) == len(set(contents)) == 400


def test_a_file_whose_name_is_not_utf8_is_imported_with_the_files_after_it(service: Obsmem, tmp_path: Path) -> None:
    # The watermark named the file by its path, which SQLite cannot store with the file system's bad bytes
    # in it: the whole import stopped with a traceback, the files after that one not imported.
    folder = tmp_path / "chats"
    said = [{"role": "user", "content": "hello"}]
    odd = write_jsonl(folder / os.fsdecode(b"caf\xe9.jsonl"), said)
    plain = write_jsonl(folder / "plain.jsonl", said)
    run = service.import_transcripts("openai-chat", [odd, plain], project="names")
    assert [(report.status, report.added) for report in run.files] == [("imported", 1), ("imported", 1)]
    again = service.import_transcripts("openai-chat", [odd, plain], project="names")
    assert [report.status for report in again.files] == ["unchanged", "unchanged"]


def test_a_lock_another_program_keeps_on_a_file_is_waited_for_a_while_then_reported(
    service: Obsmem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waiting for the lock without end would hang every hook and --follow round behind one foreign lock.
    monkeypatch.setattr(files, "IMPORT_LOCK_WAIT_SECONDS", 0.2)
    rollout = _rollout(tmp_path / "rollout-held.jsonl", ["held"])
    runs: list[ImportRun] = []
    with open(rollout, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        importing = threading.Thread(target=lambda: runs.append(service.import_transcripts("codex", [rollout])))
        importing.start()
        importing.join(60)
        finished = not importing.is_alive()
    importing.join()
    assert finished
    report = runs[0].files[0]
    assert (report.status, dict(report.problems), report.added) == ("failed", {"file_busy": 1}, 0)
    assert service.import_transcripts("codex", [rollout]).added == 1  # the next import takes it


@pytest.mark.parametrize("ending", ["\r\n", ""])
def test_a_byte_order_mark_before_the_first_line_is_not_part_of_it(
    service: Obsmem, tmp_path: Path, ending: str
) -> None:
    # Windows tools (PowerShell's Out-File) start UTF-8 files with a byte-order mark: the first record was
    # refused as malformed JSON by `obsmem import`, and the whole file by `obsmem ingest`.
    path = tmp_path / "chat.jsonl"
    lines = ['{"role": "user", "content": "first"}', '{"role": "assistant", "content": "second"}']
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + ending.encode())
    run = service.import_transcripts("openai-chat", [path], project="windows")
    assert (run.added, run.problems) == (2, 0)
    single = tmp_path / "single.jsonl"
    single.write_bytes(b"\xef\xbb\xbf" + lines[0].encode() + ending.encode())
    assert service.import_transcripts("openai-chat", [single], project="windows-single").added == 1
    assert service.import_jsonl("windows-ingest", path, "s1").appended == 2


def test_a_secret_the_cut_splits_is_redacted_whole_after_long_secrets_shrank_to_their_markers(
    service: Obsmem, tmp_path: Path
) -> None:
    # Private-key blocks before the cut shrink to their markers, so text from past the redacted window's end
    # came under the cut: a token that window's end split was kept as a fragment no detector knows.
    block = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEpAIBAAKCAQEA3x" * 200 + "\n-----END RSA PRIVATE KEY-----\n"
    token = "ghp_" + "Ab3dEf7hIjKl9nOpQr5tUvWx1zA2b3C4d5E6"
    head = block * 3
    output = head + "x" * (20_000 + 4096 - len(head) - 9) + " " + token + " and more" * 50
    result = {"type": "tool_result", "tool_use_id": "t", "content": output}
    path = write_jsonl(
        tmp_path / "cut.jsonl",
        [{"type": "user", "sessionId": "cut-2", "cwd": "/w/cut", "message": {"role": "user", "content": [result]}}],
    )
    assert service.import_transcripts("claude-code", [path]).added == 1
    [row] = stored_events(tmp_path / "data", "cut")
    assert "ghp_" not in row[4] and "Ab3dEf" not in row[4]
    assert "[REDACTED:github_token]" in row[4] and row[4].endswith("characters not stored]")


def _import_in_a_new_process(data: Path, source: str, path: Path) -> dict[str, object]:
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(data), "import", source, str(path)]
    done = subprocess.run([*command, "--project", "later", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)["files"][0]
    return report


@pytest.mark.parametrize("source", ["claude-code", "gemini-cli"])
def test_a_file_that_stores_nothing_in_a_project_not_made_yet_is_not_read_again_by_a_new_process(
    tmp_path: Path, source: str
) -> None:
    # Its watermark lived in the importing process's memory: every cron import and every hook call read
    # such a file again whole. It is now kept in the data directory, still without making the project.
    data = tmp_path / "data"
    if source == "claude-code":
        path = write_jsonl(tmp_path / "s.jsonl", [{"type": "summary", "summary": "x", "leafUuid": "u"}] * 3)
    else:
        path = tmp_path / "session-1.json"
        path.write_text(json.dumps({"sessionId": "g1", "messages": []}), encoding="utf-8")
    first = _import_in_a_new_process(data, source, path)
    again = _import_in_a_new_process(data, source, path)
    assert (first["status"], again["status"]) == ("imported", "unchanged")
    assert not (data / "projects" / "later").exists()
    assert len(list((data / "import-marks").iterdir())) == 1
    if source == "claude-code":
        said = {"type": "user", "sessionId": "s1", "cwd": "/w/x", "message": {"role": "user", "content": "hello"}}
        write_jsonl(path, [said], mode="a")
    else:
        said = {"id": "m1", "type": "user", "timestamp": "2025-05-01T10:00:00Z", "content": "hello"}
        path.write_text(json.dumps({"sessionId": "g1", "messages": [said]}), encoding="utf-8")
    grown = _import_in_a_new_process(data, source, path)
    assert grown["added"] == 1 and grown["skipped"] == {}  # only what it grew by was read
    assert [row[1:5] for row in stored_events(data, "later")] == [(1, "user", "message", "hello")]
    assert list((data / "import-marks").iterdir()) == []  # the project holds the file's watermark now
    assert _import_in_a_new_process(data, source, path)["status"] == "unchanged"


def test_a_damaged_or_foreign_mark_in_the_data_directory_only_costs_a_read(service: Obsmem, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [{"type": "summary", "summary": "x", "leafUuid": "u"}])
    assert service.import_transcripts("claude-code", [path], project="later").files[0].status == "imported"
    (mark,) = (tmp_path / "data" / "import-marks").iterdir()
    saved = json.loads(mark.read_text(encoding="utf-8"))
    for damaged in ("{not json", json.dumps(saved | {"project": "other"}), json.dumps(saved | {"offset": "12"})):
        mark.write_text(damaged, encoding="utf-8")
        report = service.import_transcripts("claude-code", [path], project="later").files[0]
        assert (report.status, report.skipped["summary"], report.added) == ("imported", 1, 0)
    assert service.import_transcripts("claude-code", [path], project="later").files[0].status == "unchanged"
    assert not (tmp_path / "data" / "projects" / "later").exists()


def test_the_marks_kept_in_the_data_directory_are_bounded_oldest_first(tmp_path: Path) -> None:
    marks = UnsavedWatermarks(tmp_path / "import-marks")
    marks.LIMIT = 2
    made: set[Path] = set()
    for number in range(3):
        marks.put("later", Watermark("claude-code", f"/t/{number}.jsonl", offset=10 + number))
        (file,) = set((tmp_path / "import-marks").iterdir()) - made
        os.utime(file, ns=(number * 10**9, number * 10**9))  # written a second apart
        made.add(file)
    marks.prune()
    assert marks.get("later", "claude-code", "/t/0.jsonl") is None
    assert [marks.get("later", "claude-code", f"/t/{n}.jsonl").offset for n in (1, 2)] == [11, 12]  # type: ignore[union-attr]
    marks.drop("later", "claude-code", "/t/1.jsonl")
    assert len(list((tmp_path / "import-marks").iterdir())) == 1
