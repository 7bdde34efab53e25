"""The retrieval study's building blocks: query construction, contextual documents, fusion, the searcher."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obsmem.eval.research.corpora import chunks
from obsmem.eval.research.documents import Item, contextual_documents, date_words, head, tail
from obsmem.eval.research.fusion import (
    convex_fusion,
    minmax_fusion,
    neighbour_smoothing,
    ranking,
    reciprocal_rank_fusion,
    zscore_fusion,
)
from obsmem.eval.research.hybrid import CorpusIndex, Recipe
from obsmem.eval.research.lexical import Fts5Index, content_terms, match_expression, words

MAY = datetime(2023, 5, 8, 13, 56)
JUNE = datetime(2023, 6, 12, 10, 4)


def test_content_terms_drop_question_words_and_possessives() -> None:
    assert words("What is Caroline's dog's name?") == ["what", "is", "caroline", "dog", "name"]
    assert content_terms("When did Caroline go to the LGBTQ support group?") == [
        "caroline",
        "go",
        "lgbtq",
        "support",
        "group",
    ]
    assert content_terms("What is it?") == ["what", "is", "it"]  # nothing left: keep every word


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_user_text_is_a_valid_match_expression(text: str) -> None:
    index = Fts5Index([("gpt-4 and c++ foo:bar",), ('say "hi" (now)',)])
    terms = content_terms(text)
    expression = match_expression(terms)
    index.search(expression, 10)  # must not raise an FTS5 syntax error


def test_match_expression_rejects_unknown_operator() -> None:
    with pytest.raises(ValueError):
        match_expression(["a"], "NEAR")


def test_contextual_documents_take_neighbours_from_the_same_session_only() -> None:
    items = [
        Item("D1:1", 1, "Ana: What position do you play?", MAY),
        Item("D1:2", 1, "Ben: Shooting guard.", MAY),
        Item("D2:1", 2, "Ben: Hi again.", JUNE),
    ]
    first, second, third = contextual_documents(items)
    assert (first.previous, first.next) == ("", "Ben: Shooting guard.")
    assert (second.previous, second.next) == ("Ana: What position do you play?", "")
    assert third.previous == "" and third.date == "12 June 2023"
    assert second.view("window") == "Ana: What position do you play?\nBen: Shooting guard."
    assert date_words(None) == ""


def test_long_neighbours_are_bounded_at_word_boundaries() -> None:
    essay = "first words " + "filler " * 100 + "so what do you think about tennis?"
    assert tail(essay, 40) == "so what do you think about tennis?"
    assert head(essay, 15) == "first words"
    assert tail("short", 40) == "short" and head("short", None) == "short"
    items = [Item("a", 1, essay, MAY), Item("b", 1, "I love tennis.", MAY), Item("c", 1, essay, MAY)]
    middle = contextual_documents(items, context_chars=40)[1]
    assert middle.previous == "so what do you think about tennis?"
    assert middle.next.startswith("first words") and len(middle.next) <= 40


def test_bm25_finds_an_answer_through_the_question_before_it() -> None:
    items = [
        Item("D1:1", 1, "Ana: What position are you playing for the team?", MAY),
        Item("D1:2", 1, "Ben: Shooting guard, and the season opener is next week!", MAY),
        Item("D2:1", 2, "Ana: I painted a lake sunrise.", JUNE),
        Item("D2:2", 2, "Ben: Lovely colours.", JUNE),
    ]
    index = CorpusIndex(contextual_documents(items))
    plain = Recipe("plain", "bm25", columns=("body",), weights=(1.0,))
    contextual = Recipe("context", "bm25")
    question = "What position does he play on the team?"
    assert "D1:2" not in index.search(question, plain)
    assert set(index.search(question, contextual)[:2]) == {"D1:1", "D1:2"}
    # the date column answers "in June 2023" questions
    assert index.search("What did Ana paint in June 2023?", contextual)[0] == "D2:1"


def test_convex_fusion_scales_bm25_by_its_best_and_keeps_cosines() -> None:
    fused = convex_fusion({"a": 10.0, "b": 5.0}, {"a": 0.1, "b": 0.2, "c": 0.9}, alpha=0.5)
    assert fused == pytest.approx({"a": 0.55, "b": 0.35, "c": 0.45})
    assert ranking(fused) == ["a", "c", "b"]
    with pytest.raises(ValueError):
        convex_fusion({}, {}, alpha=2.0)


def test_rank_fusions() -> None:
    fused = reciprocal_rank_fusion([{"a": 3.0, "b": 1.0}, {"b": 0.9, "c": 0.1}], k=60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert ranking(fused)[0] == "b"
    assert minmax_fusion({"a": 2.0, "b": 1.0}, {"b": 0.5})["a"] == pytest.approx(0.5)
    assert set(zscore_fusion({"a": 2.0, "b": 1.0}, {"a": 0.1, "b": 0.5})) == {"a", "b"}


def test_neighbour_smoothing_lifts_the_turn_after_a_hit() -> None:
    beside = {0: (1,), 1: (0, 2), 2: (1,), 4: (5,), 5: (4,)}
    smoothed = neighbour_smoothing({0: 1.0, 5: 0.6, 4: 0.5}, beside, 0.2)
    assert smoothed[1] == pytest.approx(0.2)  # reached only through its neighbour
    assert smoothed[0] == pytest.approx(1.0)  # 1 was not a candidate, so it lends nothing
    assert smoothed[4] == pytest.approx(0.5 + 0.2 * 0.6)
    assert smoothed[5] == pytest.approx(0.6 + 0.2 * 0.5)
    assert 2 not in smoothed  # two steps away from any hit


def test_chunks_respect_the_size() -> None:
    text = "word " * 1000 + "x" * 2500
    parts = chunks(text, 1200)
    assert all(len(p) <= 1200 for p in parts)
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")
    assert chunks("") == [""]


def test_recipe_validation() -> None:
    with pytest.raises(ValueError):
        Recipe("x", legs="both")
    with pytest.raises(ValueError):
        Recipe("x", fusion="magic")
    with pytest.raises(ValueError):
        Recipe("x", columns=("body",), weights=(1.0, 2.0))


@pytest.fixture(scope="module")
def encoder():  # type: ignore[no-untyped-def]
    from obsmem.eval.research.dense import Encoder

    return Encoder()


def test_hybrid_search_with_the_bundled_model(encoder) -> None:  # type: ignore[no-untyped-def]
    items = [
        Item("D1:1", 1, "Ana: I adopted a puppy from the shelter.", MAY),
        Item("D1:2", 1, "Ben: That is wonderful news!", MAY),
        Item("D2:1", 2, "Ana: My car broke down on the highway.", JUNE),
    ]
    index = CorpusIndex(contextual_documents(items), encoder)
    question = "Did Ana get a new dog?"  # no shared content word with the answer but "ana"
    vector_only = index.search(question, Recipe("v", "vector"))
    assert vector_only[0] == "D1:1"
    hybrid = index.search(question, Recipe("h"))
    assert hybrid[0] == "D1:1" and set(hybrid) == {"D1:1", "D1:2", "D2:1"}
    cosines = index.cosines(question, ("body",))
    assert cosines.shape == (3,) and -1.0 <= float(cosines.min()) <= float(cosines.max()) <= 1.0


def test_encoder_cache_returns_the_same_vectors(encoder, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from obsmem.eval.research.dense import Encoder

    cached = Encoder(cache_dir=tmp_path, model=encoder.model)
    first = cached.encode(["one text", "another text"])
    again = cached.encode(["another text", "one text"])
    assert cached.encoded == 2
    assert (first[::-1] == again).all()
    assert abs(float((first[0] * encoder.encode(["one text"])[0]).sum()) - 1.0) < 1e-5
