"""The docs keep up with the code: every setting, CLI command and option and secret detector is documented,
every option the docs pass to a command and every `[section] key` they name exists, every TOML example loads,
every command that prints data takes --json as they say, every HTTP route has a row in docs/http-api.md,
every agent tool is named where the tools are listed and its error texts are the tools' own, the README's
Quick start runs as written, and every repository path the docs name exists and every link between them
resolves."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import click
from pydantic import BaseModel

from obsmem.secret_detectors import DETECTORS
from obsmem.settings import ENV_PREFIX, Settings
from obsmem.surfaces.cli import COMMANDS, cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """Settings models inside a field's type (``ServerSettings``, ``list[ApiKey]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType):
        return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
    return []


def settings_fields(
    model: type[BaseModel] = Settings, prefix: str = "", in_list: bool = False
) -> Iterator[tuple[str, str | None, bool]]:
    """``(documented name, environment variable or None, is a section)`` for every field, recursively."""
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        env = None if in_list else ENV_PREFIX + dotted.upper().replace(".", "__")
        nested = _models_in(field.annotation)
        is_list = typing.get_origin(field.annotation) is list
        yield dotted, env, bool(nested) and not is_list
        for inner in nested:
            if is_list:
                yield from settings_fields(inner, f"{dotted}[].", in_list=True)
            else:
                yield from settings_fields(inner, f"{dotted}.", in_list=in_list)


def test_every_setting_is_documented_with_its_environment_variable() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = {
        match.group(1): line for line in text.splitlines() if (match := re.match(r"\| `([a-z0-9_.\[\]]+)` \|", line))
    }
    missing, no_env, sections = [], [], []
    for name, env, is_section in settings_fields():
        if is_section:
            if f"`[{name}]`" not in text:
                sections.append(name)
        elif name not in rows:
            missing.append(name)
        elif env is not None and f"`{env}`" not in rows[name]:
            no_env.append(f"{name} ({env})")
    assert not missing, f"settings without a row in docs/configuration.md: {missing}"
    assert not no_env, f"rows without their environment variable: {no_env}"
    assert not sections, f"sections without a `[name]` heading in docs/configuration.md: {sections}"
    known = {name for name, _, _ in settings_fields()}
    assert not set(rows) - known, f"documented settings that do not exist: {sorted(set(rows) - known)}"


