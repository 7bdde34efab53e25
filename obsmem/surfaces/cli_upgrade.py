"""``obsmem upgrade``: apply the schema migrations every project and user tier lacks, one after another.

Registered in the CLI's command table with one line::

    "upgrade": "obsmem.surfaces.cli_upgrade:upgrade",

A project's schema is migrated the first time a new version opens it, inside that first write and under
the project's writer lock: on a large project a migration that builds an index (PostgreSQL's
``p0007_short_needles``) holds the lock for minutes, and other writers get ``storage_busy``. Running this
command in a maintenance window, with the servers and workers stopped, does that work up front, on either
backend. Opening a project is what migrates it (``Obsmem.database``), so the command adds no migration
path of its own; the user tiers of notes (a database or schema per owner, with the projects' migrations)
are opened the same way (``Obsmem.upgrade_user_tier``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from obsmem.surfaces.cli import json_option
from obsmem.surfaces.cli_each_project import each_project, exit_if_failed
from obsmem.surfaces.cli_render import emit_json


@click.command("upgrade")
@click.option(
    "--progress/--no-progress", default=None, help="Show a progress bar on stderr [default: when it is a terminal]."
)
@json_option
@click.pass_obj
def upgrade(app: Any, progress: bool | None, as_json: bool) -> None:
    """Bring every project's database schema, and every user tier's, up to this version of obsmem.

    Stop the servers and workers first: each project is migrated under its writer lock, which a large
    project may hold for minutes. Projects already up to date are only opened. Prints one line per project
    and per user tier with the seconds it took (with --json, one object listing both and the failures).
    """
    service = app.service
    names = service.project_names()
    owners = service.user_tier_names()
    show = sys.stderr.isatty() if progress is None else progress
    from tqdm import tqdm

    with tqdm(
        total=len(names) + len(owners), unit="schema", desc="upgrading", file=sys.stderr, disable=not show
    ) as bar:

        def upgrade_project(name: str) -> dict[str, Any]:
            started = time.monotonic()
            try:
                service.database(name)
            finally:
                service.release(name)
                bar.update(1)
            seconds = time.monotonic() - started
            if not as_json:
                click.echo(f"{name}: up to date ({seconds:.1f} s)")
            return {"project": name, "seconds": round(seconds, 3)}

        def upgrade_tier(owner: str) -> dict[str, Any]:
            started = time.monotonic()
            try:
                service.upgrade_user_tier(owner)
            finally:
                bar.update(1)
            seconds = time.monotonic() - started
            if not as_json:
                click.echo(f"user tier {owner}: up to date ({seconds:.1f} s)")
            return {"owner": owner, "seconds": round(seconds, 3)}

        upgraded, failed_projects = each_project(names, upgrade_project)
        if not as_json:
            for failure in failed_projects:
                click.echo(failure.line(), err=True)
        tiers, failed_tiers = each_project(owners, upgrade_tier)
        if not as_json:
            for failure in failed_tiers:
                click.echo(f"user tier {failure.line()}", err=True)
    if as_json:
        emit_json(
            {
                "projects": upgraded,
                "user_tiers": tiers,
                "failed": [failure.to_dict() for failure in failed_projects],
                "failed_user_tiers": [failure.to_dict("owner") for failure in failed_tiers],
            }
        )
    else:
        click.echo(f"{len(upgraded)} project(s) up to date.")
        click.echo(f"{len(tiers)} user tier(s) up to date.")
        if failed_projects or failed_tiers:
            failed = ", ".join([f.name for f in failed_projects] + [f"user tier {f.name}" for f in failed_tiers])
            click.echo(f"not upgraded: {failed}; see the errors above", err=True)
    exit_if_failed(failed_projects + failed_tiers)
