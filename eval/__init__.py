"""Eval: datasets, runner, metrics, calibration, reports and plots.

The names below are what other layers (the CLI's ``eval`` and ``demo`` commands) may import; the modules
inside are internal and may move. Each name loads its module on first use, so a command pays only for the
part of the harness it runs (the demo never loads the runner, the calibration or matplotlib).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from obsmem.eval.calibration import calibration_markdown, write_calibration
    from obsmem.eval.ingest import index_project
    from obsmem.eval.modes import MODES, parse_modes
    from obsmem.eval.never_below import (
        NeverBelowRow,
        never_below_dict,
        never_below_losses,
        never_below_rows,
        never_below_table,
        read_results,
        verdict_line,
    )
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

# Loaded on first use (lazy_loader): submodule -> the names it defines.
__getattr__, __dir__, _ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "calibration": ["calibration_markdown", "write_calibration"],
        "ingest": ["index_project"],
        "modes": ["MODES", "parse_modes"],
        "never_below": [
            "NeverBelowRow",
            "never_below_dict",
            "never_below_losses",
            "never_below_rows",
            "never_below_table",
            "read_results",
            "verdict_line",
        ],
        "progress": ["Progress"],
        "report": ["rich_tables", "summary_dict"],
        "runner": [
            "calibrate",
            "evaluate_locomo",
            "evaluate_longmemeval",
            "evaluate_questions",
            "with_semantic",
            "write_outputs",
        ],
        "suites.labelled": ["parse_labelled", "read_labelled", "run_labelled"],
        "suites.locomo": ["parse_ways"],
    },
)


__all__ = [
    "MODES",
    "NeverBelowRow",
    "Progress",
    "calibrate",
    "calibration_markdown",
    "evaluate_locomo",
    "evaluate_longmemeval",
    "evaluate_questions",
    "index_project",
    "never_below_dict",
    "never_below_losses",
    "never_below_rows",
    "never_below_table",
    "parse_labelled",
    "parse_modes",
    "parse_ways",
    "read_labelled",
    "read_results",
    "rich_tables",
    "run_labelled",
    "summary_dict",
    "verdict_line",
    "with_semantic",
    "write_calibration",
    "write_outputs",
]
