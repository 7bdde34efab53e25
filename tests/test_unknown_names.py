"""Names a question asks about that no memory holds (retrieval/names.py), and the ``+names`` relevance
measure that turns such a question's evidence to 0 so ``min_relevance`` can say nothing is close."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from obsmem import Obsmem
from obsmem.indexer.embed_local import bundled_model_path, model_vocabulary
from obsmem.retrieval import SearchPlan
from obsmem.retrieval.bm25 import query_words
from obsmem.retrieval.names import identifier_shaped, question_names, unknown_names
from obsmem.settings import SemanticSettings, load_settings
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

MEMORIES = [
    "Moved the nightly export to Airflow; wait_for_orders_export now times out after 2 h.",
    "The mirror pushes charts to registry.example.io every night.",
    "Billing export slow: one query per invoice row in the serializer.",
]
VOCABULARY = frozenset({"germany", "google", "pdf", "ios", "airflow", "export"})


@pytest.mark.parametrize(
    ("token", "shaped"),
    [
        ("nRF52840", True),
        ("wait_for_orders_export", True),
        ("Quay.io", True),
        ("#2599", True),
        ("3e1aa90", True),
        ("loaders/http.py", True),
        ("src/cart/serializers", True),
        ("2023", False),  # numbers, dates, ordinals and versions alone are not names
        ("1,2023", False),
        ("8th", False),
        ("4.2", False),
        ("U.S", False),  # an abbreviation, not a host
        ("artists/bands", False),  # two words, not a path
        ("Dagster", False),  # a name by its capital, not by its shape
        ("3pm", False),  # quantities and times
        ("10ms", False),
        ("5GB", False),
        ("1990s", False),
        ("2024-01-05T10:00", False),
        ("2024-01-05", False),
        ("v2", True),
        ("--insecure-skip-tls", True),  # a command-line option
        ("-v", True),
        ("-rf", True),
        ("-j8", True),
        ("-", False),
        ("-ish", False),  # a suffix, not an option
        ("-5C", False),  # signed, approximate and ranged quantities
        ("~10ms", False),
        ("3-4pm", False),
        ("x86_64", True),
    ],
)
def test_identifier_shape(token: str, shaped: bool) -> None:
    assert identifier_shaped(token) is shaped


def test_the_names_of_a_question() -> None:
    names = question_names("Why did we move from Airflow to Dagster? Ask SAML, useInspectionTimer and `Quay.io`.")
    assert [(name.text, name.shaped) for name in names] == [
        ("Airflow", False),
        ("Dagster", False),
        ("SAML", False),  # "Ask" starts a sentence: its capital says nothing
        ("useInspectionTimer", False),
        ("Quay.io", True),
    ]
    assert names[-1].words == ("quay", "io")
    coded = question_names("Why was the `qm deploy` command removed?")
    assert [(name.text, name.words, name.shaped) for name in coded] == [("qm deploy", ("qm", "deploy"), True)]
    # Numbers inside a span are not part of the name; a long span (a pasted line) is judged word by word.
    assert [name.words for name in question_names("Why does `load_profile(42)` fail?")] == [("load", "profile")]
    pasted = question_names("Why did `the job failed with exit code 3 in the loader` appear?")
    assert pasted == []  # lowercase words, none of them a name on its own
    # Months and weekdays are dates, a plain number is a quantity or a day: none is a name.
    assert question_names("What did we ship on Monday, March 21?") == []
    assert question_names("ORBIT_STRICT_SCOPES: what does it do?")[0].words == ("orbit", "strict", "scopes")


def unknown(question: str, count: Callable[[str], int], known_words: frozenset[str] | None) -> list[str]:
    return unknown_names(question_names(question), count, known_words)


def test_unknown_names_need_a_word_no_chunk_holds() -> None:
    held = Counter(word for text in MEMORIES for word in set(query_words(text)))
    count = held.__getitem__
    assert unknown("How did we migrate users from Auth0?", count, None) == ["Auth0"]
    assert unknown("What does wait_for_orders_export wait for?", count, None) == []
    assert unknown("Which charts reach registry.example.io?", count, None) == []
    assert unknown("Which charts reach registry.example.com?", count, None) == ["registry.example.com"]
    # A capitalised word counts only with a vocabulary, and only when the model does not know it whole:
    # a word it knows may be answered in other words, which the vector list judges.
    assert unknown("Why did we move to Dagster?", count, None) == []
    assert unknown("Why did we move to Dagster?", count, VOCABULARY) == ["Dagster"]
    assert unknown("How long did mirroring to Germany take?", count, VOCABULARY) == []
    assert unknown("Did Airflow run the export?", count, VOCABULARY) == []  # held, and known
    assert unknown("What is Dagster's role?", count, VOCABULARY) == ["Dagster"]  # a possessive is the name
    assert unknown("How long did mirroring to Zürich take?", count, VOCABULARY | {"zurich"}) == []  # accents
    assert unknown("Did the 3pm export take 10ms on 2024-01-05?", count, None) == []  # times and quantities


def test_the_bundled_models_whole_words() -> None:
    words = model_vocabulary(bundled_model_path())
    assert len(words) > 20_000
    assert {"google", "germany", "pdf"} <= words
    assert not {"redis", "dagster", "[cls]", "##ing"} & words  # spelt in pieces, special, or a piece


def test_a_vocabulary_from_tokenizer_json_or_none(tmp_path: Path) -> None:
    vocab = {"[CLS]": 0, "Hello": 1, "##lo": 2, "world": 3, "<s>": 4}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": vocab}}))
    assert model_vocabulary(tmp_path) == {"hello", "world"}
    assert model_vocabulary(tmp_path / "nothing") == frozenset()
    # Byte-level BPE marks word starts ("Ġgoogle"), not pieces: its entries are not whole words.
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"\u0120google": 0}}}))
    assert model_vocabulary(tmp_path) == frozenset()
    for broken in ('{"model": null}', "not json", '{"model": {"type": "WordPiece", "vocab": []}}'):
        (tmp_path / "tokenizer.json").write_text(broken)
        assert model_vocabulary(tmp_path) == frozenset()


def test_the_measure_is_a_setting() -> None:
    for measure in ("evidence+names", "evidence+standout+names"):
        assert SemanticSettings(relevance_measure=measure).relevance_measure == measure


def evidence_of(memory: Obsmem, query: str) -> float:
    _, stages = memory.search_stages("p", query, SearchPlan(rerank=False, floor=False))
    assert stages.evidence is not None
    return stages.evidence


def test_a_question_naming_what_no_memory_holds_has_no_evidence(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    absent, present = "What did the Auth0 export change?", "What did wait_for_orders_export change?"
    plain = load_settings(data_dir=tmp_path / "plain", semantic=semantic_settings(model_server), **backend_storage)
    with Obsmem(plain, background_indexing=False) as memory:
        add_memories(memory, "p", [(f"2024-05-0{1 + i} 12:00", text) for i, text in enumerate(MEMORIES)])
        memory.index("p")
        before = {query: evidence_of(memory, query) for query in (absent, present)}
    assert before[absent] > 0
    section = semantic_settings(model_server, relevance_measure="evidence+names")
    named = load_settings(data_dir=tmp_path / "plain", semantic=section, **backend_storage)
    with Obsmem(named, background_indexing=False) as memory:
        assert evidence_of(memory, absent) == 0.0
        assert evidence_of(memory, present) == pytest.approx(before[present])  # a name the index holds
    floor = before[absent] / 2  # low enough that the evidence alone would keep both searches
    floored = load_settings(
        data_dir=tmp_path / "plain",
        semantic=semantic_settings(model_server, relevance_measure="evidence+names", min_relevance=floor),
        **backend_storage,
    )
    with Obsmem(floored, background_indexing=False) as memory:
        refused = memory.search("p", absent, mode="hybrid")
        kept = memory.search("p", present, mode="hybrid")
        with TestClient(create_app(memory), base_url=LOCAL) as client:
            answer = client.post("/v1/projects/p/search", json={"query": absent, "mode": "hybrid"})
        assert answer.status_code == 200
        assert answer.json()["unknown_names"] == ["Auth0"] and answer.json()["nothing_close"] is True
    assert refused.nothing_close and not refused.hits and refused.unknown_names == ["Auth0"]
    body = refused.to_dict()
    assert body["unknown_names"] == ["Auth0"] and body["note"].startswith("No indexed memory mentions Auth0.")
    assert kept.hits and not kept.nothing_close and "unknown_names" not in kept.to_dict()
