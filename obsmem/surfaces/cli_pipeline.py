"""CLI commands of the observation pipeline: ``worker``, ``view``, ``observe``, ``reflect``, ``models``,
``events`` and ``status``.

``status`` extends the project counts of :func:`obsmem.surfaces.cli.status` with the pipeline: a line on
background observation and jobs, and with ``--session`` the session's progress state (the same fields as
``GET /v1/projects/{project}/sessions/{session_id}/status``); ``--live`` keeps redrawing it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from obsmem.json_shape import strict_dumps
from obsmem.pipeline import ROLES
from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import App, FiniteFloatRange, json_option, pass_app, session_option
from obsmem.surfaces.cli_each_project import ProjectFailure, each_project, exit_if_failed
from obsmem.surfaces.worker import MAX_GRACE_SECONDS
from obsmem.validation import session_id as check_session_id
from obsmem.work import MAX_EVENT_ID

# -- worker -------------------------------------------------------------------------------------------------


@click.command()
@click.option(
    "--threads", type=click.IntRange(1, 32), default=None, help="Jobs run at once [default: jobs.worker_threads, 1]."
)
@click.option(
    "--grace",
    type=FiniteFloatRange(0, MAX_GRACE_SECONDS),
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
    """Run background jobs (observation, reflection, indexing) for every project in the data directory until stopped.

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
@click.option(
    "--details",
    is_flag=True,
    help="Inspect instead: the generation, pool pressure, reflections with the observations supporting them, "
    "observations with their coverage tier and source events.",
)
@json_option
@pass_app
def view(app: App, project: str, session_id: str, details: bool, as_json: bool) -> None:
    """Print the active memory of SESSION: what an agent injects when it compacts its context.

    Reflections, then observations, each with its 12-character id (for `obsmem recall`), timestamp and
    importance. Instant: no model is called. Empty memory prints a note on stderr and nothing on stdout.
    With --details, tables for people instead (or their JSON with --json).
    """
    session = check_session_id(session_id, field="SESSION")
    if details:
        found = app.service.memory_details(project, session).to_dict()
        if as_json:
            render.emit_json(found)
        else:
            render.stdout().print(details_view(project, found))
        return
    projection = app.service.memory(project, session)
    if as_json:
        render.emit_json(projection.to_dict())
    elif not projection.text:
        click.echo(f"No memory yet for session {session_id}.", err=True)
    else:
        click.echo(projection.text)


def pressure_line(pool: dict[str, Any]) -> str:
    return (
        f"{_bar(min(pool['pool_percent'], 100.0))} {pool['observation_tokens']:,} / "
        f"{pool['observations_max_tokens']:,} tokens ({pool['pool_percent']:.1f}% of the target; reflection due "
        f"above {pool['reflection_threshold']:,}), {pool['observations']:,} observations"
    )


def generation_line(generation: dict[str, Any] | None) -> str:
    if generation is None:
        return "none promoted yet (every observation is active)"
    return (
        f"{generation['number']} ({generation['id']}), promoted {generation['promoted_at'][:19].replace('T', ' ')}: "
        f"+{generation['reflections_added']} reflections, -{generation['observations_dropped']} observations"
    )


def coverage_line(pool: dict[str, Any]) -> str:
    coverage = pool["coverage"]
    return (
        f"{coverage['not covered']:,} not covered, {coverage['partly covered']:,} partly covered, "
        f"{coverage['strongly covered']:,} strongly covered; {pool['reflections']:,} reflections "
        f"(~{pool['reflection_tokens']:,} tokens); {pool['dropped_observations']:,} observations dropped"
    )


def details_view(project: str, found: dict[str, Any]) -> RenderableType:
    pool = found["pool"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("Generation", generation_line(found["generation"]))
    grid.add_row("Pool", pressure_line(pool))
    grid.add_row("Coverage", coverage_line(pool))
    parts: list[RenderableType] = [Text(f"Active memory of {found['session_id']} in {project}", style="bold"), grid]
    reflections = Table(title=f"Reflections ({len(found['reflections'])})", title_justify="left", show_lines=False)
    reflections.add_column("id", style="cyan", no_wrap=True, min_width=12)
    reflections.add_column("time", no_wrap=True, min_width=16)
    reflections.add_column("gen", justify="right", no_wrap=True)
    reflections.add_column("content", overflow="fold", ratio=3)
    reflections.add_column("supported by", overflow="fold", ratio=1)
    for item in found["reflections"]:
        support = ", ".join(item["supporting_observation_ids"])
        if item["retired_support"]:
            support += f" ({item['retired_support']} dropped since)"
        generation = item["generation"]
        reflections.add_row(
            item["id"],
            item["timestamp"],
            "-" if generation is None else str(generation),
            Text(item["content"]),
            support,
        )
    observations = Table(title=f"Observations ({len(found['observations'])})", title_justify="left", show_lines=False)
    observations.add_column("id", style="cyan", no_wrap=True, min_width=12)
    observations.add_column("time", no_wrap=True, min_width=16)
    observations.add_column("importance", no_wrap=True)
    observations.add_column("coverage", no_wrap=True)
    observations.add_column("events", overflow="fold")
    observations.add_column("content", overflow="fold", ratio=3)
    for item in found["observations"]:
        observations.add_row(
            item["id"],
            item["timestamp"],
            item["importance"],
            Text(item["coverage"], style=TIER_STYLE[item["coverage"]]),
            render.seq_list(item["source_seqs"]),
            Text(item["content"]),
        )
    parts += [reflections, observations]
    return Group(*parts)


TIER_STYLE = {"not covered": "", "partly covered": "yellow", "strongly covered": "green"}


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


@click.command()
@click.argument("project")
@click.argument("session_id", metavar="SESSION")
@json_option
@pass_app
def reflect(app: App, project: str, session_id: str, as_json: bool) -> None:
    """Queue a Reflector run over SESSION's active memory now, below the reflection threshold too.

    The Dropper still runs only when the run adds a reflection and the active observations exceed
    `pools.observations_max_tokens`. A worker does the work; follow it with `obsmem status --session`.
    """
    result = app.service.reflect(project, check_session_id(session_id, field="SESSION"))
    if as_json:
        render.emit_json({"job_id": result.job_id, "queued": result.created})
    else:
        note = "queued" if result.created else "already queued"
        click.echo(f"Reflection of {session_id} {note} (job {result.job_id}).")


@click.command()
@click.argument("project")
@click.option("--observer", "observer_model", metavar="MODEL_ID", default=None, help="Switch the Observer's model.")
@click.option("--reflector", "reflector_model", metavar="MODEL_ID", default=None, help="Switch the Reflector's model.")
@click.option("--dropper", "dropper_model", metavar="MODEL_ID", default=None, help="Switch the Dropper's model.")
@click.option(
    "--context-window",
    type=click.IntRange(2048, 10_000_000),
    default=None,
    help="Context window (tokens) of the model(s) switched to in this command [default: the configured one].",
)
@click.option(
    "--reset",
    type=click.Choice(ROLES),
    multiple=True,
    help="Return ROLE to the model of the settings file (repeatable).",
)
@json_option
@pass_app
def models(
    app: App,
    project: str,
    observer_model: str | None,
    reflector_model: str | None,
    dropper_model: str | None,
    context_window: int | None,
    reset: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show or switch the model each pipeline role of PROJECT uses, at run time.

    Without options, shows each role's model and whether it comes from the settings file or a switch.
    A switch is stored in the project, logged as an `om_model_changed` event and used by the role's next
    job (a running one finishes with its model). Only the model id (and its context window) can change:
    the endpoint and key stay those of the settings file.
    """
    wanted = {"observer": observer_model, "reflector": reflector_model, "dropper": dropper_model}
    changes: dict[str, Any] = {
        role: {"model_id": model_id} | ({"context_window_tokens": context_window} if context_window else {})
        for role, model_id in wanted.items()
        if model_id is not None
    }
    clash = set(changes) & set(reset)
    if clash:
        raise click.UsageError(f"--reset {sorted(clash)[0]} and --{sorted(clash)[0]} contradict each other")
    if context_window is not None and not changes:
        raise click.UsageError("--context-window goes with --observer, --reflector or --dropper")
    changes.update(dict.fromkeys(reset))
    result = (app.service.switch_models(project, changes) if changes else app.service.models(project)).to_dict()
    if as_json:
        render.emit_json(result)
        return
    table = Table(title=f"Models of {project}", title_justify="left")
    table.add_column("role", style="bold")
    table.add_column("model", overflow="fold")
    table.add_column("context window", justify="right")
    table.add_column("source")
    for role, model in result["models"].items():
        source = model["source"] + (
            f" (since {model['updated_at'][:19].replace('T', ' ')})" if model["updated_at"] else ""
        )
        table.add_row(role, Text(model["model_id"] or "(none)"), f"{model['context_window_tokens']:,}", source)
    console = render.stdout()
    console.print(table)
    if "changed" in result:
        changed = ", ".join(result["changed"]) or "nothing (already so)"
        console.print(f"Changed: {changed}. Each role's next job uses its model.")


# -- events -------------------------------------------------------------------------------------------------


@click.command()
@click.argument("project")
@session_option("Only events of this session.")
@click.option("--after-id", type=click.IntRange(0, MAX_EVENT_ID), default=None, help="Only events with a larger id.")
@click.option("--limit", type=click.IntRange(1, 1000), default=None, help="Most events [default: 100].")
@click.option("--follow", is_flag=True, help="Keep printing new events as they are logged (Ctrl-C stops).")
@json_option
@pass_app
def events(
    app: App, project: str, session_id: str | None, after_id: int | None, limit: int | None, follow: bool, as_json: bool
) -> None:
    """The pipeline's event log of PROJECT, oldest first: model stage cycles, model switches, failed jobs.

    With --json, one JSON object per line (also with --follow), so no events is no lines; without it, no
    events is said in a line.
    """
    service = app.service
    console = render.stdout()
    cursor = after_id or 0
    first_page = True
    while True:
        found = service.pipeline_events(project, after=cursor, limit=limit, session_id=session_id)
        for event in (logged.to_dict() for logged in found):
            if as_json:
                click.echo(strict_dumps(event, ensure_ascii=False))
            else:
                console.print(event_line(event))
            cursor = event["id"]
        if first_page and not found and not as_json:
            click.echo(no_events_line(project, session_id, after_id, follow))
        first_page = False
        if not follow:
            return
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            return


def no_events_line(project: str, session_id: str | None, after_id: int | None, follow: bool) -> str:
    """What ``obsmem events`` says when the log holds none of the events asked for."""
    which = f" of session {session_id}" if session_id is not None else ""
    after = f" after id {after_id}" if after_id else ""
    waiting = ": waiting for new ones (Ctrl-C stops)." if follow else "."
    return f"No pipeline events{which} in {project}{after}{waiting}"


def event_line(event: dict[str, Any]) -> Text:
    """One event as a line: time, type, session, cycle, and the figures that matter for its type."""
    when = event["created_at"][11:19]
    parts = [when, event["type"]]
    if "session_id" in event:
        parts.append(event["session_id"])
    if "cycle_id" in event:
        parts.append(f"cycle {event['cycle_id'][:8]}")
    kind = event["type"]
    if kind == "om_observation_start":
        parts.append(
            f"~{event.get('tokens_to_observe', 0):,} tokens, #{event.get('first_seq')}-#{event.get('last_seq')}"
        )
    elif kind == "om_observation_end":
        parts.append(
            f"{event.get('duration_ms', 0):,} ms, {event.get('observations', 0)} observations, "
            f"{event.get('rejected', 0)} rejected, through #{event.get('observed_through_seq')}"
        )
    elif kind == "om_reflection_start":
        parts.append(
            f"{event.get('observations', 0):,} observations (~{event.get('observation_tokens', 0):,} tokens), "
            f"{event.get('reflections', 0):,} reflections, on generation {event.get('generation', 0)}"
        )
    elif kind == "om_reflection_end":
        parts.append(
            f"{event.get('duration_ms', 0):,} ms, {event.get('reflections', 0)} new reflections, "
            f"{event.get('rejected', 0)} rejected, {event.get('state')} generation {event.get('generation')}"
        )
    elif kind == "om_dropper_start":
        parts.append(f"~{event.get('observation_tokens', 0):,} tokens, over the target by ~{event.get('over_by', 0):,}")
    elif kind == "om_dropper_end":
        parts.append(
            f"{event.get('duration_ms', 0):,} ms, {event.get('proposed', 0)} proposed, {event.get('dropped', 0)} "
            f"dropped, ~{event.get('observation_tokens_before', 0):,} -> ~{event.get('observation_tokens_after', 0):,}"
            " tokens"
        )
    elif kind == "om_model_changed":
        parts.append(f"{event.get('role')}: {event.get('previous_model_id')} -> {event.get('model_id')}")
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
    type=FiniteFloatRange(0.1, 60),
    default=0.5,
    show_default=True,
    help="Seconds between redraws with --live.",
)
@json_option
@pass_app
def status(app: App, project: str | None, session_id: str | None, live: bool, interval: float, as_json: bool) -> None:
    """Counts for PROJECT (or every project), with the background pipeline; --session for its progress.

    With --session SESSION: idle, observing or reflecting; the unobserved backlog against the buffer
    threshold; the active generation; the pool's pressure (active observation tokens against the Dropper's
    target and the reflection threshold) and coverage tiers; the current model stage; the last error and
    recent pipeline events.
    """
    if session_id is not None and project is None:
        raise click.UsageError("--session needs PROJECT")
    if live and as_json:
        raise click.UsageError("--live draws tables; use `obsmem events --follow --json` for a stream")
    service = app.service
    if session_id is not None and project is not None:
        session, name = session_id, project

        def draw() -> RenderableType:
            state = service.session_status(name, session).to_dict()
            recent = [e.to_dict() for e in service.pipeline_events(name, session_id=session, limit=5, newest=True)]
            return session_view(name, state, recent)

        if as_json:
            render.emit_json(service.session_status(name, session).to_dict())
            return
    else:
        # On PostgreSQL no data directory holds the projects (the JSON's data_dir is null), and an empty list
        # names the database, never its DSN (a secret).
        data_dir = None if service.settings.storage.backend == "postgres" else str(service.projects.data_dir)

        def read() -> tuple[list[dict[str, Any]], list[ProjectFailure]]:
            if project is not None:
                return [service.status(project).to_dict()], []  # the one project named: its error is the command's
            return each_project(service.project_names(), lambda name: service.status(name).to_dict())

        def draw() -> RenderableType:
            return projects_view(*read(), data_dir)

        if as_json or not live:
            rows, failed = read()
            if not as_json:
                render.stdout().print(projects_view(rows, failed, data_dir))
            elif project is not None:
                render.emit_json(rows[0])
            else:
                render.emit_json({"data_dir": data_dir, "projects": rows, "failed": [f.to_dict() for f in failed]})
            exit_if_failed(failed)
            return
    console = render.stdout()
    if not live:
        console.print(draw())
        return
    show_live(console, draw, interval)


def show_live(console: Console, draw: Callable[[], RenderableType], interval: float) -> None:
    """Redraw until Ctrl-C (or SIGTERM), which ends the view (exit 0) whenever it comes.

    The signal only sets a flag that the loop checks between redraws: raised as KeyboardInterrupt in the
    middle of a status read, it could leave a storage lock held and hang the exit that closes the database.
    """
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with Live(draw(), console=console, refresh_per_second=max(1, int(1 / interval))) as screen:
            while not stop.wait(interval):
                screen.update(draw())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def projects_view(
    rows: Sequence[dict[str, Any]], failed: Sequence[ProjectFailure], data_dir: str | None
) -> RenderableType:
    """The projects' counts, then one red line per project that could not be read."""
    if not rows and not failed:
        where = data_dir or "the PostgreSQL database"
        return Text(f"No projects in {where} yet: `obsmem ingest PROJECT FILE` creates one.")
    parts: list[RenderableType] = [render.status_table(rows)] if rows else []
    for row in rows:
        if row.get("unindexed_events"):
            parts.append(
                Text(
                    f"{row['project']}: {row['unindexed_events']:,} events not in the conversation index yet "
                    f"(conversation search scans them; `obsmem index {row['project']}` catches up)"
                )
            )
        index = row.get("index")
        if row.get("mode") == "hybrid" and isinstance(index, dict):
            parts.append(
                Text(
                    f"{row['project']}: search hybrid; semantic index {row.get('indexed_count', 0):,} of "
                    f"{row.get('source_count', 0):,} indexed, {index.get('pending', 0):,} pending, "
                    f"graph file {index.get('graph_file', 'none')}"
                )
            )
            if index.get("graph_file") == "unsaved":
                parts.append(Text(_unsaved_graph(row["project"], index.get("graph_file_error")), style="red"))
        jobs = row.get("jobs") or {}
        line = (
            f"{row['project']}: background observation {row.get('observer', 'unknown')}; jobs "
            f"{jobs.get('queued', 0)} queued, {jobs.get('running', 0)} running, {jobs.get('failed', 0)} failed"
        )
        parts.append(Text(line, style="red" if jobs.get("failed") else ""))
        parts.append(
            Text(
                f"{row['project']}: reflection {row.get('reflector', 'unknown')}; "
                f"{row.get('generations', 0):,} generations promoted, "
                f"{row.get('dropped_observations', 0):,} observations dropped from active memory"
            )
        )
    parts.extend(Text(failure.line(), style="red") for failure in failed)
    return Group(*parts)


def _unsaved_graph(project: str, code: str | None) -> str:
    """What an operator reads when the graph file could not be written (searches still use the graph)."""
    fix = "free disk space in the data directory" if code == "storage_full" else "fix the data directory's storage"
    return (
        f"{project}: the vector index graph is current in memory but could not be saved to its file "
        f"({code or 'storage_error'}); {fix}: the file is written again by itself once it can be"
    )


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
    pool = state["pool"]
    table.add_row("Generation", generation_line(state["generation"]))
    table.add_row("Pool", pressure_line(pool))
    table.add_row("Coverage", coverage_line(pool))
    jobs = state["jobs"]
    table.add_row(
        "Jobs",
        f"{jobs['queued']} queued, {jobs['running']} running; observer {state['observer']}, "
        f"reflector {state['reflector']}",
    )
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
