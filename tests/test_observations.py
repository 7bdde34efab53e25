"""Observation writes: per-item receipts, idempotent ids, refs that must exist."""

from __future__ import annotations

import dataclasses
import json

import pytest

from obsmem import ids
from obsmem.app import Obsmem
from obsmem.memories import RejectedItem, WrittenItem


@pytest.fixture
def project(service: Obsmem) -> Obsmem:
    service.append_events("p", "s1", [{"role": "user", "content": f"event {n}"} for n in range(1, 6)])
    service.append_events("p", "s2", [{"role": "user", "content": "other"}])
    return service


def _obs(**overrides: object) -> dict:
    base = {
        "session_id": "s1",
        "content": "User wants RetryPolicy.backoff_ms = 250",
        "timestamp": "2026-03-02 09:15",
        "importance": "high",
        "source_refs": [{"session_id": "s1", "seq": 2}, 1],
    }
    return base | overrides


def test_receipt_lists_added_duplicates_and_rejected(project: Obsmem) -> None:
    receipt = project.add_observations(
        "p",
        [
            _obs(),
            _obs(),  # same id within the batch
            _obs(timestamp="2026-02-30 09:15"),
            _obs(source_refs=[99]),
            _obs(content="two\nlines"),
            _obs(importance="urgent"),
            _obs(session_id="nope", source_refs=[{"session_id": "s1", "seq": 1}]),
            "not an object",
            _obs(source_refs=[]),
        ],
    ).to_dict()
    expected_id = ids.observation_id(
        "s1", "2026-03-02 09:15", "User wants RetryPolicy.backoff_ms = 250", [("s1", 1), ("s1", 2)]
    )
    assert receipt["added"] == [{"index": 0, "id": expected_id[:12], "memory_id": expected_id}]
    assert receipt["duplicates"] == [{"index": 1, "id": expected_id[:12], "memory_id": expected_id}]
    rejected = {item["index"]: item["code"] for item in receipt["rejected"]}
    assert rejected == {
        2: "invalid_request",
        3: "unknown_source_ref",
        4: "invalid_request",
        5: "invalid_request",
        6: "session_not_found",
        7: "invalid_request",
        8: "invalid_request",
    }
    for item in receipt["rejected"]:
        assert "RetryPolicy" not in item["message"]  # messages never quote memory text
    assert project.database("p").query("SELECT count(*) FROM memories")[0][0] == 1


@pytest.mark.parametrize("bad", ["a/b", "s1\nFAKE LOG LINE", "s1\x1b[31mRED", "s1\x00b", "Z" * 5000, "-s1"])
def test_a_malformed_session_id_is_refused_whole_and_never_echoed(project: Obsmem, bad: str) -> None:
    """The session id's pattern must match the whole value: matched anywhere in it, "a/b" or a value with a
    line break passed, and came back inside a ``session_not_found`` message."""
    receipt = project.add_observations(
        "p", [_obs(session_id=bad), _obs(source_refs=[{"session_id": bad, "seq": 1}])]
    ).to_dict()
    assert [(item["index"], item["code"]) for item in receipt["rejected"]] == [
        (0, "invalid_request"),
        (1, "invalid_request"),
    ]
    for item in receipt["rejected"]:
        assert item["message"].endswith(
            "must be 1-128 characters of letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit"
        )
        assert bad not in item["message"] and "RED" not in item["message"] and "FAKE" not in item["message"]
    assert project.database("p").query("SELECT count(*) FROM memories")[0][0] == 0


def test_rewriting_the_same_observation_is_a_duplicate_and_ref_order_does_not_matter(project: Obsmem) -> None:
    first = project.add_observations("p", [_obs()])
    second = project.add_observations("p", [_obs(source_refs=[1, {"seq": 2}])])
    assert second.duplicates[0].memory_id == first.added[0].memory_id


def test_refs_may_cite_other_sessions(project: Obsmem) -> None:
    receipt = project.add_observations("p", [_obs(source_refs=[{"session_id": "s2", "seq": 1}])])
    assert len(receipt.added) == 1
    recalled = project.recall("p", receipt.added[0].id)
    assert [(s.session_id, s.seq) for s in recalled.sources] == [("s2", 1)]


def test_views_present_each_kind(project: Obsmem) -> None:
    project.add_observations("p", [_obs()])
    rows = project.database("p").query("SELECT timestamp, importance, source_refs FROM observations")
    assert rows == [("2026-03-02 09:15", "high", '[{"session_id":"s1","seq":1},{"session_id":"s1","seq":2}]')]


def test_an_observations_file_rejects_bad_lines_one_by_one(project: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = json.dumps(_obs()).encode()
    later = json.dumps(_obs(content="Second note about RetryPolicy")).encode()
    path = tmp_path / "observations.jsonl"
    path.write_bytes(b"\n".join([good, b'{"content": "caf\xe9"}', b"[" * 100_000, b"", later]) + b"\n")
    receipt = project.import_observations("p", path).to_dict()
    assert [item["index"] for item in receipt["added"]] == [0, 4]
    assert [(item["index"], item["message"]) for item in receipt["rejected"]] == [
        (1, "line 2: not UTF-8 text"),
        (2, "line 3: not valid JSON (nested too deeply)"),
    ]


def test_observations_for_a_project_without_events_are_rejected_and_create_nothing(service: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    receipt = service.add_observations("fresh", [_obs(), {"content": "no session"}]).to_dict()
    assert receipt["added"] == [] and receipt["duplicates"] == []
    rejected = [(item["index"], item["code"]) for item in receipt["rejected"]]
    assert rejected == [(0, "session_not_found"), (1, "invalid_request")]
    path = tmp_path / "observations.jsonl"
    path.write_text(json.dumps(_obs()) + "\n", encoding="utf-8")
    assert [item.code for item in service.import_observations("fresh", path).rejected] == ["session_not_found"]
    assert not service.projects.exists("fresh") and not service.projects.directory("fresh").exists()


def test_a_write_receipt_is_typed_and_its_json_keeps_the_wire_shape(project: Obsmem) -> None:
    receipt = project.add_observations("p", [_obs(), _obs(), _obs(source_refs=[99])])
    added, duplicate, rejected = receipt.added[0], receipt.duplicates[0], receipt.rejected[0]
    assert isinstance(added, WrittenItem) and isinstance(duplicate, WrittenItem)
    assert isinstance(rejected, RejectedItem)
    assert (added.index, duplicate.index, rejected.index, rejected.code) == (0, 1, 2, "unknown_source_ref")
    with pytest.raises(dataclasses.FrozenInstanceError):
        added.index = 5  # type: ignore[misc]
    memory_id = added.memory_id
    # Key order is part of the JSON every surface emits: it must not change with the types.
    assert json.dumps(receipt.to_dict()) == json.dumps(
        {
            "added": [{"index": 0, "id": memory_id[:12], "memory_id": memory_id}],
            "duplicates": [{"index": 1, "id": memory_id[:12], "memory_id": memory_id}],
            "rejected": [{"index": 2, "code": "unknown_source_ref", "message": rejected.message}],
        }
    )


def test_an_observations_file_receipt_indexes_typed_items_by_line(project: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "observations.jsonl"
    path.write_text("\n".join([json.dumps(_obs()), "{not json", json.dumps(_obs())]) + "\n", encoding="utf-8")
    receipt = project.import_observations("p", path)
    assert [(type(item), item.index) for item in receipt.added + receipt.duplicates] == [
        (WrittenItem, 0),
        (WrittenItem, 2),
    ]
    assert [(item.index, item.code) for item in receipt.rejected] == [(1, "invalid_request")]
