"""``obsmem export PROJECT`` and ``obsmem restore FILE --project NEW``: a whole project out and back in.

Registered in the CLI's command table with one line each::

    "export": "obsmem.surfaces.cli_export:export",
    "restore": "obsmem.surfaces.cli_export:restore",

The format is docs/export-format.md; the work is :mod:`obsmem.exporting`. Progress bars go to stderr (when
it is a terminal, or with ``--progress``), so an export to stdout stays clean.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from obsmem.exporting import Progress, export_project, restore_project
from obsmem.json_shape import strict_dumps

_PHASES = {"export": "exporting", "verify": "verifying", "restore": "restoring"}


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[Progress | None]:
    """A tqdm bar on stderr per phase of ``(phase, done, total)`` reports; ``None`` when not ``enabled``."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def report(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            label = _PHASES.get(phase, phase)
            bar = bars[phase] = tqdm(total=total or None, unit="record", desc=label, file=sys.stderr)
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        for bar in bars.values():
            bar.close()


def _show_progress(option: bool | None) -> bool:
    return sys.stderr.isatty() if option is None else option


@contextlib.contextmanager
def _published(path: Path) -> Iterator[IO[bytes]]:
    """A file that appears at ``path`` only once complete: written beside it, synced, then renamed, so a
    failed or interrupted export never leaves a partial file under the name asked for. Readable by its
    owner only, like the project databases it copies."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    try:
        with os.fdopen(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()


_progress_option = click.option(
    "--progress/--no-progress", default=None, help="Show a progress bar on stderr [default: when it is a terminal]."
)


@click.command("export")
@click.argument("project")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="File to write [default: standard output]. It appears only once the export is complete.",
)
@_progress_option
@click.option("--json", "as_json", is_flag=True, help="Print the receipt as JSON (with --output).")
@click.pass_obj
def export(app: Any, project: str, output: Path | None, progress: bool | None, as_json: bool) -> None:
    """Write every record of PROJECT to one JSONL file (restore it with `obsmem restore`).

    Sessions, events, observations and reflections with their citations, generations and drops, the
    Observer's coverage and watermarks, the pipeline event log and model overrides, read in one snapshot,
    with every id as stored. Indexes are not written: they are rebuilt after a restore.
    """
    if as_json and output is None:
        raise click.UsageError("--json prints the receipt of an export to --output; without it the export is JSON")
    with _progress_bars(_show_progress(progress) and not as_json) as report:
        if output is None:
            export_project(app.service, project, sys.stdout.buffer, progress=report)
            sys.stdout.buffer.flush()
            return
        with _published(output) as handle:
            receipt = export_project(app.service, project, handle, progress=report)
    if as_json:
        click.echo(strict_dumps({**receipt.to_dict(), "output": str(output)}, indent=2))
        return
    click.echo(f"Exported {receipt.records:,} records of {project} to {output}.")


@click.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path))
@click.option("--project", required=True, help="The project to restore into: new, or existing and empty.")
@click.option("--json", "as_json", is_flag=True, help="Print the receipt as JSON.")
@_progress_option
@click.pass_obj
def restore(app: Any, file: Path, project: str, as_json: bool, progress: bool | None) -> None:
    """Restore FILE, written by `obsmem export`, into the new project --project.

    The whole file is checked first (format version, every record, the trailer's counts and checksum), then
    restored in one transaction: a truncated, altered or newer-format file restores nothing. Every id is
    kept; the search indexes are rebuilt from the restored records (run `obsmem index` in semantic mode).
    """
    with _progress_bars(_show_progress(progress) and not as_json) as report:
        receipt = restore_project(app.service, file, project, progress=report)
    from obsmem.surfaces.cli_catchup import catch_up_after_write

    catch_up_after_write(app.service, [project], show_progress=_show_progress(progress) and not as_json)
    if as_json:
        click.echo(strict_dumps(receipt.to_dict(), indent=2))
        return
    click.echo(f"Restored {receipt.records:,} records into {project}.")
    for kind, count in receipt.counts.items():
        if count:
            click.echo(f"  {kind:<22} {count:>10,}")
