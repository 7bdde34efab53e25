"""Common words at half weight in the query vector (``[semantic.fusion] common_word_share``): which words are
common, how the question is cut, how the two vectors combine, and the search on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from obsmem import Obsmem
from obsmem.indexer.vectors import VectorSet
from obsmem.retrieval import SearchPlan
from obsmem.retrieval.bm25 import query_word_spans, query_words
from obsmem.retrieval.common_words import (
    MIN_CHUNKS,
    common_words,
    estimated_count,
    half_weighted,
    may_be_common,
    without_words,
)
from obsmem.settings import load_settings
from support.hybrid_reference import reference_search
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

# -- which words are common -------------------------------------------------------------------------------


def test_a_word_is_common_from_its_share_of_the_chunks_on() -> None:
    counts = {"caroline": 50, "lake": 49, "paint": 3}
    assert common_words(counts, 100, 0.5) == {"caroline"}
    assert common_words(counts, 100, 0.25) == {"caroline", "lake"}
    assert common_words(counts, 100, 0.0) == set()  # off


def test_nothing_is_common_in_a_small_index() -> None:
    assert common_words({"caroline": MIN_CHUNKS - 1}, MIN_CHUNKS - 1, 0.5) == set()
    assert common_words({"caroline": MIN_CHUNKS}, MIN_CHUNKS, 0.5) == {"caroline"}


def test_a_count_that_stopped_at_its_bound_is_scaled_by_its_share_of_the_stretch_it_covered() -> None:
    assert estimated_count(6, 7, 23) == 19  # 6 of a stretch of 7 chunks: 6/7 of 23
    assert estimated_count(6, 6, 1000) == 1000  # every chunk counted holds it
    assert estimated_count(6, 100, 10) == 6  # never fewer than were counted
    assert estimated_count(6, 3, 10) == 6  # a stretch shorter than the count (vectors behind) proves no more
    assert estimated_count(0, 0, 0) == 0


def test_the_stretch_counts_live_chunks_between_two_labels() -> None:
    vectors = VectorSet(2, ef_search=10)
    labels = [1, 2, 5, 9, 12, 13]  # gaps, as deleted and rewritten chunks leave them
    vectors.add(labels, np.ones((6, 2), dtype=np.float32), ["2024-05-01 12:00:00"] * 6, ["s"] * 6)
    vectors.remove([12])
    assert vectors.live_within() == 5
    assert vectors.live_within(low=5) == 3  # 5, 9, 13 (12 removed)
    assert vectors.live_within(high=5) == 3
    assert vectors.live_within(low=3, high=12) == 2


def test_numbers_and_calendar_words_can_never_be_common() -> None:
    assert may_be_common("anna") and may_be_common("user")
    assert not may_be_common("may") and not may_be_common("2023") and not may_be_common("v2")


def test_dates_and_numbers_are_never_common() -> None:
    # Every keyword document writes its date as words ("8 May 2023"): those counts say nothing of the texts.
    counts = {"may": 100, "2023": 100, "8": 100, "monday": 100, "v2": 100, "user": 100}
    assert common_words(counts, 100, 0.5) == {"user"}


def test_a_word_the_index_holds_as_a_stopword_is_never_common() -> None:
    # Stemming merges "doe" with "does", "one" with "on": their counts are the stopword's.
    counts = {"doe": 100, "one": 100, "anna": 100}
    assert common_words(counts, 100, 0.5, never={"doe", "one"}) == {"anna"}


# -- the question without them ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did the user put in .env?", "What did the put in .env?"),
        ("Did the user edit ./run.sh?", "Did the edit ./run.sh?"),
        ("Did the user include std::vector or ::1?", "Did the include std::vector or ::1?"),
        ("User, .bashrc or .zshrc?", ".bashrc or .zshrc?"),
        ('Did the user say "yes" "no" or ""?', 'Did the say "yes" "no" or ""?'),
        ("Are the kids' 'art' files the user's?", "Are the kids' 'art' files the?"),
        ("What did Jo, user?", "What did Jo?"),
        ("std:: user went home", "std:: went home"),
    ],
)
def test_a_cut_is_tidied_where_it_stood_and_nowhere_else(query: str, expected: str) -> None:
    assert without_words(query, {"user"}) == expected


@pytest.mark.parametrize(
    ("query", "dropped", "expected"),
    [
        ("What did Caroline research?", {"caroline"}, "What did research?"),
        ("What is Caroline's identity?", {"caroline"}, "What is identity?"),
        ("Would CAROLINE enjoy it, or Caroline.", {"caroline"}, "Would enjoy it, or."),
        ('Did "Caroline" say so?', {"caroline"}, "Did say so?"),
        ("What did the user decide about the user's tests?", {"user"}, "What did the decide about the tests?"),
        ('"Caroline" said what, Jo?', {"caroline"}, "said what, Jo?"),
        ("Caroline, what did Jo say?", {"caroline"}, "what did Jo say?"),
        ("(Caroline) went home", {"caroline"}, "went home"),
        ("Did Jo , Caroline , paint?", {"caroline"}, "Did Jo, paint?"),
    ],
)
def test_the_common_words_are_cut_where_they_stand_alone(query: str, dropped: set[str], expected: str) -> None:
    assert without_words(query, dropped) == expected


@pytest.mark.parametrize(
    ("query", "dropped"),
    [
        ("Why did src/billing/invoice.py:218 break?", {"src", "py", "invoice"}),
        ("What does LK_RATE_LIMIT_BURST default to?", {"lk", "rate"}),
        ("What was still left in mid-April?", {"mid", "april"}),
        ("What changed in api.v2?", {"api"}),
        ("What did the team decide?", {"caroline"}),  # not in the question at all
        ("Is caroline_id or Caroline-Lee the key?", {"caroline", "lee"}),
    ],
)
def test_a_word_inside_an_identifier_or_a_path_stays(query: str, dropped: set[str]) -> None:
    assert without_words(query, dropped) is None


@pytest.mark.parametrize(
    "query", ["Caroline?", "What did Caroline do?", "Caroline and Melanie", "What about Caroline."]
)
def test_a_question_left_with_nothing_to_search_for_stays_whole(query: str) -> None:
    assert without_words(query, {"caroline", "melanie"}) is None


def test_the_word_spans_are_the_query_words() -> None:
    text = "What's Caroline's 3rd ÉCOLE trip, and J.K.'s?"
    spans = query_word_spans(text)
    assert [word for _, _, word in spans] == ["what", "caroline", "3", "école", "trip", "and", "j", "k", "s"]
    assert query_words(text) == [word for _, _, word in spans]
    assert [text[start:end] for start, end, _ in spans] == [
        "What's",
        "Caroline's",
        "3rd",
        "ÉCOLE",
        "trip",
        "and",
        "J",
        "K",
        "s",
    ]


# -- the two vectors --------------------------------------------------------------------------------------


def test_the_query_vector_is_the_mean_of_the_two_directions() -> None:
    rng = np.random.default_rng(7)
    whole, without = rng.normal(size=16), rng.normal(size=16)
    mixed = half_weighted(3.0 * whole, 0.5 * without)  # lengths do not matter, only directions
    assert np.isclose(np.linalg.norm(mixed), 1.0, atol=1e-6)
    unit_whole, unit_without = whole / np.linalg.norm(whole), without / np.linalg.norm(without)
    assert np.isclose(float(mixed @ unit_whole), float(mixed @ unit_without), atol=1e-6)
    assert np.allclose(mixed, half_weighted(unit_whole, unit_without), atol=1e-6)


# -- through the search -----------------------------------------------------------------------------------

# With the loopback server's hashed bags of words: a question that names a speaker the store's lines all
# carry ("Anna: ...") is drawn to Anna's short line that shares one more word; at half weight for "anna",
# the other speaker's line that holds both of the question's other words comes first.
QUESTION = "Anna pottery kiln?"
WITHOUT = "pottery kiln?"
TARGET = "Tim: pottery kiln"
SPEAKERS_LINE = "Anna: kiln"
OTHER_LINES = [
    "went to the support group",
    "talked about adoption plans",
    "read a book on the train",
    "visited mom",
    "joined a running club",
    "bought new shoes",
    "cooked pasta",
    "watched a film",
    "called a friend",
    "planted tomatoes",
    "fixed the bike",
    "wrote a poem",
    "played the guitar",
    "baked bread",
    "went hiking",
    "studied counseling",
    "cleaned the house",
    "drove to the coast",
    "sang in a choir",
    "walked the dog",
    "swam laps",
]


def conversation(count: int = len(OTHER_LINES)) -> list[tuple[str, str]]:
    lines = [f"Anna: {line}" for line in OTHER_LINES[:count]] + [TARGET, SPEAKERS_LINE]
    return [(f"2024-05-{1 + i // 10:02d} 12:{i % 10:02d}", line) for i, line in enumerate(lines)]


def vector_order(settings: Any, query: str = QUESTION) -> list[str]:
    with Obsmem(settings, background_indexing=False) as memory:
        result, _ = memory.search_stages("p", query, SearchPlan(lists=("vector",)))
        return [hit.content for hit in result.hits]


def test_a_name_every_line_carries_counts_half(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    data_dir = tmp_path / "data"
    off = load_settings(
        data_dir=data_dir, semantic=semantic_settings(model_server, fusion={"common_word_share": 0}), **backend_storage
    )
    with Obsmem(off, background_indexing=False) as memory:
        add_memories(memory, "p", conversation())
        memory.index("p")
    asked = len(model_server.texts_embedded())
    assert vector_order(off)[0] == SPEAKERS_LINE  # the case the setting is for
    assert WITHOUT not in model_server.texts_embedded()[asked:]
    on = load_settings(data_dir=data_dir, semantic=semantic_settings(model_server), **backend_storage)
    assert vector_order(on)[0] == TARGET
    assert {QUESTION, WITHOUT} <= set(model_server.texts_embedded()[asked:])
    # A question with no common word is embedded once, as before.
    asked = len(model_server.texts_embedded())
    assert vector_order(on, "pottery kiln?")[0] == TARGET
    assert model_server.texts_embedded()[asked:] == ["pottery kiln?"]


def asked_for(settings: Any, model_server: ModelServer, query: str = QUESTION) -> list[str]:
    """What the model embedded for one vector-list search of ``query``."""
    asked = len(model_server.texts_embedded())
    vector_order(settings, query)
    return model_server.texts_embedded()[asked:]


def test_a_small_index_has_no_common_words(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    settings = load_settings(data_dir=tmp_path / "data", semantic=semantic_settings(model_server), **backend_storage)
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", conversation(MIN_CHUNKS - 4))  # with the two lines: MIN_CHUNKS - 2 chunks
        memory.index("p")
        assert searched_for(memory, model_server) == [QUESTION]
        # Grown past the minimum in the same service: its very next search counts again.
        add_memories(memory, "p", conversation()[MIN_CHUNKS - 4 :])
        memory.index("p")
        assert set(searched_for(memory, model_server)) == {QUESTION, WITHOUT}


def searched_for(memory: Obsmem, model_server: ModelServer, query: str = QUESTION) -> list[str]:
    """What the model embedded for one hybrid search of ``query`` by a running service."""
    asked = len(model_server.texts_embedded())
    assert memory.search("p", query, mode="hybrid").hits
    return model_server.texts_embedded()[asked:]


def test_a_name_every_line_carries_is_common_past_the_counts_bound(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    # SQLite's counts stop at max_postings + 1 = 6. Every keyword document holds "Anna" (the lines beside
    # Tim's carry her name into it): her 6 most recently indexed chunks are the 6 newest, and her 6 first
    # the 6 oldest, so both ends scale to all 23. PostgreSQL counts 23 exactly.
    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server, bm25={"max_postings": 5}),
        **backend_storage,
    )
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", conversation())
        memory.index("p")
    assert set(asked_for(settings, model_server)) == {QUESTION, WITHOUT}
    assert vector_order(settings)[0] == TARGET


def asked_past_the_bound(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any], *turns: tuple[str, list[str]]
) -> set[str]:
    """What the model embedded for one search of ``QUESTION`` over dated lines, in order, each speaker's name
    before each of their lines, with the counts' bound at 6 and a common word's share at half."""
    lines = [f"{name}: {line}" for name, said in turns for line in said]
    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server, bm25={"max_postings": 5}, fusion={"common_word_share": 0.5}),
        **backend_storage,
    )
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", [(f"2024-05-{1 + i // 10:02d} 12:{i % 10:02d}", x) for i, x in enumerate(lines)])
        memory.index("p")
    return set(asked_for(settings, model_server))


def test_a_name_only_the_newest_chunks_hold_is_not_common(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    # Anna speaks only the 7 newest of 22 lines (8 keyword documents hold her name, under half). On SQLite
    # her 6 most recently indexed chunks are the 6 newest (a share of 1), but counted from the first indexed
    # chunk on, her first 6 reach back over 20 chunks (6 of 22 scaled): the smaller decides, as PostgreSQL's
    # exact count does.
    turns = ("Tim", OTHER_LINES[:15]), ("Anna", [*OTHER_LINES[15:], "kiln"])
    assert asked_past_the_bound(tmp_path, model_server, backend_storage, *turns) == {QUESTION}


def test_past_the_bound_a_word_only_the_oldest_chunks_hold_is_not_common_on_sqlite(
    tmp_path: Path, model_server: ModelServer, backend: str, backend_storage: dict[str, Any]
) -> None:
    # Anna speaks the 12 oldest of 22 lines (13 keyword documents hold her name, over half) and none of the
    # 10 newest. SQLite counts her 6 most recently indexed chunks, which reach back over 15 (6 of 22
    # scaled: 8), and stops there: it cannot tell this from a word that fades. PostgreSQL counts all 13.
    turns = ("Anna", OTHER_LINES[:12]), ("Tim", [*OTHER_LINES[12:], "pottery kiln"])
    expected = {QUESTION, WITHOUT} if backend == "postgres" else {QUESTION}
    assert asked_past_the_bound(tmp_path, model_server, backend_storage, *turns) == expected


def test_a_word_stemmed_like_a_stopword_is_not_cut(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    # Every line says "does", which the index holds as "doe": the name Doe is not a common word.
    lines = [(f"2024-05-01 12:{i:02d}", f"Tim does {line}") for i, line in enumerate(OTHER_LINES)]
    settings = load_settings(data_dir=tmp_path / "data", semantic=semantic_settings(model_server), **backend_storage)
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", lines)
        memory.index("p")
    assert asked_for(settings, model_server, "What did Jane Doe bake?") == ["What did Jane Doe bake?"]
    assert set(asked_for(settings, model_server, "What did Tim bake?")) == {"What did Tim bake?", "What did bake?"}


def test_an_index_that_counts_no_words_embeds_the_question_once(tmp_path: Path, model_server: ModelServer) -> None:
    settings = load_settings(
        data_dir=tmp_path / "data", semantic=semantic_settings(model_server, bm25={"tokenizer": "trigram"})
    )
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", conversation())
        memory.index("p")
    assert asked_for(settings, model_server) == [QUESTION]
    assert vector_order(settings)[0] == SPEAKERS_LINE


def test_the_reference_search_agrees(tmp_path: Path, model_server: ModelServer) -> None:
    for share in (0.0, 0.5):
        settings = load_settings(
            data_dir=tmp_path / str(share),
            semantic=semantic_settings(model_server, fusion={"common_word_share": share}),
        )
        with Obsmem(settings, background_indexing=False) as memory:
            add_memories(memory, "p", conversation())
            memory.index("p")
            for query in (QUESTION, "What did Anna say about the guitar?", "pottery kiln?"):
                hits = [hit.memory_id for hit in memory.search("p", query, mode="hybrid").hits]
                with memory.database("p").read() as conn:
                    assert hits == reference_search(conn, memory.settings.semantic, query), (share, query)


@pytest.mark.parametrize("value", [-0.1, 1.5, "often"])
def test_a_bad_value_names_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(Exception, match=r"common_word_share"):
        load_settings(data_dir=tmp_path, semantic={"fusion": {"common_word_share": value}})
