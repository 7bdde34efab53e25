"""Does leaving one word out bring a near miss closer to its nearest memories than an answerable question?

A study tool, not part of the product. A near miss asks about something next door to what the store holds
("push notifications for new assignments" where the memories cover notifications, not assignments). If the
embedding model placed the question's off-topic word as the reason it sits away from its nearest memories,
the question without that word would come much closer to them, and an answerable question, whose words its
memory explains, would not. For each content word of a question (the product's query words, stop words
out) the question is embedded with that word removed; the measure is the largest gain in best cosine over
the question's ten nearest memories (by its own embedding). It prints, as JSON, for one split (the
calibration split unless told otherwise) the median gain of negatives and positives and how many of each
pass a few thresholds, and each question with its gain, largest first::

    python eval/research/leave_one_out.py --set coding --split calibration

On the coding set's calibration split (docs/eval.md, "Abstention") the two medians are 0.028 and 0.025:
no threshold separates them, so the idea was dropped.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from obsmem.eval.datasets.question_sets import question_set
from obsmem.indexer.embedders import make_embedder
from obsmem.retrieval.bm25 import query_terms
from obsmem.settings import EmbeddingSettings

NEAREST = 10  # memories the shortened questions are compared with
THRESHOLDS = (0.02, 0.04, 0.06)


def without_word(question: str, word: str) -> str:
    """``question`` with every word starting with ``word`` (a query term, perhaps stemmed) removed."""
    shortened = re.sub(r"\b" + re.escape(word) + r"\w*", " ", question, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", shortened).strip()


def probe(set_name: str, split: str) -> dict[str, Any]:
    chosen = question_set(set_name)
    embedder = make_embedder(EmbeddingSettings())
    memories = np.asarray(embedder.embed_documents([row["content"] for row in chosen.observations()]))
    rows = []
    for q in (row for row in chosen.questions() if row.get("split") == split):
        question = q["question"]
        shortened = {w: without_word(question, w) for w in sorted(set(query_terms(question)))}
        shortened = {w: text for w, text in shortened.items() if text and text != question}
        if not shortened:  # a question of one content word has nothing to leave out
            continue
        cosines = memories @ embedder.embed_query(question)
        nearest = memories[np.argsort(-cosines)[:NEAREST]]
        best = float(np.max(cosines))
        gains = {w: float(np.max(nearest @ embedder.embed_query(text))) - best for w, text in shortened.items()}
        word = max(gains, key=lambda w: gains[w])
        rows.append({"gain": round(gains[word], 3), "word": word, "label": q["label"], "question": question})
    rows.sort(key=lambda row: -row["gain"])
    by_label = {label: [row["gain"] for row in rows if row["label"] == label] for label in ("negative", "positive")}
    return {
        "set": set_name,
        "split": split,
        "questions": {label: len(gains) for label, gains in by_label.items()},
        "median_gain": {label: round(float(np.median(gains)), 3) for label, gains in by_label.items() if gains},
        "above": {
            str(threshold): {label: sum(gain > threshold for gain in gains) for label, gains in by_label.items()}
            for threshold in THRESHOLDS
        },
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set", default="coding", help="a shipped question set (default: coding)")
    parser.add_argument("--split", choices=("calibration", "held_out"), default="calibration")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.set, args.split), indent=1))


if __name__ == "__main__":
    main()
