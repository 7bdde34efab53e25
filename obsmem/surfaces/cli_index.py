"""``obsmem index PROJECT``: index everything pending now, in the foreground, with a progress bar: the
conversation index of exact search (always), then the semantic index (with ``[semantic]``).

Register it in the CLI's command table with one line::

    "index": "obsmem.surfaces.cli_index:index",

The command expects the CLI's context object (``ctx.obj``) to offer ``settings()`` (the loaded
settings); it builds its own service with background indexing off, so the foreground run is the only
indexer in this process. Another process indexing the same project (a running server) makes it fail
with ``index_busy`` rather than wait.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from obsmem.app import IndexReport, Obsmem
from obsmem.errors import ObsmemError
from obsmem.json_shape import strict_dumps
from obsmem.surfaces.cli_catchup import catch_up


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
    """Index what is pending in PROJECT now: the events exact conversation search has not indexed yet,
    then (with the [semantic] settings section) every pending memory, and publish the vector index file.

    Safe to interrupt: finished batches are kept and a later run (or the server's background work)
    continues where this one stopped.
    """
    show = sys.stderr.isatty() if progress is None else progress
    service = Obsmem(app.settings(), background_indexing=False)
    try:
        conversation, _ = catch_up(service, project, max_events=None, show_progress=show and not as_json)
        semantic = service.indexer is not None
        events_too = semantic and service.settings.semantic is not None and service.settings.semantic.index.events
        summary: dict[str, Any] = {"conversation_events_indexed": conversation}
        if semantic:
            summary |= run_index(service, project, show_progress=show and not as_json).to_dict()
    except ObsmemError:
        raise
    finally:
        service.close()
    if as_json:
        click.echo(strict_dumps(summary, indent=2, sort_keys=True))
        return
    click.echo(f"{project}: conversation index current ({conversation:,} events indexed now)")
    if semantic:
        sources = "memories and events" if events_too else "memories"
        click.echo(
            f"{project}: {summary['indexed_count']} of {summary['source_count']} {sources} in the semantic index "
            f"({summary['chunks_embedded']} chunks embedded, {summary['chunks_reused']} reused)"
        )
