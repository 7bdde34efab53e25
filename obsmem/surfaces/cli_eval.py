"""``obsmem eval``: measure search quality per mode on labelled questions, LoCoMo and LongMemEval.

    obsmem eval questions [--set sample|coding | --project P --questions FILE] [--modes ...] [--output DIR]
    obsmem eval locomo --data locomo10.json [--ways a,b,c,d] [--modes ...] [--output DIR]
    obsmem eval longmemeval --data longmemeval_s.json|SUBSET_DIR [--modes ...] [--output DIR]
    obsmem eval calibrate [--set sample|coding | --project P --questions FILE] [--max-recall-loss 0.0] [--output DIR]
    obsmem eval never-below out/*/results.json

Every command prints one side-by-side table of the modes (``--json``: the results as JSON) and, with
``--output DIR``, writes ``results.json``, ``run.json``, ``per_question.jsonl``, ``report.md`` and PNG
plots there. When the bm25, vector and hybrid modes all run, it also checks that hybrid is never below
the better of the two lists (k = 1, 5, 10, overall and per category) and exits 3 on a loss unless
``--never-below warn`` is given. The Python API is :mod:`obsmem.eval.runner`; docs/eval.md explains the
metrics.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from obsmem.errors import ValidationFailed
from obsmem.settings import Settings, load_settings
from obsmem.surfaces import cli_render as render
from obsmem.surfaces.cli import App, FiniteFloatRange, json_option, pass_app

# The model loader's own progress bars would interleave with ours (set before it is first imported).
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

F = TypeVar("F", bound=Callable[..., Any])
AVAILABLE = "available"


def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(function: F) -> F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


modes_option = click.option(
    "--modes",
    default=AVAILABLE,
    show_default=True,
    help="Comma-separated modes: exact, bm25, vector, hybrid, hybrid+rerank (needs a reranker)."
    " 'available' (or 'all'): every mode the settings can run.",
)
output_option = click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for results.json, run.json, per_question.jsonl, report.md and the PNG plots.",
)
progress_option = click.option(
    "--progress/--no-progress", default=None, help="Progress bars on stderr [default: when stderr is a terminal]."
)
work_dir_option = click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="New or empty directory to build the eval projects in, and keep [default: a temporary directory].",
)
project_options = _options(
    click.option(
        "--project",
        default=None,
        help="Evaluate this project of the data directory [default: the "
        "bundled sample project, loaded into a temporary directory].",
    ),
    click.option(
        "--questions",
        "questions_file",
        type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
        default=None,
        help="Labelled questions (JSONL or a JSON list, the sample project's format) [default: the sample's].",
    ),
    click.option(
        "--data-dir",
        "project_data_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Data directory holding --project [default: the global --data-dir or the settings].",
    ),
)
_data_file = click.Path(exists=True, readable=True, path_type=Path)
# Exit status when the report is complete but hybrid fell below its best single list (not 1: nothing broke,
# and not 2: the input was fine), so a script can tell a quality regression from a failure.
NEVER_BELOW_EXIT = 3
never_below_option = click.option(
    "--never-below",
    "never_below_mode",
    type=click.Choice(["fail", "warn"]),
    default="fail",
    show_default=True,
    help="When hybrid scores below max(bm25, vector) at k = 1, 5 or 10, overall or in a category: fail (exit"
    f" {NEVER_BELOW_EXIT} after the report) or warn (report the losses, exit 0). Needs the bm25, vector and hybrid"
    " modes.",
)


def _progress(as_json: bool, chosen: bool | None) -> Any:
    from obsmem.eval import Progress

    return Progress(sys.stderr.isatty() and not as_json if chosen is None else chosen)


def _modes(text: str, settings: Settings) -> tuple[str, ...]:
    from obsmem.eval import MODES, parse_modes

    if text.strip() not in (AVAILABLE, "all"):
        return parse_modes(text)
    semantic = settings.semantic
    if semantic is None or not semantic.enabled:
        return ("exact",)
    return MODES if semantic.reranker is not None else MODES[:-1]


def _settings(app: App, data_dir: Path | None) -> Settings:
    return load_settings(app.config, data_dir=data_dir or app.data_dir)


def _questions(path: Path | None) -> Any:
    from obsmem.eval import read_labelled

    return None if path is None else read_labelled(path)


def command_text(ctx: click.Context) -> str:
    """The command as given on the command line (options the user set, in a stable order), for reports."""
    import shlex

    levels: list[click.Context] = []
    level: click.Context | None = ctx
    while level is not None:
        levels.append(level)
        level = level.parent
    words: list[str] = []
    for level in reversed(levels):
        words.append("obsmem" if level.parent is None else str(level.info_name))
        for param in level.command.params:
            if not isinstance(param, click.Option) or param.name is None:
                continue
            if level.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE:
                continue
            value = level.params[param.name]
            if param.is_flag and isinstance(value, bool):
                names = param.opts if value else param.secondary_opts
                words.append(max(names or param.opts, key=len))
            else:
                words += [max(param.opts, key=len), str(value)]
    return shlex.join(words)


def _finish(run: Any, output: Path | None, as_json: bool, never_below_mode: str) -> None:
    from obsmem.eval import never_below_rows, never_below_table, rich_tables, summary_dict, write_outputs

    ctx = click.get_current_context()
    run.command = command_text(ctx)
    if output is not None:
        write_outputs(run, output)
    rows = never_below_rows(run.results)
    if as_json:
        render.emit_json(summary_dict(run))
    else:
        console = render.stdout()
        for table in rich_tables(run.results):
            console.print(table)
        if rows:
            console.print(never_below_table(rows))
        console.print("Time (s): " + ", ".join(f"{name} {value:.1f}" for name, value in run.timings.items()))
        for note in run.notes:
            console.print(note, style="dim")
        if output is not None:
            console.print(f"Wrote results.json, run.json, per_question.jsonl, report.md and plots to {output}")
    _never_below_outcome(ctx, rows, never_below_mode)


def _never_below_outcome(ctx: click.Context, rows: Any, never_below_mode: str) -> None:
    """Nothing when hybrid never falls below its best list; otherwise a warning, or an error and exit 3."""
    from obsmem.eval import never_below_losses

    lost = never_below_losses(rows)
    if not lost:
        return
    where = ", ".join(f"{row.dataset} {row.group} {row.metric}" for row in lost[:5])
    more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
    if never_below_mode == "warn":
        click.echo(f"warning: hybrid falls below its best single list in {len(lost)} place(s): {where}{more}", err=True)
        return
    click.echo(
        f"error: never_below: hybrid falls below its best single list in {len(lost)} place(s): {where}{more}"
        " (--never-below warn reports without failing)",
        err=True,
    )
    ctx.exit(NEVER_BELOW_EXIT)


def _dataset_errors(load: Callable[[], Any]) -> Any:
    """A malformed dataset file is the user's input: a ``validation_failed`` naming ``--data``."""
    try:
        return load()
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ValidationFailed):
            raise
        raise ValidationFailed(f"--data is not in the expected format ({type(exc).__name__})", field="data") from None


