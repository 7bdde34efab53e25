"""The ``obsmem`` command line.

    obsmem [--data-dir DIR] [--config FILE] COMMAND [ARGS]

Commands that print data print tables for people, or JSON with ``--json``. A mistake in the input (a bad
date, id or project name) prints ``error: <code>: <message>`` on stderr and exits 2; a well-formed request
that fails (unknown project, seq conflict) prints the same and exits 1; a storage fault (disk full,
read-only, I/O error, lock timeout, damaged file) prints the same and exits 74. Never a traceback. The
agents' hook command (``obsmem hook``) exits 1 on every failure, usage mistakes included (see
:data:`HOOK_COMMANDS`).

Adding a command
    Write a ``click.Command`` in its own module and add one line to :data:`COMMANDS`. Take the settings and
    the service with :func:`pass_app`, add ``--json`` with :func:`json_option` and draw output with
    :mod:`obsmem.surfaces.cli_render`; raise :class:`~obsmem.errors.ObsmemError` for anything the user
    got wrong. A command's module is imported only when that command runs (or ``--help`` lists it), so a
    heavy import in one command never slows the others down.
"""

from __future__ import annotations

import errno
import importlib
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import apsw
import click

from obsmem.app import Obsmem
from obsmem.errors import AmbiguousId, ObsmemError, StorageError, ValidationFailed
from obsmem.redaction import redact_text
from obsmem.retrieval import MODES, SCOPES
from obsmem.settings import CONFIG_ENV, DATA_DIR_ENV, Settings, load_settings
from obsmem.storage import storage_fault
from obsmem.surfaces import cli_render as render
from obsmem.validation import session_id as check_session_id
from obsmem.version import __version__

USAGE_EXIT = 2
RUNTIME_EXIT = 1
STORAGE_EXIT = 74  # EX_IOERR of sysexits.h: scripts can tell "retry when the disk is fixed" from a bad request
# Commands the agents run as hooks: every failure of theirs, a usage mistake or a bad --data-dir included,
# exits 1, because Claude Code and Gemini CLI read exit status 2 of a hook as "block what the agent does".
HOOK_COMMANDS = frozenset({"hook"})

# Every command: name -> "module:attribute" of its click.Command. One line per command.
COMMANDS: dict[str, str] = {
    "serve": "obsmem.surfaces.cli:serve",
    "ingest": "obsmem.surfaces.cli:ingest",
    "import": "obsmem.surfaces.cli_import:import_command",
    "hook": "obsmem.surfaces.cli_import:hook",
    "search": "obsmem.surfaces.cli:search",
    "recall": "obsmem.surfaces.cli:recall",
    "status": "obsmem.surfaces.cli_pipeline:status",
    "view": "obsmem.surfaces.cli_pipeline:view",
    "observe": "obsmem.surfaces.cli_pipeline:observe",
    "reflect": "obsmem.surfaces.cli_pipeline:reflect",
    "models": "obsmem.surfaces.cli_pipeline:models",
    "events": "obsmem.surfaces.cli_pipeline:events",
    "worker": "obsmem.surfaces.cli_pipeline:worker",
    "demo": "obsmem.surfaces.cli_demo:demo",
    "eval": "obsmem.surfaces.cli_eval:eval_group",
    "mcp": "obsmem.surfaces.cli:mcp",
    "index": "obsmem.surfaces.cli_index:index",
    "encoder": "obsmem.surfaces.cli_encoder:encoder",
    "forget": "obsmem.surfaces.cli:forget",
    "export": "obsmem.surfaces.cli_export:export",
    "restore": "obsmem.surfaces.cli_export:restore",
    "migrate": "obsmem.surfaces.cli_migrate:migrate",
    "upgrade": "obsmem.surfaces.cli_upgrade:upgrade",
    "notes": "obsmem.surfaces.cli_notes:notes",
    "judgments": "obsmem.surfaces.cli_notes:judgments",
    "judge": "obsmem.surfaces.cli_notes:judge",
    "groom": "obsmem.surfaces.cli_notes:groom",
    "trust": "obsmem.surfaces.cli_notes:trust",
}


# How the CLI spells the names an error message marks with errors.interface_name (HTTP's and the tools'
# names): the flag every command that takes a session has, and the command that searches.
CLI_NAMES = {"session_id": "--session", "memory_search": "search"}


def error_line(error: ObsmemError) -> str:
    """``error: <code>: <message>``, the message naming what to pass as the CLI takes it."""
    return f"error: {error.code}: {error.message_for(CLI_NAMES)}"


