"""A question that writes an identifier gets the memory that writes it before that memory's neighbours
(``[semantic.fusion] named_first``, retrieval/names.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem import Obsmem
from obsmem.retrieval import SearchPlan
from obsmem.retrieval.names import NAMED_FIRST_DEPTH, name_pattern, named_first
from obsmem.settings import SemanticSettings, load_settings
from support.hybrid_reference import reference_search
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
    moved = named_first("What is RetryPolicy.backoff_ms set to?", order, TEXTS.__getitem__)
    assert [label for label, _ in moved] == [2, 1, 3, 4]
    assert dict(moved) == dict(order)  # each keeps its own score


def test_a_whole_name_case_aside() -> None:
    order = ranked(3, 1, 4)
    assert [label for label, _ in named_first("What was ticket #2510 about?", order, TEXTS.__getitem__)] == [4, 3, 1]
    upper = named_first("Where is RETRYPOLICY.BACKOFF_MS read?", ranked(1, 2), TEXTS.__getitem__)
    assert [label for label, _ in upper] == [2, 1]
    assert [label for label, _ in named_first("What did `qm deploy` do?", ranked(1, 5), TEXTS.__getitem__)] == [5, 1]


@pytest.mark.parametrize(
    ("name", "text", "writes"),
    [
        ("#2510", "Merged PR#2510 today.", True),
        ("#2510", "Fixed (#2510).", True),
        ("#2510", "Ticket #25100.", False),
        ("-v", "Run it with --v.", False),
        ("-v", "Run it with -v now.", True),
        ("--dry-run", "Added --dry-run-all.", False),
        ("--dry-run", "Pass the flag --dry-run.", True),
        ("build_filters()", "build_filters(project, tags) joined facets with OR.", True),
        ("qm  deploy", "Ran qm deploy on staging.", True),
        ("loaders/http/", "Moved loaders/http to loaders/net.", True),
        ("wait_for_x", "wait_for_x_y timed out.", False),
        ("ESP32-C6", "Switched to the ESP32-C6.", True),
        ("ESP32-C6", "Tried an ESP32-C6X.", False),
        ("INC-0419", "Drafted docs/postmortems/2025-04-02-INC-0419-duplicate-emails.md.", True),
    ],
)
def test_how_a_memory_writes_a_name(name: str, text: str, writes: bool) -> None:
    assert (name_pattern(name).search(text) is not None) is writes


def test_a_capitalised_name_is_not_an_identifier() -> None:
    texts = {1: "Moved the pipeline to a new scheduler.", 2: "Dagster runs the pipeline."}
    order = ranked(1, 2)
    assert named_first("Why did Dagster replace the scheduler?", order, texts.__getitem__) == order


def test_more_of_the_names_first_then_the_fused_order() -> None:
    texts = {1: "nothing here", 2: "#2510 only", 3: "#2510 and --dry-run", 4: "--dry-run only"}
    moved = named_first("Did #2510 change --dry-run?", ranked(1, 2, 4, 3), texts.__getitem__)
    assert [label for label, _ in moved] == [3, 2, 4, 1]


def test_nothing_moves_without_an_identifier_or_beyond_the_depth() -> None:
    order = ranked(1, 3, 2)
    assert named_first("What are the retry settings of the client?", order, TEXTS.__getitem__) == order
    deep = ranked(*range(10, 10 + NAMED_FIRST_DEPTH), 2)
    texts = {**{label: "unrelated" for label in range(10, 10 + NAMED_FIRST_DEPTH)}, 2: TEXTS[2]}
    assert named_first("What is RetryPolicy.backoff_ms set to?", deep, texts.__getitem__) == deep
    assert named_first("What is RetryPolicy.backoff_ms set to?", [], TEXTS.__getitem__) == []


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
    # One list alone is that list's own order, whatever the setting (what the evaluation compares against).
    for plan in (SearchPlan(lists=("vector",)), SearchPlan(lists=("bm25",))):
        orders = []
        for settings in (off, on):
            with Obsmem(settings, background_indexing=False) as memory:
                result, _ = memory.search_stages("p", question, plan)
                orders.append([hit.content for hit in result.hits])
        assert orders[0] == orders[1] and orders[0]


def test_the_reference_search_agrees(tmp_path: Path, model_server: ModelServer) -> None:
    question = "What is the default backoff of the retry settings, RetryPolicy.backoff_ms?"
    items = [
        ("2024-05-01 12:00", "The default backoff of the retry settings was discussed with the user at length."),
        ("2024-05-01 12:05", "RetryPolicy.backoff_ms is 250."),
        ("2024-05-01 12:10", "Lunch."),
    ]
    for named in (False, True):
        settings = load_settings(
            data_dir=tmp_path / str(named), semantic=semantic_settings(model_server, fusion={"named_first": named})
        )
        with Obsmem(settings, background_indexing=False) as memory:
            ids = add_memories(memory, "p", items)
            memory.index("p")
            hits = [hit.memory_id for hit in memory.search("p", question, mode="hybrid").hits]
            with memory.database("p").read() as conn:
                assert hits == reference_search(conn, memory.settings.semantic, question)
        assert hits[0] == ids[1 if named else 0]


def test_supersession_runs_after_it(tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]) -> None:
    # The earlier memory writes the identifier; the later one, in another session, revises it without
    # naming it. A question about the present gets the revision first: names first, then supersession.
    question = "What is the retry backoff of RetryPolicy.backoff_ms now?"
    earlier = "RetryPolicy.backoff_ms: the default retry backoff is 250 ms."
    later = "Switched the default retry backoff to 500 ms instead of 250 ms."
    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server, supersession={"enabled": True}),
        **backend_storage,
    )
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", [("2024-03-01 12:00", earlier)], session="march")
        add_memories(memory, "p", [("2024-06-01 12:00", later)], session="june")
    assert first_hit(settings, question) == later
    # Without "now", the revision still says which value it replaced ("instead of 250 ms"): named replacements
    # put it first; without them, or for a question anchored in the past, the names decide.
    assert first_hit(settings, question.replace(" now", "")) == later
    assert first_hit(settings, "What was the retry backoff of RetryPolicy.backoff_ms in March?") == earlier
    unnamed = settings.model_copy(
        update={
            "semantic": settings.semantic.model_copy(
                update={"supersession": settings.semantic.supersession.model_copy(update={"named_replacements": False})}
            )
        }
    )
    assert first_hit(unnamed, question.replace(" now", "")) == earlier


@pytest.mark.parametrize("value", ["sometimes", [1]])
def test_a_bad_value_names_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(Exception, match=r"named_first"):
        load_settings(data_dir=tmp_path, semantic={"fusion": {"named_first": value}})