def test_every_toml_example_in_the_docs_loads_as_settings(tmp_path: Path) -> None:
    """A misspelt key or section in an example is a configuration_error, as it would be for the reader."""
    from obsmem.errors import ObsmemError
    from obsmem.settings import load_settings

    failures = []
    for path in _markdown_files():
        examples = re.findall(r"^```toml\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)
        for number, body in enumerate(examples):
            file = tmp_path / f"{path.stem}-{number}.toml"
            file.write_text(body, encoding="utf-8")
            try:
                load_settings(file, data_dir=tmp_path)
            except ObsmemError as exc:  # a configuration_error, reported with its example
                failures.append(f"{path.name}, TOML example {number + 1}: {exc}")
    assert not failures, failures


def test_every_section_and_key_the_docs_name_is_a_setting() -> None:
    """`[semantic] min_relevance` or `[[api_keys]] owner` in prose names a setting that exists."""
    known = {name.replace("[]", "") for name, _, _ in settings_fields()}
    named = re.compile(r"`\[\[?([a-z0-9_.]+)\]\]? ([a-z0-9_]+)")
    unknown = [
        f"{path.name}: [{section}] {key}"
        for path in _markdown_files()
        for section, key in named.findall(path.read_text(encoding="utf-8"))
        if not section.startswith("tool.") and f"{section}.{key}" not in known
    ]
    assert not unknown, f"settings the docs name that do not exist: {unknown}"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## obsmem (\S+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_command_and_option_is_in_docs_cli() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    sections = _sections(text)
    context = click.Context(cli)
    assert sorted(sections) == sorted(cli.list_commands(context)) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert command is not None
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("--") and option != "--help":
                    assert option in sections[name], f"docs/cli.md: `obsmem {name}` does not mention {option}"
    for param in cli.params:
        for option in getattr(param, "opts", []):
            assert option in text, f"docs/cli.md does not mention the global option {option}"


# The commands that print no data (a server's or worker's log, the protocol MCP or a hook speaks), which the
# README and docs/cli.md name as the ones without --json.
PRINTS_NO_DATA = ("serve", "worker", "mcp", "hook")


def _leaf_commands(group: click.Group, context: click.Context, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _leaf_commands(command, context, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_command_that_prints_data_takes_json_as_the_docs_say() -> None:
    without = sorted(
        name for name, command in _leaf_commands(cli, click.Context(cli)) if "--json" not in _options(command)
    )
    assert without == sorted(PRINTS_NO_DATA), f"commands without --json: {without}"
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    output = (DOCS / "cli.md").read_text(encoding="utf-8").split("**Output.**", 1)[1].split("\n\n", 1)[0]
    claim = readme.split("Every command that prints data takes `--json`", 1)[1].split(".", 1)[0]
    for name in PRINTS_NO_DATA:
        assert f"`{name}`" in claim, f"README.md: the --json claim does not name `{name}` as printing no data"
        assert f"`{name}`" in output, f"docs/cli.md: Output does not name `{name}` as printing no data"


def test_every_agent_tool_is_named_where_the_docs_list_the_tools() -> None:
    from obsmem.surfaces.tools import tool_definitions

    names = [definition["function"]["name"] for definition in tool_definitions("exact")]
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    mcp_command = cli.get_command(click.Context(cli), "mcp")
    assert mcp_command is not None
    markdown = {  # `memory` in backticks: the bare word is in `memory_search` and in prose
        "README.md, MCP": readme.split("## MCP", 1)[1].split("\n## ", 1)[0],
        "cli.md, obsmem mcp": _sections((DOCS / "cli.md").read_text(encoding="utf-8"))["mcp"],
        "tools-and-mcp.md": (DOCS / "tools-and-mcp.md").read_text(encoding="utf-8"),
    }
    missing = [f"{place}: {name}" for place, text in markdown.items() for name in names if f"`{name}`" not in text]
    missing += [f"obsmem mcp --help: {name}" for name in names if not re.search(rf"\b{name}\b", mcp_command.help or "")]
    assert not missing, f"tools the docs leave out: {missing}"


def _options(command: click.Command) -> set[str]:
    return {option for param in command.params for option in (*param.opts, *param.secondary_opts)}


def test_every_option_the_docs_pass_to_a_command_exists() -> None:
    """`obsmem search my-app x --fuzzy` in any doc fails here when search has no --fuzzy."""
    context = click.Context(cli)
    usage = re.compile(r"obsmem(?: --(?:data-dir|config) \S+)? ([a-z-]+(?: [a-z-]+)?)([^`|#\n]*)")
    unknown = []
    for path in _markdown_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            for match in usage.finditer(line):
                command: click.Command = cli
                for word in match.group(1).split():
                    sub = command.get_command(context, word) if isinstance(command, click.Group) else None
                    if sub is None:
                        break
                    command = sub
                if command is cli:
                    continue
                known = _options(command) | _options(cli) | {"--help", "-h"}
                flags = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2))
                unknown += [f"{path.name}: obsmem {match.group(1)} {flag}" for flag in flags if flag not in known]
    assert not unknown, f"options the docs use that the commands do not have: {unknown}"


def test_every_secret_detector_is_documented_with_its_marker() -> None:
    text = (DOCS / "redaction.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)` \|", text, flags=re.MULTILINE))
    assert rows == {detector.name: detector.kind for detector in DETECTORS}


