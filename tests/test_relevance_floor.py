"""``[semantic] min_relevance``: a hybrid search whose nearest memory is not close enough returns no hits
and says so, on every surface; a close one is untouched; the reranker floor still rules with a reranker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from obsmem import Obsmem
from obsmem.retrieval import SearchPlan
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http import create_app
from obsmem.surfaces.tools import execute_tool
from support.http_server import LOCAL
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

MEMORIES = [
    "login test flaky because the session clock mock drifts",
    "billing export slow: one query per invoice row in the serializer",
    "retry policy backoff capped at thirty seconds after the outage",
]
CLOSE = "login test flaky session clock mock"
FAR = "kubernetes ingress certificate renewal"


def settings_with(tmp_path: Path, server: ModelServer, **semantic: Any) -> Any:
    return load_settings(data_dir=tmp_path / "data", semantic=semantic_settings(server, **semantic))


def evidence(memory: Obsmem, query: str) -> float:
    _, stages = memory.search_stages("p", query, SearchPlan(rerank=False, floor=False))
    assert stages.evidence is not None
    return stages.evidence


@pytest.fixture
def floor(tmp_path: Path, model_server: ModelServer) -> float:
    """Index the memories and return a floor between the close query's evidence and the far one's."""
    with Obsmem(settings_with(tmp_path, model_server), background_indexing=False) as memory:
        add_memories(memory, "p", [(f"2024-05-0{1 + i} 12:00", text) for i, text in enumerate(MEMORIES)])
        memory.index("p")
        close, far = evidence(memory, CLOSE), evidence(memory, FAR)
    assert close > far
    return (close + far) / 2


def test_python_and_http_say_nothing_was_close(tmp_path: Path, model_server: ModelServer, floor: float) -> None:
    with Obsmem(settings_with(tmp_path, model_server, min_relevance=floor), background_indexing=False) as memory:
        far = memory.search("p", FAR, mode="hybrid")
        close = memory.search("p", CLOSE, mode="hybrid")
        assert far.hits == [] and far.nothing_close and not far.truncated
        assert close.hits and not close.nothing_close and "nothing_close" not in close.to_dict()
        with TestClient(create_app(memory), base_url=LOCAL) as client:
            body = client.post("/v1/projects/p/search", json={"query": FAR, "mode": "hybrid"}).json()
            kept = client.post("/v1/projects/p/search", json={"query": CLOSE, "mode": "hybrid"}).json()
    assert body["hits"] == [] and body["nothing_close"] is True
    assert "close enough" in body["note"] and "does not prove" in body["note"] and FAR not in body["note"]
    assert kept["hits"] and set(kept) == {"mode", "hits", "truncated", "partial"}


def test_tool_text_and_cli_say_it_too(tmp_path: Path, model_server: ModelServer, floor: float) -> None:
    with Obsmem(settings_with(tmp_path, model_server, min_relevance=floor), background_indexing=False) as memory:
        text = execute_tool(memory, "p", "memory_search", {"query": FAR})
    answer = json.loads(text)
    assert answer["hits"] == [] and answer["nothing_close"] is True and "does not prove" in answer["note"]
    config = tmp_path / "obsmem.toml"
    section = semantic_settings(model_server, min_relevance=floor)
    config.write_text(
        f"[semantic]\nmin_relevance = {floor!r}\n"
        f'[semantic.embedding]\nprovider = "openai"\nbase_url = "{model_server.base_url}"\n'
        f'model_id = "{section["embedding"]["model_id"]}"\n[semantic.index]\nbackground = false\n',
        encoding="utf-8",
    )
    base = ["--data-dir", str(tmp_path / "data"), "--config", str(config), "search", "p"]
    shown = CliRunner().invoke(cli, [*base, FAR, "--mode", "hybrid"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())  # the console wraps lines
    assert "close enough" in said and "does not prove" in said
    found = CliRunner().invoke(cli, [*base, CLOSE, "--mode", "hybrid"])
    assert found.exit_code == 0 and "close enough" not in found.stdout and "hit" in found.stdout


def test_a_configured_reranker_keeps_its_own_floor(tmp_path: Path, model_server: ModelServer, floor: float) -> None:
    reranker = {"provider": "http", "base_url": model_server.base_url, "model_id": "overlap"}
    settings = settings_with(tmp_path, model_server, min_relevance=floor, reranker=reranker)
    with Obsmem(settings, background_indexing=False) as memory:
        result = memory.search("p", FAR, mode="hybrid")
    # The reranker (no min_score) decides: the fused floor does not apply, so the nearest memories return.
    assert result.hits and not result.nothing_close


def test_a_search_with_nothing_close_returns_no_notes_and_judges_none(
    tmp_path: Path, model_server: ModelServer, floor: float
) -> None:
    with Obsmem(settings_with(tmp_path, model_server, min_relevance=floor), background_indexing=False) as memory:
        memory.save_note("p", "kubernetes ingress certificates renew on the first of the month")
        far = memory.search("p", FAR, mode="hybrid", trust="all")
        memory.trust.dispatcher.flush()
        assert far.hits == [] and far.nothing_close
        assert memory.jobs("p").counts.queued == 0  # nothing close: the note is not sent to the judge
        close = memory.search("p", "kubernetes ingress certificates renew", mode="exact", trust="all")
        assert [hit.kind for hit in close.hits] == ["note"]  # the note is there, and found when asked for
