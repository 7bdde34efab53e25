"""``[semantic] relevance_measure``: what ``min_relevance`` floors, the fused evidence alone or with how far
the best cosine stands out from the query's typical one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from obsmem import Obsmem
from obsmem.retrieval import SearchPlan
from obsmem.retrieval.fusion import relevance, standout
from obsmem.retrieval.ranked import RankedList
from obsmem.settings import SemanticSettings, load_settings
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

MEMORIES = [
    "login test flaky because the session clock mock drifts",
    "billing export slow: one query per invoice row in the serializer",
    "retry policy backoff capped at thirty seconds after the outage",
    "release notes mention the new icon set for the docs theme",
]


def test_standout_is_the_best_cosine_above_the_mean() -> None:
    vector = RankedList("vector", [(1, 0.8), (2, 0.4), (3, 0.3)])
    bm25 = RankedList("bm25", [(2, 5.0)], ceiling=10.0)
    assert standout([bm25, vector]) == pytest.approx(0.8 - 0.5)
    # The exact cosines, when given, replace the list's own (the graph's rounding aside).
    assert standout([vector], {1: 0.9, 2: 0.4, 3: 0.2}) == pytest.approx(0.9 - 0.5)
    assert standout([bm25]) == 0.0
    flat = RankedList("vector", [(1, 0.5), (2, 0.5)])
    assert standout([flat]) == 0.0  # nothing stands out
    fused = [(1, 0.7), (2, 0.6)]
    assert relevance(fused, [vector], "evidence", None) == 0.7
    assert relevance(fused, [vector], "evidence+standout", None) == pytest.approx(0.7 + 0.3)
    assert relevance([], [vector], "evidence+standout", None) is None
    with pytest.raises(ValueError, match="unknown relevance measure"):
        relevance(fused, [vector], "loudness", None)


def test_the_setting_is_checked() -> None:
    assert SemanticSettings().relevance_measure == "evidence"
    assert SemanticSettings(relevance_measure="evidence+standout").relevance_measure == "evidence+standout"
    with pytest.raises(ValidationError):
        SemanticSettings(relevance_measure="loudness")  # type: ignore[arg-type]


def measured(tmp_path: Path, server: ModelServer, measure: str, query: str) -> float:
    section = semantic_settings(server, relevance_measure=measure)
    with Obsmem(load_settings(data_dir=tmp_path / measure, semantic=section), background_indexing=False) as memory:
        add_memories(memory, "p", [(f"2024-05-0{1 + i} 12:00", text) for i, text in enumerate(MEMORIES)])
        memory.index("p")
        _, stages = memory.search_stages("p", query, SearchPlan(rerank=False, floor=False))
        assert stages.evidence is not None
        return stages.evidence


def test_the_floor_compares_the_configured_measure(tmp_path: Path, model_server: ModelServer) -> None:
    query = "login test flaky session clock"
    evidence = measured(tmp_path, model_server, "evidence", query)
    with_standout = measured(tmp_path, model_server, "evidence+standout", query)
    assert with_standout > evidence  # the matching memory stands out from the other three
    floor = (evidence + with_standout) / 2
    for measure, kept in (("evidence", False), ("evidence+standout", True)):
        section = semantic_settings(model_server, relevance_measure=measure, min_relevance=floor)
        settings = load_settings(data_dir=tmp_path / measure, semantic=section)
        with Obsmem(settings, background_indexing=False) as memory:
            result = memory.search("p", query, mode="hybrid")
        assert bool(result.hits) is kept and result.nothing_close is not kept
