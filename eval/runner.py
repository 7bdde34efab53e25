"""The eval harness's Python API: run a suite in several modes, then write results, a report and plots.

    from obsmem.eval.runner import evaluate_locomo, write_outputs
    from obsmem.settings import load_settings

    run = evaluate_locomo(load_settings(), "locomo10.json", modes=("bm25", "vector", "hybrid"))
    write_outputs(run, Path("eval-out"))

Dataset suites (LoCoMo, LongMemEval, the bundled sample's labelled questions) run in a fresh data
directory (temporary unless ``work_dir`` is given) with the caller's settings otherwise unchanged — the
``[semantic]`` section added with its defaults when the settings have none — so what is measured is the
configured product. Labelled questions about a user's own project run against that project in its data
directory (its index is brought up to date first, as ``obsmem index`` would).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from obsmem.app import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.eval.calibration import (
    FUSED_FLOOR,
    RERANKER_FLOOR,
    UNFLOORED,
    UNFLOORED_FUSED,
    CalibrationReport,
    choose_floor,
    measure_held_out,
    score_questions,
    split_questions,
    write_calibration,
)
from obsmem.eval.datasets.question_sets import DEFAULT_SET, QuestionSet
from obsmem.eval.datasets.question_sets import question_set as shipped_set
from obsmem.eval.ingest import CONVERSATION_WAYS, index_project, load_question_set
from obsmem.eval.modes import MODES, check_modes
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.results import ModeResult
from obsmem.eval.suites import labelled, locomo, longmemeval
from obsmem.retrieval import NO_EVIDENCE
from obsmem.settings import SemanticSettings, Settings

DEFAULT_MODES: tuple[str, ...] = ("exact", "bm25", "vector", "hybrid")


@dataclass
class EvalRun:
    """Everything one run measured: per-mode results, where the time went, and what was configured."""

    suite: str
    results: list[ModeResult]
    timings: dict[str, float] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    command: str | None = None
    calibration: CalibrationReport | None = None

    def meta(self) -> dict[str, Any]:
        from obsmem.eval.never_below import never_below_dict, never_below_rows

        return {
            "suite": self.suite,
            "command": self.command,
            "load_average_1min": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
            "timings_s": {name: round(value, 2) for name, value in self.timings.items()},
            "setup": self.setup,
            "notes": self.notes,
            "never_below": never_below_dict(never_below_rows(self.results)),
        }


def with_semantic(settings: Settings, data_dir: Path | None = None) -> Settings:
    """``settings`` with a ``[semantic]`` section (defaults when absent) and, if given, another data dir."""
    update: dict[str, Any] = {}
    if settings.semantic is None:
        update["semantic"] = SemanticSettings()
    if data_dir is not None:
        update["data_dir"] = data_dir
    return settings.model_copy(update=update) if update else settings


def with_event_index(settings: Settings) -> Settings:
    """``settings`` (with a ``[semantic]`` section) indexing conversation events too."""
    assert settings.semantic is not None
    index = settings.semantic.index.model_copy(update={"events": True})
    return settings.model_copy(update={"semantic": settings.semantic.model_copy(update={"index": index})})


@contextmanager
def isolated(settings: Settings) -> Iterator[Settings]:
    """``settings`` whose projects are the run's own. On SQLite the data directory (a workspace) already is;
    on PostgreSQL the projects go to a temporary database on the configured server, dropped afterwards, so
    the datasets' project names never meet the configured database's projects."""
    if settings.storage.backend != "postgres":
        yield settings
        return
    from obsmem.storage import scratch_database

    with scratch_database(settings.storage.postgres_dsn()) as dsn:
        storage = settings.storage.model_copy(update={"dsn": SecretStr(dsn)})
        yield settings.model_copy(update={"storage": storage})


@contextmanager
def workspace(work_dir: Path | None) -> Iterator[Path]:
    """``work_dir`` (created; kept afterwards) or a temporary directory removed at the end."""
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="obsmem-eval-") as temporary:
            yield Path(temporary)
        return
    if work_dir.exists() and any(work_dir.iterdir()):
        raise ValidationFailed("the work directory must be new or empty", field="work_dir")
    work_dir.mkdir(parents=True, exist_ok=True)
    yield work_dir


def setup_summary(memory: Obsmem) -> dict[str, Any]:
    """What was measured: the embedding model, the keyword tokenizer, fusion, budgets, reranker."""
    semantic = memory.settings.semantic if memory.hybrid is not None else None
    if semantic is None:
        return {"semantic": False}
    reranker = semantic.reranker
    return {
        "semantic": True,
        "embedding": memory.indexer.embedder.identity if memory.indexer is not None else None,
        "sentences": semantic.embedding.sentences,
        "bm25_tokenizer": semantic.bm25.tokenizer,
        "index_events": semantic.index.events,
        "fusion": semantic.fusion.model_dump(),
        "reranker": None if reranker is None else {"provider": reranker.provider, "min_score": reranker.min_score},
    }


def merged_setup(by_ways: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The setup of a run whose ways ran in services of their own: one service's summary as it is; several,
    what they share at the top and each one's own summary under ``ways`` (keyed by its ways)."""
    if len(by_ways) <= 1:
        return next(iter(by_ways.values()), {})
    first, *others = by_ways.values()
    shared = {key: value for key, value in first.items() if all(other.get(key, ...) == value for other in others)}
    return shared | {"ways": by_ways}


