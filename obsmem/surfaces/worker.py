"""``obsmem worker``: run background jobs (observation, reflection, indexing) for every project of a data directory.

A thin adapter: the jobs run on the worker pool of :mod:`obsmem.work` (the same pool ``obsmem serve``
runs unless ``jobs.in_server = false``), and with semantic search configured the indexer's own scheduler
runs in this process too. Any number of worker processes may run beside the server; the database's
leases decide who runs what. SIGTERM or SIGINT stops claiming new jobs and waits up to ``--grace`` seconds
for running ones; a job still running after that is left to its lease, which expires and hands it to
another worker.

Also runnable as ``python -m obsmem.surfaces.worker --data-dir DIR``.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import threading
from pathlib import Path

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError
from obsmem.settings import Settings, load_settings

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="obsmem worker", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="data directory (default: settings)")
    parser.add_argument("--config", type=Path, default=None, help="settings file (TOML)")
    parser.add_argument("--threads", type=int, default=None, help="jobs run at once (default: jobs.worker_threads)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds to let running jobs finish on stop")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.grace) and 0 <= args.grace <= MAX_GRACE_SECONDS):
        parser.error(f"--grace must be a number of seconds from 0 to {MAX_GRACE_SECONDS}")
    # --threads goes through the settings, so it is bounded exactly as jobs.worker_threads is.
    overrides = {"jobs": {"worker_threads": args.threads}} if args.threads is not None else {}
    try:
        settings = load_settings(args.config, data_dir=args.data_dir, **overrides)
    except ConfigurationError as exc:
        parser.error(exc.message)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_worker(settings, grace_seconds=args.grace)


if __name__ == "__main__":
    main()
