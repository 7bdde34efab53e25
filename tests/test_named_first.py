"""A question that writes an identifier gets the memory that writes it before that memory's neighbours
(``[semantic.fusion] named_first``, retrieval/names.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem import Obsmem
from obsmem.retrieval.names import NAMED_FIRST_DEPTH, named_first
from obsmem.settings import SemanticSettings, load_settings
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

TEXTS = {
    1: "The retry settings of the client default to three attempts.",
    2: "RetryPolicy.backoff_ms defaults to 250.",
    3: "Ticket #25100 covers the flaky upload.",
    4: "Ticket #2510 covers the flaky upload.",
    5: "Ran `qm deploy` against staging.",
}


def ranked(*labels: int) -> list[tuple[int, float]]:
    return [(label, 1.0 - position / 100) for position, label in enumerate(labels)]


def test_the_memory_that_writes_the_identifier_goes_first_scores_kept() -> None:
    order = ranked(1, 3, 2, 4)
    moved = named_first("What is RetryPolicy.backoff_ms set to?", order, TEXTS)
    assert [label for label, _ in moved] == [2, 1, 3, 4]
    assert dict(moved) == dict(order)  # each keeps its own score


def test_a_whole_name_case_aside() -> None:
    order = ranked(3, 1, 4)
    assert [label for label, _ in named_first("What was ticket #2510 about?", order, TEXTS)] == [4, 3, 1]
    upper = named_first("Where is RETRYPOLICY.BACKOFF_MS read?", ranked(1, 2), TEXTS)
    assert [label for label, _ in upper] == [2, 1]
    assert [label for label, _ in named_first("What did `qm deploy` do?", ranked(1, 5), TEXTS)] == [5, 1]


def test_more_of_the_names_first_then_the_fused_order() -> None:
    texts = {1: "nothing here", 2: "#2510 only", 3: "#2510 and --dry-run", 4: "--dry-run only"}
    moved = named_first("Did #2510 change --dry-run?", ranked(1, 2, 4, 3), texts)
    assert [label for label, _ in moved] == [3, 2, 4, 1]


def test_nothing_moves_without_an_identifier_or_beyond_the_depth() -> None:
    order = ranked(1, 3, 2)
    assert named_first("What are the retry settings of the client?", order, TEXTS) == order
    deep = ranked(*range(10, 10 + NAMED_FIRST_DEPTH), 2)
    texts = {**{label: "unrelated" for label in range(10, 10 + NAMED_FIRST_DEPTH)}, 2: TEXTS[2]}
    assert named_first("What is RetryPolicy.backoff_ms set to?", deep, texts) == deep
    assert named_first("What is RetryPolicy.backoff_ms set to?", [], TEXTS) == []


def test_on_by_default() -> None:
    assert SemanticSettings().fusion.named_first is True


def first_hit(settings: Any, query: str) -> str:
    with Obsmem(settings, background_indexing=False) as memory:
        memory.index("p")
        return memory.search("p", query, mode="hybrid").hits[0].content


def test_hybrid_search_puts_the_identifiers_memory_before_its_neighbour(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    # The neighbour says most of the question's words, and its keyword document holds the identifier from
    # the memory beside it, so the fused order alone puts it first.
    question = "What is the default backoff of the retry settings, RetryPolicy.backoff_ms?"
    neighbour = "The default backoff of the retry settings was discussed with the user at length."
    holder = "RetryPolicy.backoff_ms is 250."
    items = [("2024-05-01 12:00", neighbour), ("2024-05-01 12:05", holder), ("2024-05-01 12:10", "Lunch.")]
    data_dir = tmp_path / "data"
    off = load_settings(
        data_dir=data_dir, semantic=semantic_settings(model_server, fusion={"named_first": False}), **backend_storage
    )
    with Obsmem(off, background_indexing=False) as memory:
        add_memories(memory, "p", items)
    assert first_hit(off, question) == neighbour  # the case the setting is for
    on = load_settings(data_dir=data_dir, semantic=semantic_settings(model_server), **backend_storage)
    assert first_hit(on, question) == holder


@pytest.mark.parametrize("value", ["sometimes", [1]])
def test_a_bad_value_names_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(Exception, match=r"named_first"):
        load_settings(data_dir=tmp_path, semantic={"fusion": {"named_first": value}})
