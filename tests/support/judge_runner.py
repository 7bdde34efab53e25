"""Run the queued judge jobs of DATA_DIR's projects, as its own process (the crash test kills it).

``python -m support.judge_runner DATA_DIR``; with ``OBSMEM_CRASH_AT`` naming a judging crash point the process
dies with SIGKILL there (obsmem/faults.py). Jobs whose lease a killed process held are taken over once the
lease (half a second here) has run out.
"""

from __future__ import annotations

import sys

from obsmem.app import Obsmem
from obsmem.settings import load_settings

SETTINGS = {"jobs": {"lease_seconds": 0.5, "poll_seconds": 0.05, "retry_backoff_seconds": 0.05}}


def main(data_dir: str) -> None:
    with Obsmem(load_settings(data_dir=data_dir, **SETTINGS)) as service:
        drained = service.worker_pool().drain(30)
    print(int(drained), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