def exit_code(error: ObsmemError) -> int:
    """2 when the input itself was wrong, 74 when the storage failed (disk full, read-only, I/O error, lock
    timeout, damaged file), 1 when a well-formed request could not be done for another reason."""
    if isinstance(error, (ValidationFailed, AmbiguousId)):
        return USAGE_EXIT
    return STORAGE_EXIT if isinstance(error, StorageError) else RUNTIME_EXIT


class App:
    """What every command shares: where settings come from, and the service built from them (once)."""

    def __init__(self, config: Path | None, data_dir: Path | None) -> None:
        self.config = config
        self.data_dir = data_dir
        self._service: Obsmem | None = None

    def settings(self, **overrides: Any) -> Settings:
        """Flags (``overrides``) over ``OBSMEM_*`` variables over the settings file over the defaults."""
        return load_settings(self.config, data_dir=self.data_dir, **overrides)

    @property
    def service(self) -> Obsmem:
        if self._service is None:
            # One-shot commands never start the background indexer: a search must not load the model
            # to index. `serve`, `worker` and `index` build their own services.
            self._service = Obsmem(self.settings(), background_indexing=False)
        return self._service

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None


pass_app = click.make_pass_decorator(App)
F = TypeVar("F", bound=Callable[..., Any])


class FiniteFloatRange(click.FloatRange):
    """click's float range without ``nan`` and ``inf``: click lets NaN through any range (every comparison
    with it is false) and ``inf`` through an open one, and either then breaks a timer or a redraw rate."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail("is not a finite number", param, ctx)
        return number


def json_option(function: F) -> F:
    """``--json``: print the result as JSON (the same fields the HTTP API returns) instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(function)


def session_option(help_text: str) -> Callable[[F], F]:
    """``--session SESSION``, checked as it is read, so a bad value is refused naming the flag (an error the
    service raised would name its ``session_id``)."""

    def checked(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        return None if value is None else check_session_id(value, field="--session")

    return click.option("--session", "session_id", metavar="SESSION", default=None, callback=checked, help=help_text)


class CommandGroup(click.Group):
    """Commands looked up in :data:`COMMANDS` when needed, and obsmem's errors turned into exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = spec.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{spec} is not a click command")
        return command

    def main(  # type: ignore[override]  # click's overloads (standalone: never returns) as one signature
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = sys.argv[1:] if args is None else list(args)
        if standalone_mode and self._command_named(argv) in HOOK_COMMANDS:
            self._main_exiting_1_on_failure(argv, prog_name, complete_var, **extra)
        return super().main(argv, prog_name, complete_var, standalone_mode, **extra)

    def _command_named(self, argv: list[str]) -> str | None:
        """The command ``argv`` names, found by the group's own parser before any option value is checked.

        When the group's options are malformed (an unknown option, a value left out) or what the parser takes
        for the command is none, the first command name in what stands before the command is taken: a
        token that is an option, or may be an option's value, is passed over, so ``obsmem --bogus hook``
        and ``obsmem --data-dir hook claude-code`` (an empty ``$DIR``) run the hook, whose every failure
        exits 1, while ``obsmem serach p hook`` names no command. None when no command is named.
        """
        # The group's context settings too: click caches the help option on the command the first time a
        # context asks for it, so a context without them would leave `obsmem -h` unknown.
        ctx = click.Context(self, info_name="obsmem", resilient_parsing=True, **self.context_settings)
        try:
            _, rest, _ = self.make_parser(ctx).parse_args(args=list(argv))
        except click.UsageError:
            rest = []
        if rest and rest[0] in COMMANDS:
            return rest[0]
        after_option = False
        for token in argv:
            if token in COMMANDS:
                return token
            if token.startswith("-"):
                after_option = "=" not in token
            elif after_option:
                after_option = False  # the option's value, perhaps
            else:
                break  # a word that is no command and no option's value: a misspelt command
        return rest[0] if rest else None

    def _main_exiting_1_on_failure(
        self, argv: list[str], prog_name: str | None, complete_var: str | None, **extra: Any
    ) -> NoReturn:
        """Run a hook command: its usage errors and the group's (a bad --data-dir or --config, from a flag or
        the environment) print one ``error:`` line instead of click's usage text, and any failure exits 1."""
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            # click's message quotes the mistaken word, which may be anything typed: a secret is cut out.
            click.echo(f"error: invalid_request: {redact_text(' '.join(exc.format_message().split()))}", err=True)
            sys.exit(RUNTIME_EXIT)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(RUNTIME_EXIT)
        sys.exit(RUNTIME_EXIT if isinstance(code, int) and code != 0 else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ObsmemError as exc:
            click.echo(error_line(exc), err=True)
            ctx.exit(exit_code(exc))
        except apsw.Error as exc:
            fault = storage_fault(exc)
            if fault is None:
                raise
            click.echo(f"error: {fault.code}: {fault.message}", err=True)
            ctx.exit(STORAGE_EXIT)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # output piped into `head` and the like: click handles it
                raise
            fault = storage_fault(exc)
            if fault is not None:
                click.echo(f"error: {fault.code}: {fault.message}", err=True)
                ctx.exit(STORAGE_EXIT)
            where = f": {exc.filename}" if exc.filename else ""
            click.echo(f"error: io_error: {exc.strerror or exc}{where}", err=True)
            ctx.exit(RUNTIME_EXIT)


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=DATA_DIR_ENV,
    show_envvar=True,
    help="Directory holding the project databases [default: $XDG_DATA_HOME/obsmem or ~/.local/share/obsmem].",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    show_envvar=True,
    help="Settings file (TOML) [default: obsmem.toml in the data directory, if present].",
)
@click.version_option(__version__, prog_name="obsmem")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, config: Path | None) -> None:
    """obsmem: observational memory for AI agents.

    Ingest conversations and observations, search memories (exact substring or hybrid), and recall a
    memory with the events it came from.
    """
    app = App(config, data_dir)
    ctx.obj = app
    ctx.call_on_close(app.close)


