"""Run one groom pass of project ``app`` over DATA_DIR, as its own process (the crash test kills it).

``python -m support.groom_runner DATA_DIR``; with ``OBSMEM_CRASH_AT`` naming a groom crash point the process
dies with SIGKILL there (obsmem/faults.py).
"""

from __future__ import annotations

import sys

from obsmem.app import Obsmem
from obsmem.settings import load_settings


def main(data_dir: str) -> None:
    with Obsmem(load_settings(data_dir=data_dir)) as service:
        report = service.groom("app")
    print(len(report.promoted), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
