"""``obsmem import`` and ``obsmem hook``: coding agents' transcripts into obsmem.

    obsmem import SOURCE [PATH ...] [--project P] [--follow] [--json]
    obsmem hook claude-code|gemini-cli [--project P]     (reads the hook's JSON payload on stdin)

Without a PATH, ``import`` looks in the agent's default locations (see obsmem.transcripts.discovery)
and lists what it found before importing it. Printing: a table per file (sessions, events added,
duplicates, skipped by reason, problems with their lines), a progress bar on stderr for large files,
or one JSON receipt with ``--json``. Exit status: 0, or 1 when a file had problems (the rest of it and
the other files were still imported).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from obsmem.errors import ObsmemError, ValidationFailed
from obsmem.exporting import restore_project
from obsmem.json_shape import strict_dumps
from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import RUNTIME_EXIT, App, FiniteFloatRange, error_line, json_option, pass_app
from obsmem.surfaces.cli_catchup import AFTER_HOOK_EVENTS, catch_up_after_write
from obsmem.transcripts import (
    SOURCES,
    FileProgress,
    ImportRun,
    ReaderOptions,
    claude_subagents,
    default_roots,
    discover,
    expand_home,
    find_transcripts,
    project_for_cwd,
)
from obsmem.transcripts.claude_code import ClaudeCodeFormat
from obsmem.validation import project_name

HOOK_SOURCES = ("claude-code", "gemini-cli")
MAX_PAYLOAD_BYTES = 1_000_000  # a hook payload is a few hundred bytes; more is not a payload
# A progress bar is drawn for imports of at least this many bytes (smaller ones finish at once).
PROGRESS_BYTES = 8 * 1024 * 1024
LISTED_FILES = 20  # found files listed before an import; the receipt names every one


def _files(source: str, paths: tuple[Path, ...]) -> list[Path]:
    if not paths:
        return discover(source)
    files: list[Path] = []
    for path in paths:
        files.extend(find_transcripts(source, path) if path.is_dir() else [path])
    return files


def _restore_export(app: App, path: Path, project: str | None) -> dict[str, Any] | None:
    """A whole-project export (first line: a header with ``format``) is restored, not read as events."""
    try:
        with open(path, "rb") as handle:
            first = json.loads(handle.readline() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or "format" not in first:
        return None
    if project is None:
        raise click.UsageError("restoring a whole-project export needs --project NEW")
    restored = restore_project(app.service, path, project)
    catch_up_after_write(app.service, [project], show_progress=sys.stderr.isatty())
    return restored.to_dict()


@click.command("import")
@click.argument("source", type=click.Choice(SOURCES))
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--project", default=None, help="Project for every file [default: mapped from its working directory].")
@click.option("--follow", is_flag=True, help="Keep importing as the transcripts grow, until interrupted.")
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0.05, max=3600),
    default=2.0,
    show_default=True,
    help="With --follow: seconds between looks at the files.",
)
@json_option
@pass_app
def import_command(
    app: App,
    source: str,
    paths: tuple[Path, ...],
    project: str | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Import SOURCE's transcripts (claude-code, codex, gemini-cli, opencode, aider, openai-chat, obsmem).

    PATHs are transcript files or folders holding them; without one, the agent's default locations are
    searched (honouring CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME, XDG_DATA_HOME). Importing again
    stores only what the agent wrote since. Secrets are redacted as for any append.
    """
    if project is not None:
        project_name(project)
    # A PATH that does not exist is a typo, named as one; with --follow it may be a transcript the agent has
    # not written yet, which each round looks for again.
    missing = next((path for path in paths if not path.exists()), None)
    if missing is not None and not follow:
        raise click.BadParameter(f"Path '{missing}' does not exist.", param_hint="'[PATHS]...'")
    if source == "obsmem" and len(paths) == 1 and paths[0].is_file():
        restored = _restore_export(app, paths[0], project)
        if restored is not None:
            if as_json:
                render.emit_json(restored)
            else:
                click.echo(f"restored {paths[0]} into {project}")
            return
    if not paths and source in ("openai-chat", "obsmem"):
        raise click.UsageError(f"{source} files have no default location: give the PATH of each")
    console = render.stdout()
    if follow:
        _follow(app, source, paths, project, interval, as_json)
        return
    files = _files(source, paths)
    if not paths and not as_json:
        roots = ", ".join(str(root) for root in default_roots(source))
        click.echo(f"{len(files)} {source} transcript(s) found in {roots}", err=True)
        for file in files[:LISTED_FILES]:
            click.echo(f"  {file}", err=True)
        if len(files) > LISTED_FILES:
            click.echo(f"  ... and {len(files) - LISTED_FILES} more", err=True)
    total = sum(_size(f) for f in files)
    with _progress(total >= PROGRESS_BYTES and sys.stderr.isatty(), total) as progress:
        run = app.service.import_transcripts(source, files, project=project, progress=progress)
    catch_up_after_write(app.service, _projects(run), show_progress=sys.stderr.isatty())
    if as_json:
        render.emit_json(run.to_dict())
    else:
        render_run(console, run)
    if run.problems:
        raise click.exceptions.Exit(RUNTIME_EXIT)