@click.group("eval")
def eval_group() -> None:
    """Measure search quality per mode: labelled questions, LoCoMo, LongMemEval, floor calibration.

    Modes run side by side and print one table; --output DIR also writes results.json, a markdown
    report and plots. See docs/eval.md.
    """


@eval_group.command("questions")
@project_options
@click.option(
    "--set",
    "question_set",
    default=None,
    metavar="NAME",
    help="A shipped question set, loaded into a temporary directory: sample (the bundled sample project) or"
    " coding (seven coding-agent projects, 308 questions) [default: sample].",
)
@modes_option
@never_below_option
@output_option
@progress_option
@json_option
@pass_app
def questions_command(
    app: App,
    project: str | None,
    questions_file: Path | None,
    project_data_dir: Path | None,
    question_set: str | None,
    modes: str,
    never_below_mode: str,
    output: Path | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Labelled questions: hit@1/5/10/20, MRR, nDCG@10 per split, negatives that get hits, and where a
    target is lost among the candidate lists.

    Without --project: a shipped set (--set, default the bundled sample project and its 64 questions), in a
    temporary directory.
    """
    from obsmem.eval import evaluate_questions

    settings = _settings(app, project_data_dir)
    if project is None:
        from obsmem.eval import with_semantic

        settings = with_semantic(settings)
    run = evaluate_questions(
        settings,
        modes=_modes(modes, settings),
        questions=_questions(questions_file),
        project=project,
        question_set=question_set,
        progress=_progress(as_json, progress),
    )
    _finish(run, output, as_json, never_below_mode)


@eval_group.command("locomo")
@click.option("--data", "data", type=_data_file, required=True, help="LoCoMo JSON file (e.g. locomo10.json).")
@click.option(
    "--ways",
    default="a,b",
    show_default=True,
    help="a: every turn an observation citing itself; b: the dataset's observations citing their turns; "
    "c: the turns as conversation events, searched with scope conversation; d: the events and the dataset's "
    "observations, searched with scope all.",
)
@click.option("--conversations", default=None, help="Comma-separated sample ids to run [default: all].")
@modes_option
@never_below_option
@work_dir_option
@output_option
@progress_option
@json_option
@pass_app
def locomo_command(
    app: App,
    data: Path,
    ways: str,
    conversations: str | None,
    modes: str,
    never_below_mode: str,
    work_dir: Path | None,
    output: Path | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """LoCoMo turn-level evidence recall@5/10/25/50, overall and per category, each conversation in its
    own project."""
    from obsmem.eval import evaluate_locomo, parse_ways, with_semantic

    settings = with_semantic(app.settings())
    chosen_ways = parse_ways(ways)
    names = [part.strip() for part in conversations.split(",") if part.strip()] if conversations else None
    run = _dataset_errors(
        lambda: evaluate_locomo(
            settings,
            data,
            modes=_modes(modes, settings),
            ways=chosen_ways,
            conversations=names,
            work_dir=work_dir,
            progress=_progress(as_json, progress),
        )
    )
    _finish(run, output, as_json, never_below_mode)


@eval_group.command("longmemeval")
@click.option(
    "--data",
    "data",
    type=_data_file,
    required=True,
    help="LongMemEval file (official layout) or subset directory (sessions.jsonl, questions.jsonl).",
)
@modes_option
@never_below_option
@work_dir_option
@output_option
@progress_option
@json_option
@pass_app
def longmemeval_command(
    app: App,
    data: Path,
    modes: str,
    never_below_mode: str,
    work_dir: Path | None,
    output: Path | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """LongMemEval session-level recall_any@k, recall_all@k and nDCG@k (k = 5, 10), abstention questions
    excluded."""
    from obsmem.eval import evaluate_longmemeval, with_semantic

    settings = with_semantic(app.settings())
    run = _dataset_errors(
        lambda: evaluate_longmemeval(
            settings, data, modes=_modes(modes, settings), work_dir=work_dir, progress=_progress(as_json, progress)
        )
    )
    _finish(run, output, as_json, never_below_mode)


@eval_group.command("calibrate")
@project_options
@click.option(
    "--set",
    "question_set",
    default=None,
    metavar="NAME",
    help="A shipped question set to calibrate on, loaded into a temporary directory: sample or coding"
    " [default: sample].",
)
@click.option(
    "--max-recall-loss",
    type=FiniteFloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Share of calibration recall@10 the floor may give up for precision.",
)
@output_option
@progress_option
@json_option
@pass_app
def calibrate_command(
    app: App,
    project: str | None,
    questions_file: Path | None,
    project_data_dir: Path | None,
    question_set: str | None,
    max_recall_loss: float,
    output: Path | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Choose a floor on the calibration split and show its effect on the held-out split (precision in
    the first ten, recall@10, negatives with hits): [semantic.reranker] min_score with a reranker,
    [semantic] min_relevance (the fused evidence) without one."""
    from obsmem.eval import calibrate, calibration_markdown, write_calibration

    settings = _settings(app, project_data_dir)
    report = calibrate(
        settings,
        questions=_questions(questions_file),
        project=project,
        max_recall_loss=max_recall_loss,
        question_set=question_set,
        progress=_progress(as_json, progress),
    )
    if output is not None:
        write_calibration(report, output)
    if as_json:
        render.emit_json(report.to_dict())
    else:
        from rich.markdown import Markdown

        render.stdout().print(Markdown(calibration_markdown(report)))


@eval_group.command("never-below")
@click.argument(
    "results_files",
    metavar="RESULTS.json...",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
)
@never_below_option
@json_option
def never_below_command(results_files: tuple[Path, ...], never_below_mode: str, as_json: bool) -> None:
    """Check saved runs again: hybrid against max(bm25, vector) at k = 1, 5, 10, overall and per category,
    for every dataset in the results.json files (as --output writes them)."""
    from obsmem.eval import never_below_dict, never_below_rows, never_below_table, read_results, verdict_line

    results = [result for path in results_files for result in read_results(path)]
    rows = never_below_rows(results)
    if not rows:
        raise ValidationFailed(
            "nothing to check: no dataset in these results has the bm25, vector and hybrid modes", field="results"
        )
    if as_json:
        render.emit_json(never_below_dict(rows))
    else:
        console = render.stdout()
        console.print(never_below_table(rows))
        console.print(verdict_line(rows))
    _never_below_outcome(click.get_current_context(), rows, never_below_mode)
