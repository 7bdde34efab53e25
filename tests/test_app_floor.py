"""The application floor: its typed results and the one mode dispatch (where it sits among the layers is a
contract of pyproject.toml, checked by test_layering.py)."""

from __future__ import annotations

import dataclasses

import pytest

from obsmem.app import Obsmem
from obsmem.app.results import JobCounts, ProjectStatus, Recollection
from obsmem.app.typed import build
from obsmem.errors import NotFound, ValidationFailed
from obsmem.retrieval.search import SearchModes


def test_the_base_package_re_exports_the_app() -> None:
    import obsmem

    assert obsmem.Obsmem is Obsmem


def test_a_result_refuses_a_row_whose_keys_differ_from_its_fields() -> None:
    with pytest.raises(TypeError, match=r"missing keys \['failed'\]"):
        build(JobCounts, {"queued": 1, "running": 0, "done": 0})
    with pytest.raises(TypeError, match=r"unexpected keys \['cancelled'\]"):
        build(JobCounts, {"queued": 1, "running": 0, "done": 0, "failed": 0, "cancelled": 2})
    assert build(JobCounts, {"queued": 1, "running": 0, "done": 2, "failed": 0}) == JobCounts(1, 0, 2, 0)


def test_status_is_typed_and_publishes_the_same_document(service: Obsmem) -> None:
    service.append_events("p", "s1", [{"role": "user", "content": "fix the login test"}])
    service.add_observations(
        "p", [{"session_id": "s1", "content": "Login test fails", "timestamp": "2026-01-02 10:00", "source_refs": [1]}]
    )
    status = service.status("p")
    assert isinstance(status, ProjectStatus) and isinstance(status.jobs, JobCounts)
    assert (status.sessions, status.events, status.observations, status.reflections) == (1, 1, 1, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.sessions = 2  # type: ignore[misc]
    body = status.to_dict()
    assert list(body)[:6] == ["project", "sessions", "events", "observations", "reflections", "last_activity"]
    assert "index" not in body and "indexed_count" not in body  # semantic mode is off
    assert body["jobs"] == {"queued": 0, "running": 0, "done": 0, "failed": 0}


def test_recall_and_forget_answer_with_typed_results(service: Obsmem) -> None:
    service.append_events(
        "p",
        "s1",
        [{"role": "assistant", "type": "tool_call", "content": "", "tool_name": "sh", "tool_args": {"cmd": "ls"}}],
    )
    receipt = service.add_observations(
        "p", [{"session_id": "s1", "content": "Listed the files", "timestamp": "2026-01-02 10:00", "source_refs": [1]}]
    )
    memory_id = receipt.added[0].memory_id
    recalled = service.recall("p", memory_id[:12])
    assert isinstance(recalled, Recollection)
    assert recalled.sources[0].tool_args == {"cmd": "ls"} and recalled.memory.source_refs[0].seq == 1
    body = recalled.to_dict()
    assert list(body["memory"]) == [
        "id",
        "memory_id",
        "kind",
        "session_id",
        "date",
        "importance",
        "content",
        "created_at",
        "source_refs",
    ]
    assert body["sources"][0]["tool_name"] == "sh" and "tool_call_id" not in body["sources"][0]
    forgotten = service.forget("p", memory_id[:12])
    assert forgotten.deleted.memory_id == memory_id
    assert forgotten.to_dict()["deleted"]["content"] == "Listed the files"
    with pytest.raises(NotFound):
        service.recall("p", memory_id[:12])


def test_observe_and_reflect_refuse_a_session_without_events(service: Obsmem) -> None:
    service.append_events("p", "s1", [{"role": "user", "content": "hello"}])
    for request in (service.observe, service.reflect):
        with pytest.raises(NotFound) as caught:
            request("p", "nobody")
        assert caught.value.code == "session_not_found"


def test_mode_dispatch_lives_in_one_place() -> None:
    exact_only = SearchModes(None)
    assert exact_only.default_mode == "exact"
    assert exact_only.runs_inline(None) and exact_only.runs_inline("exact") and not exact_only.runs_inline("hybrid")
    assert exact_only.runs_inline("exact", "memories")
    assert not exact_only.runs_inline("exact", "conversation") and not exact_only.runs_inline(None, "all")
    with pytest.raises(ValidationFailed) as caught:
        exact_only.hybrid_searcher()
    assert caught.value.code == "mode_unavailable"
    hybrid = SearchModes(object())  # type: ignore[arg-type]  # any searcher: only its presence matters here
    assert hybrid.default_mode == "hybrid"
    assert not hybrid.runs_inline(None) and hybrid.runs_inline("exact")