# A path the docs name in backticks, from a top-level folder of the repository (``<area>`` placeholders aside).
REPO_PATH = re.compile(r"`((?:obsmem|pipeline|indexer|retrieval|eval|benchmarks|tests)/[\w./-]*)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]


def _prose(path: Path) -> str:
    """A markdown file without its fenced code blocks (examples there may name files of the reader's)."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def _anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings, as GitHub derives them."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", _prose(path), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_repository_path_the_docs_name_exists() -> None:
    """After code moves, a doc that still names the old module fails here instead of misleading a reader."""
    missing = [
        f"{path.name}: {name}"
        for path in _markdown_files()
        for name in REPO_PATH.findall(_prose(path))
        if not (DOCS.parent / name).exists()
    ]
    assert not missing, f"paths named in the docs that do not exist: {missing}"


def test_every_link_between_docs_resolves() -> None:
    broken = []
    for path in _markdown_files():
        for link in LINK.findall(_prose(path)):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            target, _, anchor = link.partition("#")
            resolved = (path.parent / target) if target else path
            if not resolved.exists():
                broken.append(f"{path.name}: {link} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{path.name}: {link} (no such heading)")
    assert not broken, f"broken links in the docs: {broken}"


def test_every_http_route_has_a_row_in_the_route_table(tmp_path: Path) -> None:
    from obsmem.app import Obsmem
    from obsmem.surfaces.http import create_app

    text = (DOCS / "http-api.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([A-Z]+ /[^`?]+)(?:\?[^`]*)?` \|", text, flags=re.MULTILINE))
    with Obsmem(data_dir=tmp_path) as service:
        schema = create_app(service).openapi()
    routes = {f"{method.upper()} {path}" for path, methods in schema["paths"].items() for method in methods}
    assert not routes - rows, f"routes without a row in docs/http-api.md's table: {sorted(routes - rows)}"
    stale = {row for row in rows if " /v1/" in row} - routes  # /mcp is mounted beside the schema
    assert not stale, f"rows in docs/http-api.md for routes that do not exist: {sorted(stale)}"


def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    """Its two JSONL examples are chat.jsonl and observations.jsonl, and every command it shows succeeds on
    them in order (the agents' importers aside: they read this machine's own transcripts)."""
    import shlex

    from click.testing import CliRunner

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    chat, observations = (body for kind, body in blocks if kind == "jsonl")
    (tmp_path / "chat.jsonl").write_text(chat, encoding="utf-8")
    (tmp_path / "observations.jsonl").write_text(observations, encoding="utf-8")
    commands = [
        shlex.split(line, comments=True)[1:]
        for kind, body in blocks
        if kind == "sh"
        for line in body.splitlines()
        if line.startswith("obsmem ") and not line.startswith("obsmem import")
    ]
    assert len(commands) >= 7
    data_dir = tmp_path / "data"
    for args in commands:
        args = [str(tmp_path / arg) if arg.endswith(".jsonl") else arg for arg in args]
        result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args])
        assert result.exit_code == 0, f"obsmem {shlex.join(args)}: {result.output}"
        assert "No memory matched" not in result.output, f"obsmem {shlex.join(args)} found nothing"


def test_the_tool_error_texts_tools_and_mcp_shows_are_the_tools_own(tmp_path: Path) -> None:
    from obsmem.app import Obsmem
    from obsmem.surfaces.tools import execute_tool

    text = (DOCS / "tools-and-mcp.md").read_text(encoding="utf-8")
    calls = [
        ("my-app", "memory_search", {"query": "x", "session": "s"}),
        ("my-app", "memory_search", {"query": "x", "scope": "everything"}),
        ("my-app", "memory_search", {"query": "x", "after": "2025-02-30"}),
        ("my-app", "recall", {"id": "5c1f0e9a2b7d", "session_id": "s2"}),
        ("my-ap", "memory_search", {"query": "x"}),
    ]
    with Obsmem(data_dir=tmp_path) as memory:
        memory.append_events("my-app", "s1", [{"role": "user", "content": "hello"}])
        answers = [execute_tool(memory, project, name, arguments) for project, name, arguments in calls]
    missing = [answer for answer in answers if f"\n{answer}\n" not in text]
    assert not missing, f"tool answers docs/tools-and-mcp.md shows otherwise: {missing}"


def test_the_search_steps_say_what_an_index_built_with_other_settings_answers() -> None:
    # Such an index is semantic_settings_mismatch (409), never index_building, which promises an index
    # that no background indexer builds (retrieval/hybrid.py, _refuse_other_settings).
    text = (DOCS / "semantic.md").read_text(encoding="utf-8")
    first = " ".join(text.split("## How a search runs", 1)[1].split("\n2. ", 1)[0].split())
    assert "other settings" not in first.split("`index_building`", 1)[0]
    assert "built with other settings, with `semantic_settings_mismatch`" in first