# -- serve and mcp ------------------------------------------------------------------------------------------


@click.command()
@click.option("--host", default=None, help="Interface to bind [default: server.host, 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="TCP port [default: server.port, 8765].")
@pass_app
def serve(app: App, host: str | None, port: int | None) -> None:
    """Run the HTTP API (and the MCP endpoint under /mcp) until interrupted.

    Without API keys in the settings it binds to loopback only.
    """
    flags = {name: value for name, value in (("host", host), ("port", port)) if value is not None}
    from obsmem.surfaces.http import serve as run_server

    run_server(app.settings(server=flags))


@click.command()
@click.argument("project")
@session_option(
    "The agent's current session: recall looks only there unless a call passes session_id [default: the whole project]."
)
@pass_app
def mcp(app: App, project: str, session_id: str | None) -> None:
    """Serve the memory_search, recall and memory tools for PROJECT over MCP on stdin/stdout.

    Point an MCP client at `obsmem mcp PROJECT`; nothing but the protocol is written to stdout.
    """
    from obsmem.surfaces.mcp_server import run_stdio

    run_stdio(app.service, project, session_id=session_id)


# -- ingest -------------------------------------------------------------------------------------------------

_existing_file = click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)


@click.command()
@click.argument("project")
@click.argument("file", required=False, type=_existing_file)
@session_option("Session for lines of FILE that carry no session_id (chat messages usually do not).")
@click.option(
    "--observations",
    "observations_file",
    type=_existing_file,
    default=None,
    help="JSONL file of observations to write, one per line (after FILE's events, when both are given).",
)
@json_option
@pass_app
def ingest(
    app: App,
    project: str,
    file: Path | None,
    session_id: str | None,
    observations_file: Path | None,
    as_json: bool,
) -> None:
    """Store events from FILE, and/or observations from --observations FILE, in PROJECT.

    FILE is JSONL: obsmem events ({"role", "type", "content", ...}) or OpenAI-style chat messages
    ({"role", "content", "tool_calls", "tool_call_id"}). Importing the same file again stores nothing
    new. The project is created on first write. Exits 1 if any observation was rejected.
    """
    if file is None and observations_file is None:
        raise click.UsageError("give a FILE of events, --observations FILE, or both")
    if session_id is not None and file is None:
        raise click.UsageError("--session applies to the events FILE")
    console = render.stdout()
    result: dict[str, Any] = {}
    rejected = 0
    show_progress = sys.stderr.isatty()
    if file is not None:
        with render.file_progress(show_progress) as progress:
            events = app.service.import_jsonl(project, file, session_id, progress=progress)
        from obsmem.surfaces.cli_catchup import catch_up_after_write

        catch_up_after_write(app.service, [project], show_progress=show_progress)
        result["events"] = events.to_dict()
        if not as_json:
            render.render_import_receipt(console, result["events"])
    if observations_file is not None:
        with render.file_progress(show_progress) as progress:
            written = app.service.import_observations(project, observations_file, progress=progress)
        result["observations"] = written.to_dict()
        rejected = len(written.rejected)
        if not as_json:
            render.render_write_receipt(console, result["observations"])
    if as_json:
        render.emit_json(result)
    if rejected:
        click.echo(f"{rejected} observation(s) rejected; see the receipt", err=True)
        raise click.exceptions.Exit(RUNTIME_EXIT)