def semantic_modes(modes: Sequence[str]) -> bool:
    return any(mode != "exact" for mode in modes)


def warm_up(memory: Obsmem, modes: Sequence[str]) -> float:
    """Load the embedding model(s) now, so model load is timed apart from indexing; returns seconds."""
    if memory.indexer is None or not semantic_modes(modes):
        return 0.0
    started = time.perf_counter()
    memory.indexer.embedder.embed_documents(["warm up"])
    memory.indexer.embedder.embed_query("warm up")
    return time.perf_counter() - started


def _open(settings: Settings, modes: Sequence[str]) -> Obsmem:
    memory = Obsmem(settings, background_indexing=False)
    try:
        check_modes(memory, tuple(modes))
    except Exception:
        memory.close()
        raise
    return memory


# -- labelled questions ----------------------------------------------------------------------------------


def evaluate_questions(
    settings: Settings,
    *,
    modes: Sequence[str] = ("exact", "hybrid"),
    questions: Sequence[labelled.LabelledQuestion] | None = None,
    project: str | None = None,
    question_set: str | None = None,
    progress: Progress = SILENT,
) -> EvalRun:
    """Labelled questions in each mode: a shipped set's (``question_set``, default the bundled sample) in a
    temporary data directory, or a user's ``project`` with its own ``questions``."""
    if project is not None and questions is None:
        raise ValidationFailed("a project needs its own labelled questions (--questions FILE)", field="questions")
    if project is not None and question_set is not None:
        raise ValidationFailed("--set runs a shipped set in a temporary project; drop --project", field="set")
    if project is not None:
        return _questions_run(
            Obsmem(settings, background_indexing=False), project, modes, questions, progress, shipped=None
        )
    chosen = shipped_set(question_set or DEFAULT_SET)
    with workspace(None) as data_dir, isolated(with_semantic(settings, data_dir)) as own:
        memory = Obsmem(own, background_indexing=False)
        return _questions_run(memory, chosen.project, modes, questions, progress, shipped=chosen)


def _questions_run(
    memory: Obsmem,
    project: str,
    modes: Sequence[str],
    questions: Sequence[labelled.LabelledQuestion] | None,
    progress: Progress,
    *,
    shipped: QuestionSet | None,
) -> EvalRun:
    with memory:
        check_modes(memory, tuple(modes))
        timings = {"model_load": warm_up(memory, modes)}
        started = time.perf_counter()
        if shipped is not None:
            load_question_set(memory, shipped)
            questions = questions or labelled.parse_labelled(shipped.questions())
        else:
            memory.database(project)  # project_not_found before any work
        timings["ingest"] = time.perf_counter() - started
        started = time.perf_counter()
        if semantic_modes(modes):
            index_project(memory, project)
        timings["index"] = time.perf_counter() - started
        assert questions is not None
        started = time.perf_counter()
        dataset = "labelled questions" if shipped is None else shipped.dataset
        results = labelled.run_labelled(memory, project, questions, modes, dataset=dataset, progress=progress)
        timings["queries"] = time.perf_counter() - started
        where = project if shipped is None else shipped.description
        notes = [
            f"project: {where}",
            f"questions: {sum(q.positive for q in questions)} positive, "
            f"{sum(not q.positive for q in questions)} negative",
        ]
        if shipped is not None:
            notes.append(shipped.overlap_note())
        return EvalRun("questions", results, timings, setup_summary(memory), notes)


# -- LoCoMo ----------------------------------------------------------------------------------------------


