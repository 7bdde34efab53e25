"""Eval: datasets, runner, metrics, calibration, reports and plots.

The names below are what other layers (the CLI's ``eval`` and ``demo`` commands) may import; the modules
inside are internal and may move. Each name loads its module on first use, so a command pays only for the
part of the harness it runs (the demo never loads the runner, the calibration or matplotlib).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from obsmem.eval.calibration import calibration_markdown, write_calibration
    from obsmem.eval.ingest import index_project
    from obsmem.eval.modes import MODES, parse_modes
    from obsmem.eval.progress import Progress
    from obsmem.eval.report import rich_tables, summary_dict
    from obsmem.eval.runner import (
        calibrate,
        evaluate_locomo,
        evaluate_longmemeval,
        evaluate_questions,
        with_semantic,
        write_outputs,
    )
    from obsmem.eval.suites.labelled import parse_labelled, read_labelled, run_labelled
    from obsmem.eval.suites.locomo import parse_ways

# Loaded on first use: name -> the module that defines it.
_ON_FIRST_USE = {
    "calibration_markdown": "obsmem.eval.calibration",
    "write_calibration": "obsmem.eval.calibration",
    "index_project": "obsmem.eval.ingest",
    "MODES": "obsmem.eval.modes",
    "parse_modes": "obsmem.eval.modes",
    "Progress": "obsmem.eval.progress",
    "rich_tables": "obsmem.eval.report",
    "summary_dict": "obsmem.eval.report",
    "calibrate": "obsmem.eval.runner",
    "evaluate_locomo": "obsmem.eval.runner",
    "evaluate_longmemeval": "obsmem.eval.runner",
    "evaluate_questions": "obsmem.eval.runner",
    "with_semantic": "obsmem.eval.runner",
    "write_outputs": "obsmem.eval.runner",
    "parse_labelled": "obsmem.eval.suites.labelled",
    "read_labelled": "obsmem.eval.suites.labelled",
    "run_labelled": "obsmem.eval.suites.labelled",
    "parse_ways": "obsmem.eval.suites.locomo",
}


def __getattr__(name: str) -> Any:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_ON_FIRST_USE[name]), name)


__all__ = [
    "MODES",
    "Progress",
    "calibrate",
    "calibration_markdown",
    "evaluate_locomo",
    "evaluate_longmemeval",
    "evaluate_questions",
    "index_project",
    "parse_labelled",
    "parse_modes",
    "parse_ways",
    "read_labelled",
    "rich_tables",
    "run_labelled",
    "summary_dict",
    "with_semantic",
    "write_calibration",
    "write_outputs",
]
