"""``obsmem demo``: the bundled sample project, searched and recalled, then evaluated, in a few seconds.

It runs on the built-in defaults in a fresh data directory (a temporary one unless ``--data-dir`` names a
new or empty directory), so it shows the same thing on every machine and never touches real data. The
example searches are exact; then semantic mode (on, with the bundled local model) indexes the sample and
the sample's labelled questions are searched in exact and hybrid mode, side by side.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from obsmem.app import Obsmem
from obsmem.settings import SemanticSettings, builtin_settings
from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import json_option

# The model loader's own progress bars would interleave with ours (set before it is first imported).
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

HITS_PER_QUERY = 5
RECALLS = 2
CONTENT_CHARS = 90
EVAL_MODES = ("exact", "hybrid")


@contextmanager
def demo_directory(chosen: Path | None) -> Iterator[Path]:
    """``chosen`` if it is new or empty, else a temporary directory removed afterwards."""
    if chosen is None:
        with tempfile.TemporaryDirectory(prefix="obsmem-demo-") as temporary:
            yield Path(temporary)
        return
    if chosen.exists() and (not chosen.is_dir() or any(chosen.iterdir())):
        raise click.UsageError(f"--data-dir {chosen} is not empty; the demo needs a new or empty directory")
    chosen.mkdir(parents=True, exist_ok=True)
    yield chosen


def run_demo(service: Obsmem) -> dict[str, Any]:
    """Load the sample, run its example searches, recall hits, evaluate; returns everything the demo shows."""
    from obsmem.sample import SAMPLE_PROJECT, demo_queries, load_sample

    started = time.perf_counter()
    loaded = load_sample(service.database(SAMPLE_PROJECT, create=True))
    load_seconds = time.perf_counter() - started
    searches: list[dict[str, Any]] = []
    for example in demo_queries():
        result = service.search(
            SAMPLE_PROJECT,
            example["query"],
            after=example.get("after"),
            before=example.get("before"),
            limit=HITS_PER_QUERY,
            mode="exact",  # the examples show what exact search means
        )
        searches.append({**example, "result": result.to_dict()})
    recalls: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in searches:
        if len(recalls) == RECALLS:
            break
        hits = entry["result"]["hits"]
        if hits and hits[0]["memory_id"] not in seen:
            seen.add(hits[0]["memory_id"])
            recalls.append(service.recall(SAMPLE_PROJECT, hits[0]["id"], session_id=hits[0]["session_id"]).to_dict())
    return {
        "project": SAMPLE_PROJECT,
        "loaded": loaded,
        "load_seconds": round(load_seconds, 3),
        "status": service.status(SAMPLE_PROJECT).to_dict(),
        "searches": searches,
        "recalls": recalls,
        "eval": run_demo_eval(service, SAMPLE_PROJECT),
    }


def run_demo_eval(service: Obsmem, project: str) -> dict[str, Any] | None:
    """Index the sample and search its labelled questions in exact and hybrid mode (None: no questions)."""
    from obsmem.sample import questions

    labelled_questions = questions()
    if not labelled_questions or service.hybrid is None:
        return None
    from obsmem.eval import index_project, parse_labelled, run_labelled

    started = time.perf_counter()
    indexed = index_project(service, project)
    index_seconds = time.perf_counter() - started
    started = time.perf_counter()
    results = run_labelled(service, project, parse_labelled(labelled_questions), EVAL_MODES)
    return {
        "questions": len(labelled_questions),
        "indexed": indexed.status.indexed_count if indexed is not None else None,
        "index_seconds": round(index_seconds, 2),
        "eval_seconds": round(time.perf_counter() - started, 2),
        "results": [result.to_dict() for result in results],
        "mode_results": results,  # for the tables; left out of --json
    }


def _print_eval(console: Console, shown: dict[str, Any]) -> None:
    from obsmem.eval import rich_tables

    evaluated = shown["eval"]
    console.print()
    console.rule(f"obsmem eval questions --modes {','.join(EVAL_MODES)}", align="left")
    console.print(
        render.clip(
            f"Semantic mode indexed {evaluated['indexed']} observations with the bundled model in"
            f" {evaluated['index_seconds']:.1f} s (model load included). The sample's"
            f" {evaluated['questions']} labelled questions, searched both ways in"
            f" {evaluated['eval_seconds']:.1f} s: hit@k is the share of questions whose target memory is"
            " among the first k hits; negative_hit_rate the share of unanswerable ones that got any hit"
            " (hybrid always finds something near).",
            None,
        ),
        style="dim",
    )
    for table in rich_tables(evaluated["mode_results"]):
        console.print(table)


def _print_demo(console: Console, shown: dict[str, Any], data_dir: Path, kept: bool) -> None:
    status = shown["status"]
    console.rule(f"obsmem demo: sample project '{shown['project']}'")
    console.print(
        f"Loaded {status['sessions']} sessions, {status['events']} events,"
        f" {status['observations']} observations and {status['reflections']} reflections"
        f" in {shown['load_seconds']:.2f} s."
    )
    for entry in shown["searches"]:
        window = " ".join(
            f"--{bound} {entry[bound]!r}" for bound in ("after", "before") if entry.get(bound) is not None
        )
        console.print()
        console.rule(f"obsmem search {shown['project']} {entry['query']!r} {window}".rstrip(), align="left")
        console.print(render.clip(entry.get("why", ""), None), style="dim")
        render.render_search(console, entry["result"], content_chars=CONTENT_CHARS)
    for recalled in shown["recalls"]:
        memory = recalled["memory"]
        console.print()
        console.rule(f"obsmem recall {shown['project']} {memory['id']} --session {memory['session_id']}", align="left")
        render.render_recall(console, recalled)
    if shown.get("eval"):
        _print_eval(console, shown)
    console.print()
    if kept:
        console.print(
            f"The sample stays in {data_dir}. Try: obsmem --data-dir {data_dir} search {shown['project']} QUERY"
        )
    else:
        console.print("The demo ran in a temporary directory, now removed. Keep it with: obsmem demo --data-dir DIR")


@click.command()
@click.option(
    "--data-dir",
    "demo_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="New or empty directory to load the sample into, and keep [default: a temporary directory].",
)
@json_option
def demo(demo_dir: Path | None, as_json: bool) -> None:
    """Load the bundled sample project, run example searches and recalls, and print them.

    Uses the built-in settings only (no settings file, no OBSMEM_* variables) and never the usual data
    directory.
    """
    with (
        demo_directory(demo_dir) as data_dir,
        Obsmem(builtin_settings(data_dir=data_dir, semantic=SemanticSettings()), background_indexing=False) as service,
    ):
        shown = run_demo(service)
        if as_json:
            evaluated = shown["eval"] and {k: v for k, v in shown["eval"].items() if k != "mode_results"}
            render.emit_json({**shown, "eval": evaluated, "data_dir": str(data_dir) if demo_dir is not None else None})
        else:
            _print_demo(render.stdout(), shown, data_dir, kept=demo_dir is not None)