def evaluate_locomo(
    settings: Settings,
    data: Path | str,
    *,
    modes: Sequence[str] = DEFAULT_MODES,
    ways: Sequence[str] = ("a", "b"),
    conversations: Sequence[str] | None = None,
    work_dir: Path | None = None,
    progress: Progress = SILENT,
) -> EvalRun:
    """Every conversation of a LoCoMo file (or the named ones), each way, each mode."""
    from obsmem.eval.datasets.locomo import load_locomo

    started_all = time.perf_counter()
    loaded_file = load_locomo(data)
    if conversations:
        wanted = set(conversations)
        unknown = wanted - {c.sample_id for c in loaded_file}
        if unknown:
            raise ValidationFailed(f"no conversation {sorted(unknown)[0]} in the file", field="conversations")
        loaded_file = [c for c in loaded_file if c.sample_id in wanted]
    timings = {"model_load": 0.0, "ingest": 0.0, "index": 0.0, "queries": 0.0}
    results: list[ModeResult] = []
    # The ways over memories run as the product does by default; the conversation ways in a service that
    # indexes events too (same data directory: each way has its own projects).
    groups = [
        ([way for way in ways if way not in CONVERSATION_WAYS], with_semantic(settings)),
        ([way for way in ways if way in CONVERSATION_WAYS], with_event_index(with_semantic(settings))),
    ]
    setups: dict[str, dict[str, Any]] = {}
    with workspace(work_dir) as data_dir:
        for group, group_settings in groups:
            if not group:
                continue
            with isolated(with_semantic(group_settings, data_dir)) as own, _open(own, modes) as memory:
                timings["model_load"] += warm_up(memory, modes)
                for way in group:
                    prepared, ingest_s, index_s = locomo.load_way(
                        memory, loaded_file, way, progress, index=semantic_modes(modes)
                    )
                    timings["ingest"] += ingest_s
                    timings["index"] += index_s
                    started = time.perf_counter()
                    results += locomo.run_way(memory, prepared, way, modes, progress)
                    timings["queries"] += time.perf_counter() - started
                setups[", ".join(group)] = setup_summary(memory)
        timings["total"] = time.perf_counter() - started_all
        questions = sum(len(c.questions) for c in loaded_file)
        skipped = sum(c.skipped_questions for c in loaded_file)
        notes = [
            f"conversations: {', '.join(c.sample_id for c in loaded_file)}",
            f"questions: {questions} with evidence ({skipped} left out: no well-formed evidence id)",
            f"turns: {sum(1 for c in loaded_file for _ in c.turns())}; "
            f"dataset observations: {sum(len(c.facts) for c in loaded_file)}",
        ]
        return EvalRun("locomo", results, timings, merged_setup(setups), notes)


# -- LongMemEval -----------------------------------------------------------------------------------------


def evaluate_longmemeval(
    settings: Settings,
    data: Path | str,
    *,
    modes: Sequence[str] = DEFAULT_MODES,
    work_dir: Path | None = None,
    progress: Progress = SILENT,
) -> EvalRun:
    """A LongMemEval file (official layout) or subset directory, each mode."""
    from obsmem.eval.datasets.longmemeval import load_longmemeval

    started_all = time.perf_counter()
    data_set = load_longmemeval(data)
    questions, left_out = longmemeval.scored_questions(data_set)
    with (
        workspace(work_dir) as data_dir,
        isolated(with_semantic(settings, data_dir)) as own,
        _open(own, modes) as memory,
    ):
        timings = {"model_load": warm_up(memory, modes)}
        results, spent = longmemeval.run_longmemeval(
            memory, data_set, questions, modes, progress, index=semantic_modes(modes)
        )
        timings |= {"ingest": spent.ingest, "index": spent.index, "queries": sum(r.elapsed_s for r in results)}
        timings["total"] = time.perf_counter() - started_all
        notes = [
            f"questions: {len(questions)} scored, {left_out} left out (abstention or no answer session)",
            f"haystacks: {spent.haystacks} ({len(data_set.sessions)} sessions)",
        ]
        return EvalRun("longmemeval", results, timings, setup_summary(memory), notes)


# -- calibration -----------------------------------------------------------------------------------------


