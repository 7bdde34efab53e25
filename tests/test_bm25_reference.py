"""The FTS5 keyword list against rank-bm25 on a real corpus (LoCoMo turns, loaded by path)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from obsmem.retrieval.bm25 import Bm25List
from support.hybrid_reference import keyword_documents
from support.model_server import ModelServer
from support.semantic_service import make_service

LOCOMO = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "locomo" / "locomo-dev5.json"


def locomo() -> tuple[list[str], list[str]]:
    samples = json.loads(LOCOMO.read_text())
    turns, questions = [], []
    for sample in samples:
        conversation = sample["conversation"]
        for key, value in conversation.items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(" ".join(turn["text"].split()) for turn in value if turn["text"].strip())
        questions.extend(qa["question"] for qa in sample["qa"])
    return turns, questions


@pytest.mark.skipif(not LOCOMO.is_file(), reason="shared LoCoMo data not present")
def test_fts5_bm25_matches_rank_bm25_on_locomo(tmp_path: Path, model_server: ModelServer) -> None:
    """With every column weighted 1, FTS5's multi-column bm25() is BM25 over the row's four columns joined,
    so rank-bm25 over (body + previous + next + date) tokens, built from scratch, must give the same scores."""
    from rank_bm25 import BM25Okapi

    turns, questions = locomo()
    weights = {"column_weights": {"previous": 1.0, "next": 1.0, "date": 1.0}, "max_postings": 10_000_000}
    with make_service(tmp_path, model_server, bm25=weights) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "x"} for _ in range(len(turns))])
        for start in range(0, len(turns), 500):
            receipt = service.add_observations(
                "p",
                [
                    {
                        "session_id": "s1",
                        "content": text,
                        "timestamp": "2024-01-01 10:00",
                        "source_refs": [start + i + 1],
                    }
                    for i, text in enumerate(turns[start : start + 500])
                ],
            )
            assert not receipt.rejected
        service.index("p")
        db = service.database("p")
        conn = db.connection()
        reader = service.indexer.project("p").reader
        settings = service.settings.semantic
        keyword = Bm25List(settings.bm25)
        tokenize = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])

        def tokens(text: str) -> list[str]:
            return [t[2] for t in tokenize(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None)]

        docs, _ = keyword_documents(conn, settings)
        docs.sort(key=lambda doc: doc.label)
        labels = [doc.label for doc in docs]
        assert sum(1 for doc in docs if doc.previous) > len(docs) - 5  # the documents carry their context
        # FTS5's bm25(): k1 = 1.2, b = 0.75; idf = ln((N - n + 0.5) / (n + 0.5)) (tiny floor when negative).
        corpus = [tokens(doc.body) + tokens(doc.previous) + tokens(doc.next) + tokens(doc.date) for doc in docs]
        reference = BM25Okapi(corpus, k1=1.2, b=0.75, epsilon=0.0)
        compared = agree_top1 = 0
        overlaps = []
        for question in questions[::4]:
            with reader() as store:
                terms = [token for _, found in keyword.terms(store, question) for token in found]
                ours = keyword.search(store, question, 10)
            if not ours.items:
                continue
            scores = reference.get_scores(terms)
            matching = [i for i in range(len(labels)) if scores[i] > 0]
            order = sorted(matching, key=lambda i: (-scores[i], labels[i]))[:10]
            theirs = [labels[i] for i in order]
            compared += 1
            # Same scores for our top 10 as rank-bm25's own top 10 (ties may order differently).
            ours_scores = sorted((scores[labels.index(label)] for label in ours.labels), reverse=True)
            assert ours_scores == pytest.approx([scores[i] for i in order], rel=1e-4, abs=1e-4), question
            assert [score for _, score in ours.items] == pytest.approx(ours_scores, rel=1e-4), question
            agree_top1 += ours.labels[0] == theirs[0] or scores[labels.index(ours.labels[0])] == pytest.approx(
                scores[order[0]]
            )
            overlaps.append(len(set(ours.labels) & set(theirs)) / 10)
        assert compared >= 200
        assert agree_top1 == compared
        assert sum(overlaps) / len(overlaps) >= 0.95