def _projects(run: ImportRun) -> set[str]:
    """The projects an import stored events in."""
    return {name for report in run.files if report.added for name in report.projects}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _progress:
    """One byte progress bar on stderr across the files of an import (or nothing when not enabled)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.total = total
        self.done: dict[str, int] = {}
        self.bar = (
            Progress(
                TextColumn("importing"),
                BarColumn(),
                DownloadColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            if enabled
            else None
        )
        self.task: Any = None

    def __enter__(self) -> FileProgress | None:
        if self.bar is None:
            return None
        self.bar.__enter__()
        self.task = self.bar.add_task("importing", total=self.total)
        return self.report

    def report(self, path: str, done: int, total: int) -> None:
        self.done[path] = done
        if self.bar is not None:
            self.bar.update(self.task, completed=min(sum(self.done.values()), self.total))

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def render_run(console: Console, run: ImportRun) -> None:
    totals = run.to_dict()["totals"]
    table = Table(
        title=(
            f"{run.source}: {totals['files']} file(s), {totals['added']} event(s) added, "
            f"{totals['duplicates']} already stored, {totals['skipped']} skipped, {totals['problems']} problem(s)"
        ),
        title_justify="left",
    )
    for column in ("file", "status", "project", "sessions", "added", "duplicates", "skipped"):
        justify = "right" if column in ("sessions", "added", "duplicates") else "left"
        table.add_column(column, justify=justify, overflow="fold")
    for report in run.files:
        skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(report.skipped.items()))
        table.add_row(
            Text(report.path),
            report.status,
            Text(", ".join(sorted(report.projects)) or "-"),
            str(len(report.sessions)),
            str(report.added),
            str(report.duplicates),
            Text(skipped or "-"),
        )
    console.print(table)
    problems = [(report.path, problem) for report in run.files for problem in report.listed]
    if problems:
        listing = Table(title="Problems (the rest of each file was imported)", title_justify="left")
        listing.add_column("file", overflow="fold")
        listing.add_column("line", justify="right")
        listing.add_column("reason", style="red", no_wrap=True)
        listing.add_column("detail", overflow="fold", ratio=1)
        for path, problem in problems:
            listing.add_row(Text(path), str(problem.line), problem.reason, Text(problem.detail))
        console.print(listing)


# -- follow ------------------------------------------------------------------------------------------------


def _follow(
    app: App, source: str, paths: tuple[Path, ...], project: str | None, interval: float, as_json: bool
) -> None:
    """Import, then look again every ``interval`` seconds, until SIGINT or SIGTERM.

    Each round finds the files again (new sessions are picked up) and imports only what grew; memory
    stays bounded because nothing is kept between rounds but the watermarks in the databases. Each round
    that stored something (or met other problems than the last) prints one line (JSON with ``--json``).
    """
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rounds, last_problems = 0, 0
        while not stop.is_set():
            run = app.service.import_transcripts(source, _files(source, paths), project=project)
            catch_up_after_write(app.service, _projects(run), show_progress=False)
            rounds += 1
            # Files read whole each round (Gemini CLI, opencode) report their problems again: print a
            # round when it stored something or its problems changed, not every interval.
            if run.added or run.problems != last_problems or rounds == 1:
                last_problems = run.problems
                totals = run.to_dict()["totals"]
                if as_json:
                    click.echo(strict_dumps({"round": rounds, **totals}), nl=True)
                else:
                    click.echo(
                        f"round {rounds}: {totals['added']} added, {totals['duplicates']} already stored, "
                        f"{totals['problems']} problem(s) in {totals['files']} file(s)"
                    )
                sys.stdout.flush()
            stop.wait(interval)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("stopped", err=True)


# -- hook --------------------------------------------------------------------------------------------------


def _payload(text: str) -> tuple[Path, str | None]:
    """The transcript path (and working directory) of a hook payload; bad payloads are refused clearly."""
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
        raise ValidationFailed("the hook payload on stdin is not JSON", code="invalid_hook_payload") from None
    if not isinstance(payload, dict):
        raise ValidationFailed("the hook payload must be a JSON object", code="invalid_hook_payload")
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or not transcript:
        raise ValidationFailed(
            "the hook payload has no transcript_path", code="invalid_hook_payload", field="transcript_path"
        )
    path = expand_home(transcript)
    if not path.is_file():
        raise ValidationFailed(
            "transcript_path names no readable file", code="invalid_hook_payload", field="transcript_path"
        )
    cwd = payload.get("cwd")
    return path, cwd if isinstance(cwd, str) else None


@click.command()
@click.argument("agent", type=click.Choice(HOOK_SOURCES))
@click.option("--project", default=None, help="Project to import into [default: mapped from the transcript].")
@pass_app
def hook(app: App, agent: str, project: str | None) -> None:
    """Import the session a hook names: AGENT runs this with its hook payload (JSON) on stdin.

    Install it for Claude Code's Stop, SubagentStop and SessionEnd hooks, or Gemini CLI's SessionEnd and
    AfterAgent (see docs/importing.md). For Claude Code the session's sub-agent files are imported too.
    Prints nothing on success (Gemini CLI gets "{}"). Any failure (a bad payload, a transcript with
    problems, a storage fault) prints one line on stderr and exits 1: both
    agents read exit status 2 as "block what the agent is doing", which a memory import must never do.
    """
    try:
        run = _hook_import(app, agent, project)
    except ObsmemError as exc:
        click.echo(error_line(exc), err=True)
        raise click.exceptions.Exit(RUNTIME_EXIT) from None
    if agent == "gemini-cli":
        click.echo("{}")
    if run.problems:
        report = next(report for report in run.files if report.problems)
        listed = ", ".join(f"{p.reason} (line {p.line})" for p in report.listed[:5])
        click.echo(f"obsmem: {run.problems} problem(s) importing {Path(report.path).name}: {listed}", err=True)
        raise click.exceptions.Exit(RUNTIME_EXIT)


def _hook_import(app: App, agent: str, project: str | None) -> ImportRun:
    if project is not None:
        project_name(project)
    raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
    if len(raw) > MAX_PAYLOAD_BYTES:  # said as such: cut short, valid JSON was refused as "not JSON"
        raise ValidationFailed(
            f"the hook payload on stdin is larger than {MAX_PAYLOAD_BYTES:,} bytes", code="invalid_hook_payload"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("the hook payload on stdin is not UTF-8 text", code="invalid_hook_payload") from None
    path, cwd = _payload(text)
    files = [path]
    if agent == "claude-code":
        # The session's sub-agents write their own files, which no hook of theirs names.
        files.extend(claude_subagents(path))
        if project is None and cwd is not None and ClaudeCodeFormat(ReaderOptions(), path, {}).project_cwd() is None:
            project = project_for_cwd(cwd, app.service.settings.transcripts.project_map)  # nothing recorded yet
    run = app.service.import_transcripts(agent, files, project=project)
    catch_up_after_write(app.service, _projects(run), max_events=AFTER_HOOK_EVENTS, show_progress=False)
    return run
