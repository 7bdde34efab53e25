"""How the CLI shows results to people (rich tables) and to machines (JSON).

Every renderer takes the same dictionaries the JSON output prints (``SearchResult.to_dict()``, the recall
document, receipts), so a table can never show something ``--json`` does not. Text that came from users
or models is wrapped in :class:`rich.text.Text`, never parsed as rich markup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from obsmem.json_shape import strict_dumps
from obsmem.pipeline import seq_runs

RECALL_SOURCE_CHARS = 600
PIPED_WIDTH = 120


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (tests swap it), so it is built per command.

    Written to a file or a pipe without ``COLUMNS`` set, tables get 120 columns rather than rich's 80.
    """
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
    return Console(highlight=False, width=width)


def emit_json(data: Any) -> None:
    click.echo(strict_dumps(data, indent=2, ensure_ascii=False, default=str))


def clip(text: str, limit: int | None, *, one_line: bool = False) -> Text:
    """User text for a cell, cut at ``limit`` characters with "…".

    ``one_line`` flattens it to one line that is also cut, with "…", where the cell ends on screen.
    """
    if one_line:
        text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return Text(text, no_wrap=one_line, overflow="ellipsis" if one_line else "fold")


def hits_table(hits: Sequence[dict[str, Any]], *, title: str | None = None, content_chars: int | None = None) -> Table:
    """One row per memory: id, date, session, importance (``reflection`` for reflections), content."""
    table = Table(title=title, title_justify="left", show_lines=content_chars is None)
    compact = content_chars is not None
    # Ids and dates never shrink (a reader copies the id into recall); in a compact table (one line per
    # hit) long session names are cut so the content keeps its room.
    table.add_column("id", style="cyan", no_wrap=True, min_width=12)
    table.add_column("date", no_wrap=True, min_width=16)
    table.add_column("session", overflow="fold", min_width=8, max_width=24 if compact else None)
    table.add_column("importance", no_wrap=True, min_width=10)
    table.add_column("content", overflow="fold", ratio=1)
    for hit in hits:
        importance = hit.get("importance") or hit.get("kind", "")
        session, content = hit.get("session_id") or f"({hit.get('tier', '')} note)", hit["content"]
        if hit.get("kind") == "note" and not hit.get("trusted"):
            importance = "untrusted note"
        if hit.get("kind") == "event":  # where it sits and who said what, in place of an importance
            session, importance = f"{session} #{hit['seq']}", f"{hit['role']} {hit['type']}"
            if "tool_name" in hit:
                content = " ".join(part for part in (content, _tool_text(hit)) if part)
        table.add_row(
            hit["id"],
            hit["date"],
            clip(session, None, one_line=compact),
            importance,
            clip(content, content_chars, one_line=compact),
        )
    return table


def _tool_text(hit: dict[str, Any]) -> str:
    """``grep {"pattern": "x"}``: a tool call's name and arguments, as one line of text."""
    args = hit.get("tool_args")
    return hit["tool_name"] + ("" if args is None else " " + strict_dumps(args, ensure_ascii=False))


def render_search(console: Console, result: dict[str, Any], *, content_chars: int | None = None) -> None:
    hits = result["hits"]
    if result.get("nothing_close"):
        console.print(result["note"])
        return
    if not hits:
        console.print(
            "No memory matched. No hits does not prove it never happened: memory can lag or leave details out."
        )
        return
    noun = "hit" if len(hits) == 1 else "hits"
    order = "newest first" if result["mode"] == "exact" else "most relevant first"
    console.print(
        hits_table(hits, title=f"{len(hits)} {noun} ({result['mode']} mode, {order})", content_chars=content_chars)
    )
    if result.get("partial"):
        console.print("The index is still being built: these are the matches among what is indexed so far.")
    if result["truncated"]:
        console.print("More memories matched: narrow the query or the dates (--after/--before), or raise --limit.")


