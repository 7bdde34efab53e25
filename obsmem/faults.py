"""Crash points for the reliability tests.

``crash_point("publish:renamed")`` kills the process with SIGKILL when the environment variable
``OBSMEM_CRASH_AT`` names that point — the same as ``kill -9`` arriving exactly there. The tests run the
indexer in a subprocess with each point in turn and check that a restart repairs everything. Unset (as
in production), a crash point is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "OBSMEM_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
