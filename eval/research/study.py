"""The retrieval study: which recipe reaches the LoCoMo targets, and does it generalise?

Run as ``python -m obsmem.eval.research.study {locomo,loco,longmemeval,timing} --data PATH``. Each
command prints a markdown table and writes JSON when ``--output`` is given.

- ``locomo``: every recipe of :data:`CATALOGUE` on the LoCoMo turns (way a) and the recommended ones on
  the dataset's facts (way b); recall@5/10/25/50 overall and per category.
- ``loco``: leave-one-conversation-out. For each conversation, the grid :func:`loco_grid` is scored on
  the other conversations, the best setting is applied to the held-out one, and the held-out results
  are pooled; compared with the fixed recommended recipe.
- ``longmemeval``: session-level recall_any/recall_all/nDCG@5,10 for the same recipes.
- ``timing``: the whole LoCoMo eval in hybrid mode from a cold start (model load, indexing, queries),
  without the embedding cache.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import fmean, median
from typing import Any

import numpy as np

from obsmem.eval.datasets.locomo import CATEGORIES, Conversation, load_locomo, turns_of
from obsmem.eval.datasets.longmemeval import load_longmemeval
from obsmem.eval.metrics import ScoreTable, evidence_recalls, ndcg, recall_all, recall_any
from obsmem.eval.research.corpora import Corpus, locomo_facts, locomo_turns, longmemeval_pool
from obsmem.eval.research.dense import Encoder
from obsmem.eval.research.documents import contextual_documents
from obsmem.eval.research.hybrid import CorpusIndex, Recipe

KS = (5, 10, 25, 50)
Json = dict[str, Any]
PLAIN = dict(columns=("body",), weights=(1.0,))
CONTEXT = dict(columns=("body", "previous", "next"), weights=(1.0, 0.5, 0.2))

# The recipe this study recommends; every constant was also chosen by leave-one-conversation-out tuning.
RECOMMENDED = Recipe(
    "recommended: convex 0.4, BM25 (1, 1, .2, 2), smoothing .2", alpha=0.4, weights=(1.0, 1.0, 0.2, 2.0), smoothing=0.2
)
FIRST_CUT = dict(alpha=0.5, weights=(1.0, 0.5, 0.2, 1.0))

CATALOGUE: tuple[Recipe, ...] = (
    # lexical leg: tokenisation and query construction over the bare turn
    Recipe("bm25 unicode61, all words", "bm25", tokenize="unicode61", stopwords=False, **PLAIN),
    Recipe("bm25 unicode61, content words", "bm25", tokenize="unicode61", **PLAIN),
    Recipe("bm25 trigram, all words", "bm25", tokenize="trigram", stopwords=False, **PLAIN),
    Recipe("bm25 porter, all words", "bm25", stopwords=False, **PLAIN),
    Recipe("bm25 porter, content words (plain)", "bm25", **PLAIN),
    # lexical leg: contextual documents
    Recipe("bm25 + neighbours (1, .5, .2)", "bm25", **CONTEXT),
    Recipe("bm25 + neighbours + date (1, .5, .2, 1)", "bm25"),
    Recipe("bm25 + neighbours + date (1, 1, .2, 2)", "bm25", weights=RECOMMENDED.weights),
    # vector leg
    Recipe("minilm turn", "vector"),
    Recipe("minilm window (prev+turn+next)", "vector", views=("window",)),
    Recipe("minilm mean(turn, window)", "vector", views=("body", "window")),
    # fusion of the plain legs
    Recipe("rrf k=60 equal, plain legs", fusion="rrf", **PLAIN),
    Recipe("convex 0.5, plain legs", **PLAIN),
    # fusion of the contextual legs, first-cut BM25 weights (1, .5, .2, 1)
    Recipe("rrf k=60 equal", fusion="rrf"),
    Recipe("rrf k=60 weights 1 : 0.3", fusion="rrf", rrf_weights=(1.0, 0.3)),
    Recipe("minmax over candidates 0.5", fusion="minmax"),
    Recipe("zscore over candidates 0.5", fusion="zscore"),
    Recipe("vector re-orders BM25 top 100 (convex 0.5)", vector_depth=0, **FIRST_CUT),
    Recipe("convex 0.5", **FIRST_CUT),
    # the recommended constants, and what is left on the table
    Recipe("convex 0.4, BM25 (1, 1, .2, 2)", alpha=0.4, weights=RECOMMENDED.weights),
    RECOMMENDED,
    replace(RECOMMENDED, name="recommended legs, rrf k=60 equal", fusion="rrf"),
    replace(RECOMMENDED, name="recommended legs, rrf k=60 weights 1 : 0.3", fusion="rrf", rrf_weights=(1.0, 0.3)),
    replace(RECOMMENDED, name="recommended, candidate depth 50", depth=50),
    replace(RECOMMENDED, name="recommended, candidate depth 200", depth=200),
    replace(RECOMMENDED, name="recommended + window view", views=("body", "window")),
)
FACT_RECIPES = (
    "bm25 porter, content words (plain)",
    "bm25 + neighbours + date (1, 1, .2, 2)",
    "minilm turn",
    "rrf k=60 equal, plain legs",
    "convex 0.5, plain legs",
    RECOMMENDED.name,
)


# --- LoCoMo -------------------------------------------------------------------------------------------
@dataclass
class Prepared:
    conversation: Conversation
    corpus: Corpus
    index: CorpusIndex
    search_limit: int  # documents to fetch so that enough turns remain after mapping citations


def prepare_locomo(conversations: Sequence[Conversation], way: str, encoder: Encoder | None) -> list[Prepared]:
    build = locomo_turns if way == "turns" else locomo_facts
    prepared = []
    for conversation in conversations:
        corpus = build(conversation)
        index = CorpusIndex(contextual_documents(corpus.items), encoder)
        # A fact cites one turn or more and several facts may cite the same turn: fetch more of them.
        prepared.append(Prepared(conversation, corpus, index, max(KS) if way == "turns" else 4 * max(KS)))
    return prepared


def score_conversation(item: Prepared, recipe: Recipe, ks: Sequence[int] = KS) -> ScoreTable:
    table = ScoreTable()
    if recipe.legs != "bm25":
        item.index.embed_queries([q.text for q in item.conversation.questions])
    for question in item.conversation.questions:
        keys = item.index.search(question.text, recipe, limit=item.search_limit)
        turns = turns_of([item.corpus.cites[k] for k in keys])
        table.add(question.category_name, evidence_recalls(turns, question.evidence, ks))
    return table


def score_locomo(prepared: Sequence[Prepared], recipe: Recipe) -> dict[str, ScoreTable]:
    return {p.conversation.sample_id: score_conversation(p, recipe) for p in prepared}


def fact_ceiling(prepared: Sequence[Prepared]) -> ScoreTable:
    """Way (b)'s ceiling: the share of evidence that any fact cites at all (ranking aside)."""
    table = ScoreTable()
    for item in prepared:
        cited = {turn for cites in item.corpus.cites.values() for turn in cites}
        for question in item.conversation.questions:
            found = len(cited & set(question.evidence)) / len(question.evidence)
            table.add(question.category_name, {f"recall@{k}": found for k in KS})
    return table


def pooled(tables: Iterable[ScoreTable]) -> ScoreTable:
    return ScoreTable().merge(tables)


def summary(table: ScoreTable) -> Json:
    return {"questions": table.questions, "metrics": table.means(), "by_category": table.category_means()}


# --- leave one conversation out ------------------------------------------------------------------------
def loco_grid() -> list[Recipe]:
    """The constants of the recommended recipe, each over a range around its value."""
    grid = []
    for alpha in (0.3, 0.4, 0.5, 0.6, 0.7):
        for previous in (0.25, 0.5, 1.0):
            for following in (0.0, 0.2, 0.5):
                for date in (0.0, 1.0, 2.0):
                    for smoothing in (0.0, 0.2):
                        grid.append(
                            replace(
                                RECOMMENDED,
                                name=f"a={alpha} w=(1,{previous},{following},{date}) s={smoothing}",
                                alpha=alpha,
                                weights=(1.0, previous, following, date),
                                smoothing=smoothing,
                            )
                        )
    return grid


def objective(table: ScoreTable) -> float:
    """Mean of recall@5/10/25/50: what the targets ask for, without favouring one k."""
    means = table.means()
    return fmean(means[f"recall@{k}"] for k in KS)


def leave_one_out(prepared: Sequence[Prepared], grid: Sequence[Recipe]) -> Json:
    per_recipe = {r.name: score_locomo(prepared, r) for r in grid}
    fixed = score_locomo(prepared, RECOMMENDED)
    held_out_tables = []
    folds = []
    for held in prepared:
        name = held.conversation.sample_id

        def on_others(recipe: Recipe, held_out: str = name) -> float:
            return objective(pooled(t for c, t in per_recipe[recipe.name].items() if c != held_out))

        best = max(grid, key=on_others)
        held_out_tables.append(per_recipe[best.name][name])
        folds.append(
            {
                "held_out": name,
                "chosen": best.name,
                "held_out_metrics": per_recipe[best.name][name].means(),
                "recommended_on_held_out": fixed[name].means(),
            }
        )
    in_sample = max(grid, key=lambda r: objective(pooled(per_recipe[r.name].values())))
    return {
        "folds": folds,
        "loco": summary(pooled(held_out_tables)),
        "recommended": summary(pooled(fixed.values())),
        "in_sample_best": {"recipe": in_sample.name, **summary(pooled(per_recipe[in_sample.name].values()))},
    }


# --- LongMemEval -----------------------------------------------------------------------------------
def score_longmemeval(path: str, recipes: Sequence[Recipe], encoder: Encoder) -> dict[str, Json]:
    data = load_longmemeval(path)
    questions = [q for q in data.questions if not q.abstention]
    indexes: dict[tuple[str, ...], tuple[Corpus, CorpusIndex]] = {}
    results: dict[str, Json] = {}
    for recipe in recipes:
        table = ScoreTable()
        for question in questions:
            if question.haystack not in indexes:
                corpus = longmemeval_pool(data, question.haystack)
                index = CorpusIndex(contextual_documents(corpus.items), encoder)
                indexes[question.haystack] = (corpus, index)
            corpus, index = indexes[question.haystack]
            keys = index.search(question.text, replace(recipe, depth=max(recipe.depth, 200)), limit=400)
            sessions = turns_of([corpus.cites[k] for k in keys])
            wanted = question.answer_sessions
            table.add(
                question.category,
                {
                    **{f"recall_any@{k}": recall_any(sessions, wanted, k) for k in (5, 10)},
                    **{f"recall_all@{k}": recall_all(sessions, wanted, k) for k in (5, 10)},
                    **{f"ndcg@{k}": ndcg(sessions, wanted, k) for k in (5, 10)},
                },
            )
        results[recipe.name] = summary(table)
    return results


# --- why equal-weight RRF loses to BM25 ------------------------------------------------------------
def rrf_diagnosis(prepared: Sequence[Prepared]) -> Json:
    """Where the evidence BM25 had in its top 5 goes under equal RRF, and how peaked each leg's scores are."""
    bm25 = Recipe("bm25", "bm25", **PLAIN)  # type: ignore[arg-type]
    rrf = Recipe("rrf", fusion="rrf", **PLAIN)  # type: ignore[arg-type]
    lost: list[tuple[int, int, int]] = []
    drops_bm25, drops_cos = [], []
    for item in prepared:
        index = item.index
        index.embed_queries([q.text for q in item.conversation.questions])
        for question in item.conversation.questions:
            lexical = index.search(question.text, bm25, limit=100)
            fused = index.search(question.text, rrf, limit=200)
            cos = index.cosines(question.text, ("body",))
            by_cosine = np.argsort(-cos, kind="stable")
            vector_rank = {index.keys[int(i)]: rank for rank, i in enumerate(by_cosine, start=1)}
            for turn in question.evidence:
                if turn in lexical[:5] and turn not in fused[:5]:
                    lost.append(
                        (lexical.index(turn) + 1, vector_rank[turn], fused.index(turn) + 1 if turn in fused else 201)
                    )
            scores = sorted(index.bm25(question.text, bm25, 10).values(), reverse=True)
            if len(scores) == 10:
                drops_bm25.append(1 - scores[9] / scores[0])
            top_cos = sorted(cos, reverse=True)[:10]
            drops_cos.append(1 - top_cos[9] / top_cos[0])
    return {
        "evidence_in_bm25_top5_pushed_out_of_rrf_top5": len(lost),
        "their_median_bm25_rank": median(r[0] for r in lost),
        "their_median_vector_rank": median(r[1] for r in lost),
        "share_outside_vector_top100": fmean(r[1] > 100 for r in lost),
        "their_median_rrf_rank": median(r[2] for r in lost),
        "mean_relative_score_drop_rank1_to_rank10": {"bm25": fmean(drops_bm25), "cosine": fmean(drops_cos)},
    }


# --- timing ---------------------------------------------------------------------------------------------
def time_locomo(path: str, recipe: Recipe, threads: int | None) -> Json:
    """Cold start: model load, documents, FTS5, embeddings and every question, no embedding cache.

    Questions are embedded one by one, as a search request would be.
    """
    started = time.perf_counter()
    encoder = Encoder(cache_dir=None, threads=threads)
    loaded = time.perf_counter()
    conversations = load_locomo(path)
    prepared = prepare_locomo(conversations, "turns", encoder)
    latencies = []
    tables = []
    indexing = 0.0
    for item in prepared:
        begin = time.perf_counter()
        item.index.fts(recipe.columns, recipe.tokenize)
        for view in recipe.views:
            item.index.view_matrix(view)
        indexing += time.perf_counter() - begin
        table = ScoreTable()
        for question in item.conversation.questions:
            begin = time.perf_counter()
            keys = item.index.search(question.text, recipe, limit=max(KS))
            latencies.append(time.perf_counter() - begin)
            table.add(question.category_name, evidence_recalls(keys, question.evidence, KS))
        tables.append(table)
    total = time.perf_counter() - started
    latencies.sort()
    return {
        "recipe": asdict(recipe),
        "torch_threads": threads,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "elapsed_s": round(total, 1),
        "model_load_s": round(loaded - started, 1),
        "indexing_s": round(indexing, 1),
        "queries_s": round(sum(latencies), 1),
        "texts_embedded": encoder.encoded,
        "latency_ms": {
            "p50": round(1000 * median(latencies), 2),
            "p95": round(1000 * latencies[int(0.95 * (len(latencies) - 1))], 2),
        },
        **summary(pooled(tables)),
    }


# --- reporting ----------------------------------------------------------------------------------------
def markdown_row(name: str, result: Json, keys: Sequence[str]) -> str:
    metrics = result["metrics"]
    assert isinstance(metrics, dict)
    cells = [f"{metrics[k]:.3f}" for k in keys]
    by_category = result.get("by_category", {})
    assert isinstance(by_category, dict)
    cats = [
        f"{by_category[c]['recall@10']:.3f}" if "recall@10" in by_category.get(c, {}) else "-"
        for c in CATEGORIES.values()
    ]
    return f"| {name} | " + " | ".join(cells + cats) + " |"


def locomo_table(results: dict[str, Json]) -> str:
    keys = [f"recall@{k}" for k in KS]
    head = "| method | @5 | @10 | @25 | @50 | " + " | ".join(f"{c} @10" for c in CATEGORIES.values()) + " |"
    rule = "|" + "---|" * (5 + len(CATEGORIES))
    return "\n".join([head, rule, *(markdown_row(n, r, keys) for n, r in results.items())])


