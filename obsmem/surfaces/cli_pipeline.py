"""CLI commands of the observation pipeline: ``worker``, ``view``, ``observe``, ``events`` and ``status``.

``status`` extends the project counts of :func:`obsmem.surfaces.cli.status` with the pipeline: a line on
background observation and jobs, and with ``--session`` the session's progress state (the same fields as
``GET /v1/projects/{project}/sessions/{session_id}/status``); ``--live`` keeps redrawing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import App, json_option, pass_app, session_option
from obsmem.validation import session_id as check_session_id

EVENT_TYPES = ("om_observation_start", "om_observation_end", "om_observation_failed", "job_failed")


# -- worker -------------------------------------------------------------------------------------------------


@click.command()
@click.option(
    "--threads", type=click.IntRange(1, 32), default=None, help="Jobs run at once [default: jobs.worker_threads, 1]."
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs may take to finish after SIGTERM or Ctrl-C.",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log level of the worker's log on stderr.",
)
@pass_app
def worker(app: App, threads: int | None, grace: float, log_level: str) -> None:
    """Run background jobs (observation) for every project in the data directory until stopped.

    Any number of workers may run beside `obsmem serve`; leases in each project database decide who runs
    what, and a worker that dies hands its job to another when its lease expires.
    """
    import logging

    from obsmem.surfaces.worker import run_worker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_worker(app.settings(), threads=threads, grace_seconds=grace)


# -- view and observe ---------------------------------------------------------------------------------------


@click.command()
@click.argument("project")
@click.argument("session_id", metavar="SESSION")
@json_option
@pass_app
def view(app: App, project: str, session_id: str, as_json: bool) -> None:
    """Print the active memory of SESSION: what an agent injects when it compacts its context.

    Reflections, then observations, each with its 12-character id (for `obsmem recall`), timestamp and
    importance. Instant: no model is called. Empty memory prints a note on stderr and nothing on stdout.
    """
    projection = app.service.memory(project, check_session_id(session_id, field="SESSION"))
    if as_json:
        render.emit_json(projection.to_dict())
    elif projection.empty:
        click.echo(f"No memory yet for session {session_id}.", err=True)
    else:
        click.echo(projection.text)


@click.command()
@click.argument("project")
@click.argument("session_id", metavar="SESSION")
@json_option
@pass_app
def observe(app: App, project: str, session_id: str, as_json: bool) -> None:
    """Queue observation of everything SESSION has not had observed yet (e.g. when it ends).

    Below `observer.buffer_tokens` the backlog otherwise waits for more events. A worker (`obsmem serve`
    or `obsmem worker`) does the work; follow it with `obsmem status PROJECT --session SESSION --live`.
    """
    result = app.service.observe(project, check_session_id(session_id, field="SESSION"))
    if as_json:
        render.emit_json({"job_id": result.job_id, "queued": result.created})
    else:
        note = "queued" if result.created else "already queued"
        click.echo(f"Observation of {session_id} {note} (job {result.job_id}).")


# -- events -------------------------------------------------------------------------------------------------


@click.command()
@click.argument("project")
@session_option("Only events of this session.")
@click.option("--after-id", type=click.IntRange(0), default=None, help="Only events with a larger id.")
@click.option("--limit", type=click.IntRange(1, 1000), default=None, help="Most events [default: 100].")
@click.option("--follow", is_flag=True, help="Keep printing new events as they are logged (Ctrl-C stops).")
@json_option
@pass_app
def events(
    app: App, project: str, session_id: str | None, after_id: int | None, limit: int | None, follow: bool, as_json: bool
) -> None:
    """The pipeline's event log of PROJECT, oldest first: observation cycles and failed jobs.

    With --json, one JSON object per line (also with --follow).
    """
    if session_id is not None:
        check_session_id(session_id, field="--session")
    service = app.service
    console = render.stdout()
    cursor = after_id or 0
    while True:
        found = service.pipeline_events(project, after=cursor, limit=limit, session_id=session_id)
        for event in found:
            if as_json:
                import json

                click.echo(json.dumps(event, ensure_ascii=False))
            else:
                console.print(event_line(event))
            cursor = event["id"]
        if not follow:
            return
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            return


def event_line(event: dict[str, Any]) -> Text:
    """One event as a line: time, type, session, cycle, and the figures that matter for its type."""
    when = event["created_at"][11:19]
    parts = [when, event["type"]]
    if "session_id" in event:
        parts.append(event["session_id"])
    if "cycle_id" in event:
        parts.append(f"cycle {event['cycle_id'][:8]}")
    kind = event["type"]
    if kind.endswith("_start"):
        parts.append(
            f"~{event.get('tokens_to_observe', 0):,} tokens, #{event.get('first_seq')}-#{event.get('last_seq')}"
        )
    elif kind.endswith("_end"):
        parts.append(
            f"{event.get('duration_ms', 0):,} ms, {event.get('observations', 0)} observations, "
            f"{event.get('rejected', 0)} rejected, through #{event.get('observed_through_seq')}"
        )
    elif kind.endswith("_failed") and kind != "job_failed":
        parts.append(f"{event.get('duration_ms', 0):,} ms: {event.get('error', '')}")
    elif kind == "job_failed":
        parts.append(
            f"job {event.get('job_id')} ({event.get('kind')}) after {event.get('attempts')} attempts: "
            f"{event.get('reason', '')}"
        )
    return Text("  ".join(str(p) for p in parts), style="red" if "failed" in kind else "")


# -- status -------------------------------------------------------------------------------------------------


@click.command()
@click.argument("project", required=False)
@session_option("Show the observation progress of this session of PROJECT.")
@click.option("--live", is_flag=True, help="Keep redrawing until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=0.5,
    show_default=True,
    help="Seconds between redraws with --live.",
)
@json_option
@pass_app
def status(app: App, project: str | None, session_id: str | None, live: bool, interval: float, as_json: bool) -> None:
    """Counts for PROJECT (or every project), with background observation; --session for its progress.

    With --session SESSION: idle, observing or reflecting; the unobserved backlog against the buffer
    threshold; memory size; the current model stage; the last error and recent pipeline events.
    """
    if session_id is not None and project is None:
        raise click.UsageError("--session needs PROJECT")
    if live and as_json:
        raise click.UsageError("--live draws tables; use `obsmem events --follow --json` for a stream")
    service = app.service
    if session_id is not None and project is not None:
        session = check_session_id(session_id, field="--session")
        name = project

        def draw() -> RenderableType:
            state = service.session_status(name, session)
            recent = service.pipeline_events(name, session_id=session, limit=5, newest=True)
            return session_view(name, state, recent)

        if as_json:
            render.emit_json(service.session_status(name, session))
            return
    else:
        names = [project] if project is not None else None

        def draw() -> RenderableType:
            rows = [service.status(name) for name in (names or service.project_names())]
            return projects_view(rows, str(service.projects.data_dir))

        if as_json:
            rows = [service.status(name) for name in (names or service.project_names())]
            if project is not None:
                render.emit_json(rows[0])
            else:
                render.emit_json({"data_dir": str(service.projects.data_dir), "projects": rows})
            return
    console = render.stdout()
    if not live:
        console.print(draw())
        return
    show_live(console, draw, interval)


def show_live(console: Console, draw: Callable[[], RenderableType], interval: float) -> None:
    """Redraw until Ctrl-C, which ends the view (exit 0) whenever it comes."""
    try:
        with Live(draw(), console=console, refresh_per_second=max(1, int(1 / interval))) as screen:
            while True:
                time.sleep(interval)
                screen.update(draw())
    except KeyboardInterrupt:
        return


def projects_view(rows: Sequence[dict[str, Any]], data_dir: str) -> RenderableType:
    if not rows:
        return Text(f"No projects in {data_dir} yet: `obsmem ingest PROJECT FILE` creates one.")
    parts: list[RenderableType] = [render.status_table(rows)]
    for row in rows:
        jobs = row.get("jobs") or {}
        line = (
            f"{row['project']}: background observation {row.get('observer', 'unknown')}; jobs "
            f"{jobs.get('queued', 0)} queued, {jobs.get('running', 0)} running, {jobs.get('failed', 0)} failed"
        )
        parts.append(Text(line, style="red" if jobs.get("failed") else ""))
    return Group(*parts)


def _bar(percent: float, width: int = 24) -> str:
    filled = max(0, min(width, round(width * percent / 100)))
    return "█" * filled + "░" * (width - filled)


def session_view(project: str, state: dict[str, Any], recent: Sequence[dict[str, Any]]) -> RenderableType:
    activity = state["current_activity"]
    headline = Text(f"Session {state['session_id']} of {project}: ", style="bold")
    headline.append(state["status"], style="green" if state["status"] == "idle" else "yellow")
    if activity:
        headline.append(
            f"  ({activity['stage']} running on ~{activity['tokens']:,} tokens for {activity['running_seconds']:.1f} s)"
        )
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    percent = state["threshold_percent"]
    table.add_row(
        "Backlog",
        f"{_bar(percent)} {state['pending_tokens']:,} / {state['threshold']:,} tokens "
        f"({percent:.1f}%), {state['pending_events']:,} events",
    )
    table.add_row(
        "Observed",
        f"through #{state['observed_through_seq']:,} of #{state['last_seq']:,}; "
        f"agents compact at {state['observation_threshold']:,} tokens",
    )
    table.add_row(
        "Memory",
        f"{state['observation_tokens']:,} observation tokens (reflection due at "
        f"{state['reflection_threshold']:,}), generation {state['generation_count']}",
    )
    jobs = state["jobs"]
    table.add_row("Jobs", f"{jobs['queued']} queued, {jobs['running']} running; observer {state['observer']}")
    parts: list[RenderableType] = [headline, table]
    error = state["last_error"]
    if error:
        parts.append(
            Text(f"Last error ({error['at'][:19].replace('T', ' ')}): {error['code']}: {error['message']}", style="red")
        )
    if recent:
        parts.append(Text("Recent pipeline events:", style="bold"))
        parts.extend(Text("  ") + event_line(event) for event in recent)
    return Group(*parts)
