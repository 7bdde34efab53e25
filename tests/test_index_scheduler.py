"""The background indexer's scheduler backs off a failing project whoever wakes it.

A batch that fails (an embedding endpoint down, an index built with other settings) is retried after a delay
that doubles with each failure. Writes wake the project through ``notify``; they used to bring the retry
forward, so a server taking a write a second retried a failing endpoint, and logged the failure, every second.
"""

from __future__ import annotations

import threading

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.scheduler import IndexBatchScheduler

FIRST_BACKOFF_SECONDS = 2.0
# Well inside the first backoff, counted from when the test saw the first failure.
QUIET_SECONDS = FIRST_BACKOFF_SECONDS / 4


def test_writes_do_not_bring_a_failed_batch_forward() -> None:
    attempts: list[str] = []
    attempted = threading.Event()

    def failing_batch(name: str) -> int | None:
        attempts.append(name)
        attempted.set()
        raise EmbeddingUnavailable("the embedding endpoint answered 503")

    scheduler = IndexBatchScheduler(failing_batch, lambda name: None, lambda: [], poll_seconds=60.0)
    scheduler.start()
    try:
        scheduler.notify("p")
        assert attempted.wait(30.0), "the scheduler never ran the project's batch"
        attempted.clear()
        for _ in range(5):  # five writes to the project while its batch backs off
            scheduler.notify("p")
        assert not attempted.wait(QUIET_SECONDS), "a write brought the failed batch's retry forward"
        assert attempts == ["p"]
        assert attempted.wait(30.0), "the failed batch was never retried"
    finally:
        scheduler.stop()
    assert attempts[:2] == ["p", "p"]
