"""Run a support module as its own process (the crash tests kill it with SIGKILL).

A support script imports the support package like any test does, so it runs as ``python -m support.NAME``
with the tests folder on ``PYTHONPATH``: ``make test`` sets ``PYTHONSAFEPATH=1``, which keeps the working
directory and the script's own folder off ``sys.path``, so nothing else would find the package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]


def support_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``support.<module>`` with ``args``."""
    return [sys.executable, "-m", f"support.{module}", *args]


def support_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the tests folder first on ``PYTHONPATH``."""
    environment = dict(os.environ if base is None else base)
    paths = [str(TESTS_DIR), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment
