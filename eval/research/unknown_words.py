"""Do a question's words that no memory holds tell a near miss from an answerable question?

A study tool, not part of the product. The names check (``retrieval/names.py``) turns a question away
when it names something no indexed memory holds. Most near misses of the coding set that it lets through
name nothing: their new words are plain ones ("humidity alarm", "gift card expiry", "dark-mode themes").
So are a paraphrase's, by design ("hyperlinks" for a memory about links). This probe asks whether the
embedding model can tell the two apart word by word: for each content word of a question that no memory
holds, the best cosine between that word embedded alone and the question's ten nearest memories (by the
question's own embedding). A paraphrase's new word should have a close counterpart there ("pictures" and
a memory about images); a near miss's should not.

Which words no memory holds is decided with the keyword index's tokenizer: the product's query words
(``query_terms``, stop words out) matched against an FTS5 table of the memories' own text with the
product's default tokenizer (Porter stemming). The index itself also holds each memory's date as words,
which this table leaves out, so a month name counts as held there and not here. The embeddings are the
product's default encoder's. Questions the names check already turns away (a name no memory holds) are
left out. It prints, as JSON, for one split (the calibration split unless told otherwise) how many
negatives and positives have such a word, how many fall below a few thresholds, and each question with
its words and their best cosines, lowest first::

    python eval/research/unknown_words.py --set coding --split calibration

On the coding set's calibration split (docs/eval.md, "Abstention") the positives' words fall as low as
the negatives': no threshold separates them, so the idea was dropped.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import apsw
import numpy as np

from obsmem.eval.datasets.question_sets import question_set
from obsmem.indexer.embedders import make_embedder
from obsmem.retrieval.bm25 import query_terms
from obsmem.retrieval.names import question_names, unknown_names
from obsmem.settings import Bm25Settings, EmbeddingSettings

NEAREST = 10  # memories each unknown word is compared with
THRESHOLDS = (0.15, 0.2, 0.25)


class MemoryWords:
    """How many memories' texts hold a word, tokenized as the keyword index tokenizes."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._db = apsw.Connection(":memory:")
        tokenizer = Bm25Settings().tokenizer.replace("'", "''")
        self._db.execute(f"CREATE VIRTUAL TABLE words USING fts5(body, tokenize = '{tokenizer}')")
        with self._db:
            self._db.executemany("INSERT INTO words(body) VALUES (?)", [(text,) for text in texts])

    def count(self, word: str) -> int:
        """How many memories hold ``word`` (a query word: letters and digits, quoted as one phrase)."""
        phrase = '"' + word.replace('"', "") + '"'
        row = self._db.execute("SELECT count(*) FROM words WHERE words MATCH ?", (phrase,)).fetchone()
        return int(row[0]) if row else 0


def probe(set_name: str, split: str) -> dict[str, Any]:
    chosen = question_set(set_name)
    texts = [row["content"] for row in chosen.observations()]
    questions = [row for row in chosen.questions() if row.get("split") == split]
    words = MemoryWords(texts)
    embedder = make_embedder(EmbeddingSettings())
    memories = np.asarray(embedder.embed_documents(texts))
    known_words = embedder.known_words()
    # What the names check already turns away is not this probe's question (it sets no positive's relevance
    # to 0 on the shipped sets, docs/eval.md), so such questions are left out.
    questions = [q for q in questions if not unknown_names(question_names(q["question"]), words.count, known_words)]
    unknown = {q["question"]: [w for w in query_terms(q["question"]) if words.count(w) == 0] for q in questions}
    every_word = sorted({word for found in unknown.values() for word in found})
    word_vectors = dict(zip(every_word, np.asarray(embedder.embed_documents(every_word)), strict=True))
    rows = []
    for q in questions:
        nearest = memories[np.argsort(-(memories @ embedder.embed_query(q["question"])))[:NEAREST]]
        best = {word: round(float(np.max(nearest @ word_vectors[word])), 3) for word in unknown[q["question"]]}
        if best:  # a question whose every word some memory holds has nothing to judge
            rows.append(
                {
                    "lowest": min(best.values()),
                    "label": q["label"],
                    "kind": q.get("kind"),
                    "case": q.get("case"),
                    "question": q["question"],
                    "words": best,
                }
            )
    rows.sort(key=lambda row: row["lowest"])
    below = {
        str(threshold): {
            label: sum(row["lowest"] < threshold for row in rows if row["label"] == label)
            for label in ("negative", "positive")
        }
        for threshold in THRESHOLDS
    }
    counts = {label: sum(row["label"] == label for row in rows) for label in ("negative", "positive")}
    return {"set": set_name, "split": split, "questions_with_unknown_words": counts, "below": below, "rows": rows}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set", default="coding", help="a shipped question set (default: coding)")
    parser.add_argument("--split", choices=("calibration", "held_out"), default="calibration")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.set, args.split), indent=1))


if __name__ == "__main__":
    main()
