"""``obsmem notes``, ``judgments``, ``judge resolve``, ``groom`` and ``trust calibrate``: notes that earn trust.

The CLI is the local account: its user tier is the local user's (docs/trust.md). Each command prints a
table, or with ``--json`` the same JSON as the HTTP route it mirrors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table

from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import App, json_option, pass_app


def _notes_table(notes: Sequence[dict[str, Any]]) -> Table:
    table = Table(title_justify="left", show_lines=True)
    for column in ("id", "tier", "status", "date", "situation", "content"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "date"))
    for note in notes:
        # Cells are Text, never markup: a note's words (``[/]``, ``[bold]``) are printed as written.
        cells = (note["id"], note["tier"], note["status"], note["date"], note["situation"], note["content"])
        table.add_row(*(render.clip(str(cell), None) for cell in cells))
    return table


def _judgments_table(judgments: Sequence[dict[str, Any]]) -> Table:
    table = Table(title_justify="left")
    for column in ("judgment", "note", "p", "decision", "state", "outcome", "error"):
        table.add_column(column, overflow="fold")
    for item in judgments:
        p = "" if item["p"] is None else f"{item['p']:.2f}"
        outcome = "" if item["outcome"] is None else str(item["outcome"]).lower()
        cells = (item["judgment_id"], item["note_id"], p, item["decision"], item["state"], outcome, item["error"] or "")
        table.add_row(*(render.clip(str(cell), None) for cell in cells))  # an error's message is text too
    return table


def _say_truncated(result: dict[str, Any], what: str) -> None:
    if result["truncated"]:
        click.echo(f"More {what} exist than listed (the newest {len(result[what])}): narrow with a filter.", err=True)


def _emit_write(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.emit_json(result)
        return
    standing = "already stored, " if result.get("duplicate") else ""
    click.echo(f"{result['id']}: {standing}{result['status']} (trusted: false)")


@click.group("notes")
def notes() -> None:
    """Notes written by agents or people: list, save, update, forget.

    Every write is an untrusted candidate; a note becomes trusted when a judgment about it resolves true and
    a groom pass promotes it (docs/trust.md).
    """


@notes.command("list")
@click.argument("project")
@click.option(
    "--status", type=click.Choice(["candidate", "trusted", "superseded", "forgotten"]), default=None, help="Only these."
)
@click.option("--limit", type=click.IntRange(1, 500), default=500, show_default=True, help="Most notes to list.")
@json_option
@pass_app
def list_notes(app: App, project: str, status: str | None, limit: int, as_json: bool) -> None:
    """Notes of PROJECT and of your user tier, newest first."""
    result = app.service.notes(project, status=status, limit=limit).to_dict()
    if as_json:
        render.emit_json(result)
    elif not result["notes"]:
        click.echo("No notes.", err=True)
    else:
        render.stdout().print(_notes_table(result["notes"]))
        _say_truncated(result, "notes")


@notes.command("save")
@click.argument("project")
@click.argument("content")
@click.option("--situation", default=None, help="When the note applies.")
@click.option("--tier", type=click.Choice(["project", "user"]), default=None, help="project [default] or user.")
@json_option
@pass_app
def save_note(app: App, project: str, content: str, situation: str | None, tier: str | None, as_json: bool) -> None:
    """Save CONTENT as an untrusted candidate note of PROJECT (or of your user tier)."""
    _emit_write(app.service.save_note(project, content, situation=situation, tier=tier).to_dict(), as_json)


@notes.command("update")
@click.argument("project")
@click.argument("note_id", metavar="ID")
@click.argument("content")
@click.option("--situation", default=None, help="When the note applies.")
@json_option
@pass_app
def update_note(app: App, project: str, note_id: str, content: str, situation: str | None, as_json: bool) -> None:
    """Save CONTENT as a candidate that supersedes note ID once it is promoted."""
    _emit_write(app.service.update_note(project, note_id, content, situation=situation).to_dict(), as_json)


@notes.command("forget")
@click.argument("project")
@click.argument("note_id", metavar="ID")
@json_option
@pass_app
def forget_note(app: App, project: str, note_id: str, as_json: bool) -> None:
    """Forget note ID: it leaves every search at once."""
    note = app.service.forget_note(project, note_id)
    if as_json:
        render.emit_json({"id": note.id, "memory_id": note.note_id, "status": note.status, "trusted": False})
    else:
        click.echo(f"{note.id}: forgotten")


@click.command("judgments")
@click.argument("project")
@click.option("--state", type=click.Choice(["open", "escalated", "resolved"]), default=None, help="Only these.")
@click.option("--limit", type=click.IntRange(1, 500), default=500, show_default=True, help="Most judgments to list.")
@json_option
@pass_app
def judgments(app: App, project: str, state: str | None, limit: int, as_json: bool) -> None:
    """Judgments of PROJECT's candidate notes (escalated: waiting for you)."""
    result = app.service.judgments(project, state=state, limit=limit).to_dict()
    if as_json:
        render.emit_json(result)
    elif not result["judgments"]:
        click.echo("No judgments.", err=True)
    else:
        render.stdout().print(_judgments_table(result["judgments"]))
        _say_truncated(result, "judgments")