# -- search and recall ---------------------------------------------------------------------------------------


class ModeOption(click.Option):
    """``--mode`` whose help names the default of the loaded settings (``hybrid`` when ``[semantic]`` is on),
    read when the help is drawn, so ``obsmem --config FILE search --help`` tells the truth for FILE."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        app = ctx.find_object(App)
        if record is None or app is None:
            return record
        try:
            settings = app.settings()
        except Exception:  # settings that do not load: the error belongs to the command, not its help
            return record
        if settings.semantic_enabled:
            default = "hybrid ([semantic] is on)"
        elif settings.semantic is not None:
            default = "exact ([semantic] enabled = false)"
        else:
            default = "exact (no [semantic] section)"
        return record[0], f"Search mode [default: {default}]."


@click.command()
@click.argument("project")
@click.argument("query")
@click.option("--after", default=None, metavar="DATE", help="Only memories dated on or after: YYYY-MM-DD [HH:MM].")
@click.option("--before", default=None, metavar="DATE", help="Only memories dated on or before: YYYY-MM-DD [HH:MM].")
@click.option("--limit", type=int, default=None, help="Most hits to return [default: 20, at most 50].")
@click.option(
    "--mode",
    cls=ModeOption,
    type=click.Choice(MODES),
    default=None,
    help="Search mode [default: hybrid when [semantic] is configured, else exact].",
)
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default=None,
    help="What to search: memories (observations and reflections), conversation (the events themselves) "
    "or all [default: memories].",
)
@session_option("Search only this session [default: every session of the project].")
@click.option(
    "--trust",
    type=click.Choice(["trusted", "all"]),
    default=None,
    help="trusted [default]: memories and trusted notes; all: candidate notes too, marked untrusted.",
)
@json_option
@pass_app
def search(
    app: App,
    project: str,
    query: str,
    after: str | None,
    before: str | None,
    limit: int | None,
    mode: str | None,
    scope: str | None,
    session_id: str | None,
    trust: str | None,
    as_json: bool,
) -> None:
    """Find memories of PROJECT that contain QUERY.

    Exact mode matches QUERY as one literal substring (a phrase stays a phrase), ignoring ASCII case,
    newest first. --scope conversation searches what was said (event content and tool arguments)
    instead, and --scope all both.
    """
    result = app.service.search(
        project,
        query,
        after=after,
        before=before,
        limit=limit,
        mode=mode,
        session_id=session_id,
        scope=scope,
        trust=trust,
    ).to_dict()
    if as_json:
        render.emit_json(result)
    else:
        render.render_search(render.stdout(), result)


@click.command()
@click.argument("project")
@click.argument("memory_id", metavar="ID")
@session_option("Look only in this session (the session_id of a search hit).")
@json_option
@pass_app
def recall(app: App, project: str, memory_id: str, session_id: str | None, as_json: bool) -> None:
    """Show memory ID of PROJECT with its provenance.

    ID is the 12-character id of a search hit, or any unique prefix of 12 to 64 hex characters. An
    observation shows the events it cites; a reflection the observations that support it.
    """
    recalled = app.service.recall(project, memory_id, session_id=session_id).to_dict()
    if as_json:
        render.emit_json(recalled)
    else:
        render.render_recall(render.stdout(), recalled)


@click.command()
@click.argument("project")
@click.argument("memory_id", metavar="ID")
@session_option("Look only in this session (the session_id of a search hit).")
@json_option
@pass_app
def forget(app: App, project: str, memory_id: str, session_id: str | None, as_json: bool) -> None:
    """Delete memory ID of PROJECT (an observation or a reflection).

    It leaves every search result at once; in semantic mode its indexed copies go at the next indexing
    batch. The events it cites are kept. ID is a 12-character id or any unique 12-64 hex prefix.
    """
    deleted = app.service.forget(project, memory_id, session_id=session_id).to_dict()
    if as_json:
        render.emit_json(deleted)
    else:
        hit = deleted["deleted"]
        click.echo(f"Deleted {hit['kind']} {hit['id']} of session {hit['session_id']}.")


def main(argv: list[str] | None = None) -> None:
    """Console script entry point; ``argv`` (default: the process arguments) lets other entry points, such
    as ``python -m obsmem.surfaces.worker``, run a command of this one CLI instead of parsing on their own."""
    cli(args=argv, prog_name="obsmem")


if __name__ == "__main__":
    # `python -m obsmem.surfaces.cli`: run the imported module's group, so commands registered from other
    # modules (which import this one) share its classes instead of a second copy made for __main__.
    from obsmem.surfaces.cli import main as imported_main

    imported_main()