def calibrate(
    settings: Settings,
    *,
    questions: Sequence[labelled.LabelledQuestion] | None = None,
    project: str | None = None,
    max_recall_loss: float = 0.0,
    question_set: str | None = None,
    progress: Progress = SILENT,
) -> CalibrationReport:
    """Choose a floor on the calibration split and measure it on the held-out split: the reranker's
    ``min_score`` when one is configured, otherwise ``[semantic] min_relevance`` on the fused evidence.

    Without ``project``: a shipped set (``question_set``, default the bundled sample) in a temporary data
    directory; its ``calibration`` and ``held_out`` splits are the ones the floor is chosen and measured on."""
    if settings.semantic is None and project is not None:
        raise ValidationFailed(
            "calibration needs hybrid search (the [semantic] section in the settings)",
            code="mode_unavailable",
            field="modes",
        )
    if not 0.0 <= max_recall_loss <= 1.0:
        raise ValidationFailed("max_recall_loss must be between 0 and 1", field="max_recall_loss")
    if project is not None and questions is None:
        raise ValidationFailed("a project needs its own labelled questions (--questions FILE)", field="questions")
    if project is not None and question_set is not None:
        raise ValidationFailed("--set calibrates on a shipped set in a temporary project; drop --project", field="set")
    sample = project is None
    shipped = shipped_set(question_set or DEFAULT_SET) if sample else None
    with workspace(None) as temporary:
        if sample:
            settings = with_semantic(settings, temporary)
        assert settings.semantic is not None
        setting = RERANKER_FLOOR if settings.semantic.reranker is not None else FUSED_FLOOR
        if setting == FUSED_FLOOR and settings.semantic.fusion.method != "convex":
            raise ValidationFailed(
                "min_relevance needs fusion method 'convex' (reciprocal-rank scores have no scale)", field="modes"
            )
        project = project or (shipped.project if shipped is not None else "sample")
        with Obsmem(settings, background_indexing=False) as memory:
            if shipped is not None:
                load_question_set(memory, shipped)
                questions = questions or labelled.parse_labelled(shipped.questions())
            else:
                memory.database(project)  # project_not_found before any work
            assert questions is not None
            calibration, held_out = split_questions(questions)
            index_project(memory, project)
            scored = score_questions(memory, project, calibration, progress, setting)
            no_evidence = NO_EVIDENCE if setting == FUSED_FLOOR else None
            chosen, sweep = choose_floor(scored, max_recall_loss, no_evidence)
            unfloored = UNFLOORED if setting == RERANKER_FLOOR else UNFLOORED_FUSED
            before = measure_held_out(memory, project, held_out, unfloored, None, setting)
        report = CalibrationReport(
            chosen, max_recall_loss, len(calibration), len(held_out), sweep, before, setting=setting
        )
        if chosen is not None:
            with Obsmem(floored(settings, setting, chosen), background_indexing=False) as memory:
                report.held_out_with_floor = measure_held_out(memory, project, held_out, None, chosen, setting)
        return report


def floored(settings: Settings, setting: str, floor: float) -> Settings:
    """``settings`` with the chosen floor set where ``setting`` lives."""
    semantic = settings.semantic
    assert semantic is not None
    if setting == RERANKER_FLOOR:
        assert semantic.reranker is not None
        semantic = semantic.model_copy(update={"reranker": semantic.reranker.model_copy(update={"min_score": floor})})
    else:
        semantic = semantic.model_copy(update={"min_relevance": floor})
    return settings.model_copy(update={"semantic": semantic})


# -- output ----------------------------------------------------------------------------------------------


def write_outputs(run: EvalRun, output: Path) -> list[Path]:
    """``results.json``, ``run.json``, ``report.md``, ``per_question.jsonl`` and the PNG plots (and the
    calibration files if any)."""
    import json

    from obsmem.eval.plots import write_plots
    from obsmem.eval.report import markdown_report

    output.mkdir(parents=True, exist_ok=True)
    written = [output / "results.json", output / "run.json", output / "report.md"]
    written[0].write_text(json.dumps([r.to_dict() for r in run.results], indent=2) + "\n", encoding="utf-8")
    written[1].write_text(json.dumps(run.meta(), indent=2, default=str) + "\n", encoding="utf-8")
    written[2].write_text(markdown_report(run), encoding="utf-8")
    written.append(output / "per_question.jsonl")
    with written[-1].open("w", encoding="utf-8") as handle:
        for result in run.results:
            for record in result.per_question:
                handle.write(json.dumps({"dataset": result.dataset, "mode": result.mode, **record}) + "\n")
    written += write_plots(run.results, output)
    if run.calibration is not None:
        written += write_calibration(run.calibration, output)
    return written


__all__ = [
    "MODES",
    "EvalRun",
    "calibrate",
    "evaluate_locomo",
    "evaluate_longmemeval",
    "evaluate_questions",
    "write_outputs",
]