@click.group("judge")
def judge() -> None:
    """Answer judgments yourself (the human judge)."""


@judge.command("resolve")
@click.argument("project")
@click.argument("judgment_id", metavar="JUDGMENT_ID")
@click.option(
    "--outcome",
    type=click.Choice(["true", "false"]),
    required=True,
    help="true: the note was relevant (groom will promote it); false: it was not.",
)
@json_option
@pass_app
def resolve(app: App, project: str, judgment_id: str, outcome: str, as_json: bool) -> None:
    """Resolve JUDGMENT_ID of PROJECT with an outcome."""
    result = app.service.resolve_judgment(project, judgment_id, outcome == "true").to_dict()
    if as_json:
        render.emit_json(result)
    else:
        click.echo(f"{result['judgment_id']}: resolved {str(result['outcome']).lower()}")


@click.command("groom")
@click.argument("project")
@json_option
@pass_app
def groom(app: App, project: str, as_json: bool) -> None:
    """Promote PROJECT's candidates whose judgments resolved true (at most 50 per pass)."""
    result = app.service.groom(project).to_dict()
    if as_json:
        render.emit_json(result)
        return
    for item in result["promoted"]:
        replaced = f", superseding {item['superseded']}" if item["superseded"] else ""
        click.echo(f"promoted {item['id']} ({item['tier']}){replaced}")
    click.echo(f"{len(result['promoted'])} promoted, {result['escalated_count']} judgments waiting for a person")


@click.group("trust")
def trust() -> None:
    """How far the judge's confidence can be trusted."""


@trust.command("calibrate")
@click.argument("project")
@click.option("--tier", type=click.Choice(["project", "user"]), default=None, help="project [default] or user.")
@json_option
@pass_app
def calibrate(app: App, project: str, tier: str | None, as_json: bool) -> None:
    """Reliability per p bucket, precision of inject at the threshold, and a threshold meeting the target."""
    report = app.service.calibrate_trust(project, tier=tier).to_dict()
    if as_json:
        render.emit_json(report)
        return
    table = Table(title=f"{report['sample']} resolved judgments", title_justify="left")
    for column in ("p", "judgments", "resolved true", "rate"):
        table.add_column(column, justify="right")
    for bucket in report["buckets"]:
        rate = "" if bucket["rate"] is None else f"{bucket['rate']:.2f}"
        table.add_row(f"{bucket['p_from']:.1f}-{bucket['p_to']:.1f}", str(bucket["count"]), str(bucket["true"]), rate)
    render.stdout().print(table)
    precision = report["precision_at_threshold"]
    shown = "n/a" if precision is None else f"{precision:.2f}"
    click.echo(
        f"inject at p >= {report['threshold']}: precision {shown} over {report['injected_at_threshold']} judgments"
    )
    suggested = report["suggested_threshold"]
    target = report["target_precision"]
    click.echo(
        f"threshold for precision >= {target}: "
        + ("none in this sample" if suggested is None else f"{suggested:.2f}")
        + f" (sample {report['sample']})"
    )