def _memory_header(memory: dict[str, Any]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("id", Text(memory["id"], style="cyan"))
    grid.add_row("memory_id", memory["memory_id"])
    grid.add_row("kind", memory["kind"])
    grid.add_row("session", Text(memory["session_id"]))
    grid.add_row("date", memory["date"])
    if memory.get("importance"):
        grid.add_row("importance", memory["importance"] + "  (set when recorded, not a match score)")
    grid.add_row("recorded", memory.get("created_at", ""))
    grid.add_row("content", Text(memory["content"]))
    return grid


def _event_cell(event: dict[str, Any]) -> Text:
    text = event.get("content", "")
    if event.get("tool_args") is not None:
        args = strict_dumps(event["tool_args"], ensure_ascii=False)
        text = f"{text}\nargs: {args}" if text else f"args: {args}"
    return clip(text, RECALL_SOURCE_CHARS)


def sources_table(events: Sequence[dict[str, Any]], *, session_id: str, title: str | None = None) -> Table:
    """Cited events; a session column only when some event is from another session than ``session_id``."""
    other_sessions = any(event["session_id"] != session_id for event in events)
    table = Table(title=title, title_justify="left", show_lines=True)
    if other_sessions:
        table.add_column("session", overflow="fold")
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("tool", overflow="fold")
    table.add_column("content", overflow="fold", ratio=1)
    for event in events:
        cells = [
            str(event["seq"]),
            event["role"],
            event["type"],
            Text(event.get("tool_name") or ""),
            _event_cell(event),
        ]
        table.add_row(*([Text(event["session_id"])] if other_sessions else []), *cells)
    return table


def render_recall(console: Console, recalled: dict[str, Any]) -> None:
    if "event" in recalled:
        render_event_recall(console, recalled)
        return
    if recalled["memory"]["kind"] == "note":
        render_note_recall(console, recalled)
        return
    memory = recalled["memory"]
    console.print(_memory_header(memory))
    if memory["kind"] == "observation":
        events = recalled["sources"]
        title = f"Source events ({len(events)})"
        console.print(sources_table(events, session_id=memory["session_id"], title=title))
    else:
        supporting = recalled["supporting"]
        console.print(hits_table(supporting, title=f"Supporting observations ({len(supporting)})"))
    console.print("Verify the current state of the repository before acting on an old decision.", style="dim")


def render_note_recall(console: Console, recalled: dict[str, Any]) -> None:
    """A note: its standing (tier, status, trusted), then its history; a note cites no events."""
    note = recalled["memory"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("id", Text(note["id"], style="cyan"))
    grid.add_row("kind", "note")
    grid.add_row("tier", note["tier"])
    grid.add_row("status", f"{note['status']} (trusted: {str(note['trusted']).lower()})")
    grid.add_row("date", note["date"])
    for name in ("supersedes", "superseded_by"):
        if note.get(name):
            grid.add_row(name.replace("_", " "), note[name])
    if note["situation"]:
        grid.add_row("situation", Text(note["situation"]))
    grid.add_row("content", Text(note["content"]))
    console.print(grid)
    history = Table(title=f"History ({len(recalled['history'])})", title_justify="left")
    for column in ("entry", "at", "judgment", "p", "decision", "outcome"):
        history.add_column(column, overflow="fold")
    for step in recalled["history"]:
        p = "" if step["p"] is None else f"{step['p']:.2f}"
        outcome = "" if step["outcome"] is None else str(step["outcome"]).lower()
        cells = (step["entry"], step["at"], step["judgment_id"] or "", p, step["decision"] or "", outcome)
        history.add_row(*(Text(str(cell)) for cell in cells))
    console.print(history)
    console.print(Text(recalled["provenance"]), style="dim")


def render_event_recall(console: Console, recalled: dict[str, Any]) -> None:
    """A conversation event, the events around it in its session and the observations citing it."""
    event = recalled["event"]
    session = event["session_id"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("id", Text(event["id"], style="cyan"))
    grid.add_row("event_id", event["event_id"])
    grid.add_row("kind", "event")
    grid.add_row("session", Text(f"{session} #{event['seq']}"))
    grid.add_row("said by", f"{event['role']} ({event['type']})")
    grid.add_row("at", event["created_at"])
    if "tool_name" in event:
        grid.add_row("tool", Text(_tool_text(event)))
    grid.add_row("content", Text(event["content"]))
    console.print(grid)
    around = [*recalled["before"], *recalled["after"]]
    console.print(sources_table(around, session_id=session, title=f"Events around it ({len(around)})"))
    cited = recalled["cited_by"]
    console.print(hits_table(cited, title=f"Observations citing it ({len(cited)})"))


def seq_list(seqs: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"#3-5, #9"``: event numbers, short."""
    return ", ".join(f"#{start}" if start == end else f"#{start}-{end}" for start, end in seq_runs(seqs))


def _size(count: int) -> str:
    """Bytes in at most five characters: ``812B``, ``76K``, ``1.2M``, ``14G``."""
    units = ("B", "K", "M", "G", "T")
    value, unit = float(count), 0
    while value >= 1000 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    return f"{value:.1f}{units[unit]}" if unit and value < 10 else f"{value:.0f}{units[unit]}"


def status_table(projects: Sequence[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("project", overflow="fold")
    for name in ("sessions", "events", "observations", "reflections"):
        table.add_column(name, justify="right")
    table.add_column("last activity", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    for row in projects:
        last = row["last_activity"]
        table.add_row(
            row["project"],
            f"{row['sessions']:,}",
            f"{row['events']:,}",
            f"{row['observations']:,}",
            f"{row['reflections']:,}",
            last[:16].replace("T", " ") if last else "-",
            _size(row["database_bytes"] + row.get("wal_bytes", 0)),  # what the project takes on disk
        )
    return table


def render_import_receipt(console: Console, receipt: dict[str, Any]) -> None:
    table = Table(
        title=f"Events: {receipt['appended']} appended, {receipt['duplicates']} already stored",
        title_justify="left",
    )
    table.add_column("session", overflow="fold")
    table.add_column("appended", justify="right")
    table.add_column("duplicates", justify="right")
    table.add_column("last seq", justify="right")
    for session, totals in receipt["sessions"].items():
        table.add_row(Text(session), str(totals["appended"]), str(totals["duplicates"]), str(totals["last_seq"]))
    console.print(table)
    if receipt["problem_lines"]:
        listing = Table(title="Lines stored with a defect", title_justify="left")
        listing.add_column("line", justify="right")
        listing.add_column("reason", style="yellow", no_wrap=True)
        listing.add_column("detail", overflow="fold", ratio=1)
        for problem in receipt["problem_lines"]:
            listing.add_row(str(problem["line"]), problem["reason"], Text(problem["detail"]))
        console.print(listing)


def render_write_receipt(console: Console, receipt: dict[str, Any]) -> None:
    added, duplicates, rejected = receipt["added"], receipt["duplicates"], receipt["rejected"]
    console.print(f"Observations: {len(added)} added, {len(duplicates)} already stored, {len(rejected)} rejected")
    if added:
        table = Table(title="Added", title_justify="left")
        table.add_column("index", justify="right")
        table.add_column("id", style="cyan")
        for entry in added:
            table.add_row(str(entry["index"]), entry["id"])
        console.print(table)
    if rejected:
        table = Table(title="Rejected (index = line number - 1)", title_justify="left")
        table.add_column("index", justify="right")
        table.add_column("code", style="red", no_wrap=True)
        table.add_column("message", overflow="fold", ratio=1)
        for entry in rejected:
            table.add_row(str(entry["index"]), entry["code"], Text(entry["message"]))
        console.print(table)


@contextmanager
def file_progress(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A progress bar on stderr for ``(phase, done, total)`` reports; ``None`` when not ``enabled``.

    Phase ``read`` counts bytes and ``store`` counts events (see :data:`obsmem.importing.ImportProgress`).
    """
    if not enabled:
        yield None
        return
    tasks: dict[str, Any] = {}
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.fields[amount]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:

        def report(phase: str, done: int, total: int) -> None:
            amount = f"{_size(done)} / {_size(total)}" if phase == "read" else f"{done:,} / {total:,} events"
            if phase not in tasks:
                label = "reading" if phase == "read" else "storing"
                tasks[phase] = bar.add_task(label, total=total, amount=amount)
            bar.update(tasks[phase], completed=done, total=total, amount=amount)

        yield report
