"""``obsmem index PROJECT``: index everything pending now, in the foreground, with a progress bar.

Register it in the CLI's command table with one line::

    "index": "obsmem.surfaces.cli_index:index",

The command expects the CLI's context object (``ctx.obj``) to offer ``settings()`` (the loaded
settings); it builds its own service with background indexing off, so the foreground run is the only
indexer in this process. Another process indexing the same project (a running server) makes it fail
with ``index_busy`` rather than wait.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from obsmem.app import IndexReport, Obsmem
from obsmem.errors import ObsmemError


def run_index(service: Obsmem, project: str, *, show_progress: bool) -> IndexReport:
    """Backfill ``project`` on every core (this process serves nothing meanwhile); draws a tqdm bar on
    stderr when ``show_progress``."""
    from tqdm import tqdm

    index = service.indexer.project(project) if service.indexer is not None else None
    total = index.pending_count() if index is not None else 0
    bar = tqdm(total=total, unit="memory", desc=f"indexing {project}", disable=not show_progress, file=sys.stderr)
    try:

        def advance(report: Any) -> None:
            bar.total = max(bar.total or 0, bar.n + report.memories + report.remaining)
            bar.update(report.memories)

        return service.index(project, progress=advance, every_core=True)
    finally:
        bar.close()


@click.command("index")
@click.argument("project")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--progress/--no-progress", default=None, help="Show a progress bar [default: when stderr is a terminal]."
)
@click.pass_obj
def index(app: Any, project: str, as_json: bool, progress: bool | None) -> None:
    """Index every pending memory of PROJECT now (semantic mode), then publish the vector index file.

    Needs the [semantic] settings section. Safe to interrupt: finished batches are kept and a later run
    (or the server's background indexer) continues where this one stopped.
    """
    show = sys.stderr.isatty() if progress is None else progress
    service = Obsmem(app.settings(), background_indexing=False)
    try:
        summary = run_index(service, project, show_progress=show and not as_json).to_dict()
    except ObsmemError:
        raise
    finally:
        service.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        click.echo(
            f"{project}: {summary['indexed_count']} of {summary['source_count']} memories indexed "
            f"({summary['chunks_embedded']} chunks embedded, {summary['chunks_reused']} reused)"
        )
