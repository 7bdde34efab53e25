"""``obsmem demo``: the bundled sample project, searched and recalled, in a few seconds.

It runs on the built-in defaults in a fresh data directory (a temporary one unless ``--data-dir`` names a
new or empty directory), so it shows the same thing on every machine and never touches real data.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from obsmem.settings import builtin_settings
from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import json_option
from obsmem.surfaces.service import Obsmem

HITS_PER_QUERY = 5
RECALLS = 2
CONTENT_CHARS = 90


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
    """Load the sample, run its example searches, recall hits; returns everything the demo shows."""
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
            recalls.append(service.recall(SAMPLE_PROJECT, hits[0]["id"], session_id=hits[0]["session_id"]))
    return {
        "project": SAMPLE_PROJECT,
        "loaded": loaded,
        "load_seconds": round(load_seconds, 3),
        "status": service.status(SAMPLE_PROJECT),
        "searches": searches,
        "recalls": recalls,
    }


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
        console.rule(
            f"obsmem recall {shown['project']} {memory['id']} --session {memory['session_id']}", align="left"
        )
        render.render_recall(console, recalled)
    console.print()
    if kept:
        console.print(
            f"The sample stays in {data_dir}."
            f" Try: obsmem --data-dir {data_dir} search {shown['project']} QUERY"
        )
    else:
        console.print(
            "The demo ran in a temporary directory, now removed. Keep it with: obsmem demo --data-dir DIR"
        )


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
    with demo_directory(demo_dir) as data_dir, Obsmem(builtin_settings(data_dir=data_dir)) as service:
        shown = run_demo(service)
        if as_json:
            render.emit_json({**shown, "data_dir": str(data_dir) if demo_dir is not None else None})
        else:
            _print_demo(render.stdout(), shown, data_dir, kept=demo_dir is not None)
