"""Appending events never waits for a model, however slow the Observer's model is."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from support.pipeline_service import pipeline_service, user, words
from support.scripted_chat import HeldReplies, ObserverScript, ScriptedChatServer


def test_appends_are_stored_while_the_model_has_not_answered(tmp_path: Path) -> None:
    held = HeldReplies(ObserverScript())
    with ScriptedChatServer(held) as server:
        memory = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 200})
        try:
            memory.start_workers(threads=2)
            memory.append_events("p", "s1", [user(words(300))])
            wait_until(lambda: memory.session_status("p", "s1").status == "observing" and len(server.requests) >= 1)

            for n in range(40):  # every append is over the buffer, so each one also queues work
                receipt = memory.append_events("p", f"s{n % 2 + 1}", [user(f"turn {n}: " + words(150))])
                assert receipt.appended == 1
            # Every append above was stored while the observer's model call had not been answered: an append
            # that waited for it would still be waiting (the reply is held until the release below).
            assert held.answered == 0
            assert memory.session_status("p", "s1").status == "observing"
        finally:
            held.released.set()

        # The events that arrived meanwhile are observed afterwards, by the queued follow-up job.
        wait_until(lambda: all(memory.session_status("p", s).pending_tokens == 0 for s in ("s1", "s2")), 60)
        covered = memory.database("p").query("SELECT count(*) FROM coverage")[0][0]
        events = memory.database("p").query("SELECT count(*) FROM events")[0][0]
        assert covered == events == 41
        memory.close()


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)
