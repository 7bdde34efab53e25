"""The conversation index caught up from the CLI.

Events are indexed for exact conversation search after they are stored, up to a watermark (see
``obsmem.events.index_event_trigrams``); in a server or ``obsmem worker`` the worker pool's housekeeping
moves it. The CLI runs no worker pool, so the commands that store events (``ingest``, ``import``,
``hook``) move it themselves before they exit, bounded so that a large import is not followed by minutes
of indexing, and ``obsmem index`` moves it all the way. Search answers the same either way: events above
the watermark are scanned directly, which is what makes a large backlog slow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click

from obsmem.app import Obsmem
from obsmem.events import TRIGRAM_BATCH_EVENTS

# Events a write command indexes after itself at most (about half a minute on a loaded machine); the rest
# waits for `obsmem index` or a worker's housekeeping, and the command says so.
AFTER_WRITE_EVENTS = 200_000
# `obsmem hook` runs inside the agent's hook, which has a deadline of its own: a few seconds at most.
AFTER_HOOK_EVENTS = 20_000
# A backlog at least this large gets a progress bar (on a terminal): a few seconds of work.
PROGRESS_EVENTS = 20_000


def catch_up(service: Obsmem, project: str, *, max_events: int | None, show_progress: bool) -> tuple[int, int]:
    """Index up to ``max_events`` of ``project``'s events not indexed yet (None: all of them), one
    transaction per batch, with a tqdm bar on stderr for a large backlog when ``show_progress``; returns
    ``(events indexed, events still waiting)``."""
    backlog = service.conversation_backlog(project)
    target = backlog if max_events is None else min(backlog, max_events)
    if target == 0:
        return 0, backlog
    from tqdm import tqdm

    enabled = show_progress and target >= PROGRESS_EVENTS
    bar = tqdm(
        total=target, unit="event", desc=f"indexing {project}'s conversation", disable=not enabled, file=sys.stderr
    )
    done = 0
    try:
        while done < target:
            step = service.index_conversation(project, max_events=min(TRIGRAM_BATCH_EVENTS, target - done))
            if step == 0:  # another process caught up meanwhile
                break
            done += step
            bar.update(step)
    finally:
        bar.close()
    return done, max(0, backlog - done)


def catch_up_after_write(
    service: Obsmem, projects: Iterable[str], *, max_events: int = AFTER_WRITE_EVENTS, show_progress: bool
) -> None:
    """After a command stored events in ``projects``: catch each one up (bounded), and say on stderr what
    is left, if anything."""
    for project in sorted(set(projects)):
        if not service.projects.exists(project):
            continue  # nothing was stored (a refused file creates no project)
        _, left = catch_up(service, project, max_events=max_events, show_progress=show_progress)
        if left:
            click.echo(
                f"{project}: {left:,} events not in the conversation index yet; `obsmem index {project}` "
                "indexes them now (until then conversation search scans them, slower but complete)",
                err=True,
            )