def _write(output: str | None, name: str, payload: object, table: str) -> None:
    print(table)
    if output:
        folder = Path(output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
        (folder / f"{name}.md").write_text(table + "\n")


BM25_LEG = "bm25 + neighbours + date (1, 1, .2, 2)"
VECTOR_LEG = "minilm turn"


def never_loses(results: dict[str, Json], hybrid: str, legs: Sequence[str]) -> list[str]:
    """Every (group, k) where the hybrid scores below its best single leg."""

    def pick(result: Json, group: str) -> dict[str, float]:
        return result["metrics"] if group == "overall" else result["by_category"].get(group, {})

    losses = []
    for group in ("overall", *CATEGORIES.values()):
        for k in KS:
            key = f"recall@{k}"
            best = max(pick(results[leg], group).get(key, 0.0) for leg in legs)
            got = pick(results[hybrid], group).get(key, 0.0)
            if got + 1e-12 < best:
                losses.append(f"{group} {key}: hybrid {got:.3f} < best leg {best:.3f}")
    return losses


def run_locomo(data: str, encoder: Encoder, output: str | None) -> None:
    conversations = load_locomo(data)
    by_method: dict[str, Json] = {}
    turns = prepare_locomo(conversations, "turns", encoder)
    for recipe in CATALOGUE:
        by_method[recipe.name] = summary(pooled(score_locomo(turns, recipe).values()))
        print(
            markdown_row(recipe.name, by_method[recipe.name], [f"recall@{k}" for k in KS]), file=sys.stderr, flush=True
        )
    facts = prepare_locomo(conversations, "facts", encoder)
    by_method["(b) facts: every cited turn (ceiling)"] = summary(fact_ceiling(facts))
    for recipe in CATALOGUE:
        if recipe.name in FACT_RECIPES:
            by_method[f"(b) facts: {recipe.name}"] = summary(pooled(score_locomo(facts, recipe).values()))
    losses = never_loses(by_method, RECOMMENDED.name, (BM25_LEG, VECTOR_LEG))
    facts_losses = never_loses(
        by_method, f"(b) facts: {RECOMMENDED.name}", (f"(b) facts: {BM25_LEG}", f"(b) facts: {VECTOR_LEG}")
    )
    check = (
        "\n\nHybrid vs its best single leg, overall and per category, every k: (a) "
        + ("never loses" if not losses else "; ".join(losses))
        + "; (b) "
        + ("never loses" if not facts_losses else "; ".join(facts_losses))
    )
    by_method["never_loses_check"] = {"turns": losses, "facts": facts_losses}
    diagnosis = rrf_diagnosis(turns)
    by_method["rrf_diagnosis"] = diagnosis
    check += "\n\nWhy equal RRF loses to BM25 at small k:\n" + json.dumps(diagnosis, indent=2)
    _write(output, "locomo", by_method, locomo_table({k: v for k, v in by_method.items() if "metrics" in v}) + check)


def run_loco(data: str, encoder: Encoder, output: str | None) -> None:
    turns = prepare_locomo(load_locomo(data), "turns", encoder)
    loco = leave_one_out(turns, loco_grid())
    lines = [
        locomo_table(
            {
                "LOCO (tuned on 4, tested on 1)": loco["loco"],
                f"fixed: {RECOMMENDED.name}": loco["recommended"],
                f"in-sample best: {loco['in_sample_best']['recipe']}": loco["in_sample_best"],
            }
        )
    ]
    lines += [
        "",
        "| held out | chosen on the other four | held-out @5 / @10 / @50 | recommended @5 / @10 / @50 |",
        "|---|---|---|---|",
    ]
    for fold in loco["folds"]:
        got, rec = fold["held_out_metrics"], fold["recommended_on_held_out"]
        lines.append(
            f"| {fold['held_out']} | {fold['chosen']} | "
            f"{got['recall@5']:.3f} / {got['recall@10']:.3f} / {got['recall@50']:.3f} | "
            f"{rec['recall@5']:.3f} / {rec['recall@10']:.3f} / {rec['recall@50']:.3f} |"
        )
    _write(output, "loco", loco, "\n".join(lines))


def run_longmemeval(data: str, encoder: Encoder, output: str | None) -> None:
    recipes = [r for r in CATALOGUE if "unicode61" not in r.name and "trigram" not in r.name]
    results = score_longmemeval(data, recipes, encoder)
    keys = ["recall_any@5", "recall_any@10", "recall_all@5", "recall_all@10", "ndcg@5", "ndcg@10"]
    lines = ["| method | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 1)]
    for name, result in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{result['metrics'][k]:.3f}" for k in keys) + " |")
    _write(output, "longmemeval", results, "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(
        prog="python -m obsmem.eval.research.study",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("locomo", "loco", "longmemeval", "timing"))
    parser.add_argument("--data", required=True, help="LoCoMo JSON file, or LongMemEval file/directory")
    parser.add_argument("--output", help="folder for JSON and markdown results")
    parser.add_argument("--cache", help="embedding cache folder (speeds up repeated studies)")
    parser.add_argument("--threads", type=int, help="torch threads; default: torch's choice")
    args = parser.parse_args(argv)
    if args.command == "timing":
        result = time_locomo(args.data, RECOMMENDED, args.threads)
        _write(args.output, "timing", result, json.dumps(result, indent=2))
        return 0
    run = {"locomo": run_locomo, "loco": run_loco, "longmemeval": run_longmemeval}[args.command]
    run(args.data, Encoder(cache_dir=args.cache, threads=args.threads), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
