"""Codex rollouts: items, tool calls and outputs, compaction, early and compressed rollouts, growth."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from support.transcripts import copy_fixture, stored_events, write_jsonl

SESSION = "5a7c1e2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"
OLD = "9e8d7c6b-5a4f-4e3d-2c1b-0a9f8e7d6c5b"


def test_a_rollout_maps_messages_calls_outputs_and_skips_mirrors(service: Obsmem, tmp_path: Path) -> None:
    sessions = copy_fixture("codex", tmp_path) / "sessions"
    rollout = next(sessions.rglob("*.jsonl"))
    run = service.import_transcripts("codex", [rollout])
    assert run.problems == 0 and run.added == 13
    assert dict(run.files[0].skipped) == {
        "session_meta": 1,
        "instructions": 1,
        "context_preamble": 1,
        "turn_context": 1,
        "event_msg": 2,
        "reasoning": 1,
        "ghost_snapshot": 1,
        "compaction": 2,
    }
    events = stored_events(tmp_path / "data", "billing")
    assert {row[0] for row in events} == {SESSION}
    assert [row[2:4] for row in events][:3] == [
        ("user", "message"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
    ]
    assert json.loads(events[1][6]) == {"command": ["rg", "round(", "billing/"]}  # arguments parsed from JSON text
    assert events[2][4].startswith("billing/invoice.py:41") and events[2][5] == "shell"
    assert events[3][5] == "apply_patch" and json.loads(events[3][6]).startswith("*** Begin Patch")
    assert events[6][4].startswith("[error] ")  # a non-zero exit code
    assert events[7][2] == "system" and events[7][4].startswith("[compaction summary]")
    search_call, search_result, image_call, image_result = events[9:13]
    assert search_call[2:4] == ("assistant", "tool_call") and (search_call[5], search_call[7]) == (
        "tool_search",
        "call_S1",
    )
    assert json.loads(search_call[6]) == {"query": "ledger export"}
    assert search_result[2:4] == ("tool", "tool_result") and "ledger.export_csv" in search_result[4]
    assert image_call[5] == "image_generation" and json.loads(image_call[6]) == {
        "prompt": "a bar chart of invoice totals"
    }
    assert image_result[4] == "an image was generated" and "iVBOR" not in image_result[4]  # no image data


def test_a_forked_rollouts_new_turns_stay_in_the_fork(service: Obsmem, tmp_path: Path) -> None:
    fork, parent = "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "5a7c1e2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"
    meta = {"type": "session_meta", "payload": {"id": fork, "cwd": "/w/forks", "forked_from_id": parent}}
    copied_meta = {"type": "session_meta", "payload": {"id": parent, "cwd": "/w/forks"}}

    def said(role: str, text: str) -> dict[str, object]:
        kind = "input_text" if role == "user" else "output_text"
        return {
            "type": "response_item",
            "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": text}]},
        }

    path = write_jsonl(
        tmp_path / f"rollout-2025-05-01T00-00-00-{fork}.jsonl",
        [
            meta,
            copied_meta,
            said("user", "old question"),
            said("assistant", "old answer"),
            said("user", "new question"),
        ],
    )
    run = service.import_transcripts("codex", [path])
    assert run.problems == 0 and run.files[0].skipped == {"session_meta": 1, "replayed": 1}
    assert {row[0] for row in stored_events(tmp_path / "data", "forks")} == {fork}
    write_jsonl(path, [copied_meta, said("assistant", "new answer")], mode="a")  # the parent's meta again
    assert service.import_transcripts("codex", [path]).added == 1
    assert [row[:2] for row in stored_events(tmp_path / "data", "forks")][-1] == (fork, 4)


def test_an_early_compressed_rollout_with_a_bare_header(service: Obsmem, tmp_path: Path) -> None:
    sessions = copy_fixture("codex", tmp_path) / "sessions"
    old = next(sessions.rglob("*.jsonl.gz"))
    run = service.import_transcripts("codex", [old], project="ops")
    assert run.added == 4 and run.problems == 0
    events = stored_events(tmp_path / "data", "ops")
    assert {row[0] for row in events} == {OLD}
    assert events[2][4] == "nightly.sh\nweekly.sh" and events[2][5] == "shell"
    again = service.import_transcripts("codex", [old], project="ops")
    assert again.added == 0


def test_a_growing_compressed_rollout_adds_only_new_items(service: Obsmem, tmp_path: Path) -> None:
    path = tmp_path / "rollout-2025-01-01T00-00-00-0b9d0c1e-2f3a-4b5c-9d8e-7f6a5b4c3d2e.jsonl.gz"
    lines = [
        {"type": "session_meta", "payload": {"id": "0b9d0c1e-2f3a-4b5c-9d8e-7f6a5b4c3d2e", "cwd": "/w/zipped"}},
        {
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
        },
    ]
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    assert service.import_transcripts("codex", [path]).added == 1
    more = {
        "type": "response_item",
        "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
    }
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in [*lines, more])
    grown = service.import_transcripts("codex", [path])
    assert grown.added == 1 and grown.duplicates == 0
    assert [row[4] for row in stored_events(tmp_path / "data", "zipped")] == ["one", "two"]


def test_unknown_items_and_lines_before_the_header_are_reported(service: Obsmem, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "rollout-x.jsonl",
        [
            {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "early"}},
            {"type": "session_meta", "payload": {"id": "s-1", "cwd": "/w/rep"}},
            {"type": "response_item", "payload": {"type": "hologram"}},
            {"type": "mystery", "payload": {}},
            {
                "type": "response_item",
                "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]},
            },
        ],
    )
    report = service.import_transcripts("codex", [path]).files[0]
    assert {(p.reason, p.line) for p in report.listed} == {("no_session", 1), ("unknown_item", 3), ("unknown_type", 4)}
    assert [row[4] for row in stored_events(tmp_path / "data", "rep")] == ["kept"]


def test_a_zstandard_compressed_rollout(service: Obsmem, tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    rollout = next((copy_fixture("codex", tmp_path) / "sessions").rglob("*.jsonl"))
    packed = rollout.with_name(rollout.name + ".zst")
    packed.write_bytes(zstandard.ZstdCompressor().compress(rollout.read_bytes()))
    run = service.import_transcripts("codex", [packed])
    assert run.added == 13 and run.problems == 0
    assert service.import_transcripts("codex", [packed]).files[0].status == "unchanged"


def test_a_damaged_compressed_rollout_is_reported_not_raised(service: Obsmem, tmp_path: Path) -> None:
    whole = gzip.compress(
        b"".join(
            json.dumps(line).encode() + b"\n"
            for line in [
                {"type": "session_meta", "payload": {"id": "d-1", "cwd": "/w/damaged"}},
                {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "x" * 5000}},
            ]
        )
    )
    cut = tmp_path / "rollout-cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    garbled = tmp_path / "rollout-garbled.jsonl.gz"
    garbled.write_bytes(whole[:20] + bytes(len(whole) - 20))
    run = service.import_transcripts("codex", [cut, garbled])
    assert [report.status for report in run.files] == ["failed", "failed"]
    assert all(report.problems == {"read_error": 1} for report in run.files)


def test_what_comes_before_damage_in_a_compressed_rollout_is_stored(service: Obsmem, tmp_path: Path) -> None:
    lines = [{"type": "session_meta", "payload": {"id": "d-2", "cwd": "/w/tail"}}]
    lines += [
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": f"request {n} " * 40}}
        for n in range(2000)
    ]
    packed = gzip.compress(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    path = tmp_path / "rollout-tail.jsonl.gz"
    keep = len(packed) * 7 // 10
    path.write_bytes(packed[:keep] + bytes(range(256)) * ((len(packed) - keep) // 256 + 1))
    report = service.import_transcripts("codex", [path]).files[0]
    assert report.status == "failed" and report.problems == {"read_error": 1} and report.listed[0].line > 1
    stored = stored_events(tmp_path / "data", "tail")
    assert 0 < len(stored) < 2000 and stored[0][4].startswith("request 0 ")
