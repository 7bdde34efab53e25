"""``obsmem worker``: run background jobs (observation, reflection, indexing) for every project of a data directory.

A thin adapter: the jobs run on the worker pool of :mod:`obsmem.work` (the same pool ``obsmem serve``
runs unless ``jobs.in_server = false``), and with semantic search configured the indexer's own scheduler
runs in this process too. Any number of worker processes may run beside the server; the database's
leases decide who runs what. SIGTERM or SIGINT stops claiming new jobs and waits up to ``--grace`` seconds
for running ones; a job still running after that is left to its lease, which expires and hands it to
another worker.

Also runnable as ``python -m obsmem.surfaces.worker --data-dir DIR [options]``: the same ``obsmem worker``
command, options and exit codes.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from obsmem.app import Obsmem
from obsmem.settings import Settings

log = logging.getLogger("obsmem.worker")
MAX_GRACE_SECONDS = 86_400  # a stop that waits longer than a day for running jobs is a mistake


def run_worker(
    settings: Settings,
    *,
    threads: int | None = None,
    grace_seconds: float = 30.0,
    stop: threading.Event | None = None,
) -> None:
    """Run workers until ``stop`` is set (or SIGTERM/SIGINT when called on the main thread)."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    memory = Obsmem(settings)
    try:
        pool = memory.worker_pool()
        log.info(
            "worker %s running %d thread(s) over %s (observer %s)",
            pool.owner_prefix,
            threads or settings.jobs.worker_threads,
            settings.data_dir,
            memory.pipeline.observer_state,
        )
        pool.run_until(stop, threads=threads, grace_seconds=grace_seconds)
    finally:
        memory.close()


# Options of the ``obsmem`` group (they come before the command name there); this entry point takes them
# anywhere among the worker's own options, as it always has.
_GROUP_OPTIONS = ("--data-dir", "--config")


def main(argv: list[str] | None = None) -> None:
    """``python -m obsmem.surfaces.worker [--data-dir DIR] [--config FILE] [worker options]``.

    Runs the click ``obsmem worker`` command, so its options, bounds, messages and exit codes are defined
    in one place only; ``--data-dir`` and ``--config`` are moved in front of the command name, where the
    ``obsmem`` group reads them.
    """
    from obsmem.surfaces.cli import main as cli_main  # imported here: the CLI imports this module

    args = list(sys.argv[1:] if argv is None else argv)
    group: list[str] = []
    rest: list[str] = []
    while args:
        arg = args.pop(0)
        if arg in _GROUP_OPTIONS and args:
            group += [arg, args.pop(0)]
        elif arg.partition("=")[0] in _GROUP_OPTIONS:
            group.append(arg)
        else:
            rest.append(arg)
    cli_main([*group, "worker", *rest])


if __name__ == "__main__":
    main()
