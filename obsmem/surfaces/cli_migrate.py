"""``obsmem migrate PROJECT --to postgres|sqlite``: move one project between the two storage backends.

Registered in the CLI's command table with one line::

    "migrate": "obsmem.surfaces.cli_migrate:migrate",

The two ends are the settings' two places: the data directory (``--data-dir``, ``OBSMEM_DATA_DIR``) holds
the SQLite projects, and the PostgreSQL database is ``--dsn`` or ``[storage] dsn`` (``OBSMEM_STORAGE__DSN``),
whatever ``[storage] backend`` says. ``--to`` names the target; the source is the other one. The work and
the checks are :mod:`obsmem.app.migrate`; progress bars go to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import click

from obsmem.app import MigrationReport, Obsmem, migrate_project
from obsmem.exporting import Progress
from obsmem.json_shape import strict_dumps
from obsmem.settings import Settings

_PHASES = {
    "export": "reading the source",
    "verify": "checking the copy file",
    "restore": "writing the target",
    "compare": "reading the target back",
}
MISMATCH_EXIT = 1


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[Progress | None]:
    """A tqdm bar on stderr per phase of the copy; ``None`` when not ``enabled``."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def report(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(
                total=total or None, unit="record", desc=_PHASES.get(phase, phase), file=sys.stderr
            )
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        for bar in bars.values():
            bar.close()


def backend_settings(base: Settings, backend: str, dsn: str | None, app: Any) -> Settings:
    """The settings of one end: ``base`` with its storage backend, and with nothing that would write to the
    project while it is copied or compared: no judging after the comparison's searches, and on the
    PostgreSQL end no Observer, Reflector or semantic index (the copy needs none of them)."""
    overrides: dict[str, Any] = {"storage": {"backend": backend}, "trust": {"judge": {"provider": "none"}}}
    if dsn is not None:
        overrides["storage"]["dsn"] = dsn
    if backend == "postgres":
        overrides |= {"semantic": {"enabled": False}, "observer": {"enabled": False}, "reflector": {"enabled": False}}
    return app.settings(**overrides)


@click.command("migrate")
@click.argument("project")
@click.option(
    "--to",
    "target",
    type=click.Choice(["postgres", "sqlite"]),
    required=True,
    help="Where the copy goes: `postgres` copies from the data directory into the database, `sqlite` back.",
)
@click.option(
    "--dsn",
    default=None,
    help="The PostgreSQL database (postgresql://...) [default: [storage] dsn, OBSMEM_STORAGE__DSN]. Prefer the "
    "variable: a command line is visible to other users of the machine.",
)
@click.option("--as", "copy_name", default=None, help="The project's name in the target [default: PROJECT].")
@click.option(
    "--replace",
    is_flag=True,
    help="Replace the target project if it holds data, once the copy is written whole (a failed copy leaves it "
    "as it was). Stop the target's servers and workers first: on SQLite the project's files are swapped.",
)
@click.option(
    "--scratch-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the copy's two temporary export files go [default: the system's temporary directory].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--progress/--no-progress", default=None, help="Show progress bars on stderr [default: when it is a terminal]."
)
@click.pass_obj
def migrate(
    app: Any,
    project: str,
    target: str,
    dsn: str | None,
    copy_name: str | None,
    replace: bool,
    scratch_dir: Path | None,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Copy PROJECT between the SQLite data directory and the PostgreSQL database, then verify the copy.

    Every record is copied with its id (events, memories, citations, generations, notes, judgments, the
    trust ledger, import watermarks; not queued jobs). The copy is then read back and compared record by
    record, by exact searches of needles from the project, and by each session's projection where both
    backends render one. Differences are listed and the command exits 1. The source is never changed; a
    target project that holds data is refused unless --replace. An interrupted copy leaves the target
    project absent, empty or (with --replace) as it was: run the command again. Stop the servers and
    workers using the target project before --replace.
    """
    base = app.settings()
    source_backend = "sqlite" if target == "postgres" else "postgres"
    if dsn is None and base.storage.dsn is None:
        raise click.UsageError("name the PostgreSQL database with --dsn or [storage] dsn (OBSMEM_STORAGE__DSN)")
    show = (sys.stderr.isatty() if progress is None else progress) and not as_json
    with ExitStack() as stack:
        source = stack.enter_context(
            Obsmem(backend_settings(base, source_backend, dsn, app), background_indexing=False)
        )
        sink = stack.enter_context(Obsmem(backend_settings(base, target, dsn, app), background_indexing=False))
        report_progress = stack.enter_context(_progress_bars(show))
        report = migrate_project(
            source,
            sink,
            project,
            target_project=copy_name,
            replace=replace,
            progress=report_progress,
            scratch_dir=scratch_dir,
        )
        from obsmem.surfaces.cli_catchup import catch_up_after_write

        catch_up_after_write(sink, [report.target_project], show_progress=show)
    _print(report, as_json)
    if not report.verified:
        raise click.exceptions.Exit(MISMATCH_EXIT)


def _print(report: MigrationReport, as_json: bool) -> None:
    if as_json:
        click.echo(strict_dumps(report.to_dict(), indent=2))
        return
    click.echo(
        f"Copied {report.records:,} records of {report.project} from {report.source} to {report.target}"
        f" as {report.target_project} in {report.seconds:.1f} s."
    )
    for check, outcome in report.checks.items():
        click.echo(f"  {check}: {outcome}")
    if report.mismatches:
        click.echo(f"The copy differs from the source in {len(report.mismatches)} way(s):", err=True)
        for problem in report.mismatches:
            click.echo(f"  {problem}", err=True)
    else:
        click.echo("Verified: the copy matches the source.")
