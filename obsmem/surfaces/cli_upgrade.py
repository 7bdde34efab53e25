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


@click.command("upgrade")
@click.option(
    "--progress/--no-progress", default=None, help="Show a progress bar on stderr [default: when it is a terminal]."
)
@click.pass_obj
def upgrade(app: Any, progress: bool | None) -> None:
    """Bring every project's database schema, and every user tier's, up to this version of obsmem.

    Stop the servers and workers first: each project is migrated under its writer lock, which a large
    project may hold for minutes. Projects already up to date are only opened. Prints one line per project
    and per user tier with the seconds it took.
    """
    service = app.service
    names = service.project_names()
    owners = service.user_tier_names()
    show = sys.stderr.isatty() if progress is None else progress
    from tqdm import tqdm

    with tqdm(
        total=len(names) + len(owners), unit="schema", desc="upgrading", file=sys.stderr, disable=not show
    ) as bar:
        for name in names:
            started = time.monotonic()
            service.database(name)
            service.release(name)
            bar.update(1)
            click.echo(f"{name}: up to date ({time.monotonic() - started:.1f} s)")
        for owner in owners:
            started = time.monotonic()
            service.upgrade_user_tier(owner)
            bar.update(1)
            click.echo(f"user tier {owner}: up to date ({time.monotonic() - started:.1f} s)")
    click.echo(f"{len(names)} project(s) up to date.")
    click.echo(f"{len(owners)} user tier(s) up to date.")
