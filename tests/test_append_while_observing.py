"""Appending events never waits for a model, however slow the Observer's model is."""

from __future__ import annotations

import time
from pathlib import Path

from support.pipeline_service import pipeline_service, user, words
from support.scripted_chat import ObserverScript, ScriptedChatServer

MODEL_DELAY = 3.0


def test_appends_return_promptly_while_observation_is_slow(tmp_path: Path) -> None:
    with ScriptedChatServer(ObserverScript(delay=MODEL_DELAY)) as server:
        memory = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 200})
        memory.start_workers(threads=2)
        memory.append_events("p", "s1", [user(words(300))])
        deadline = time.monotonic() + 10
        while memory.session_status("p", "s1").status != "observing" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert memory.session_status("p", "s1").status == "observing"

        timings = []
        started = time.monotonic()
        for n in range(40):  # every append is over the buffer, so each one also queues work
            t0 = time.perf_counter()
            receipt = memory.append_events("p", f"s{n % 2 + 1}", [user(f"turn {n}: " + words(150))])
            timings.append(time.perf_counter() - t0)
            assert receipt.appended == 1
        elapsed = time.monotonic() - started
        still_observing = memory.session_status("p", "s1").status == "observing"
        assert elapsed < MODEL_DELAY and still_observing  # all appends happened during one model call
        assert max(timings) < 0.5, f"slowest append took {max(timings):.3f} s"

        # The events that arrived meanwhile are observed afterwards, by the queued follow-up job.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(memory.session_status("p", s).pending_tokens == 0 for s in ("s1", "s2")):
                break
            time.sleep(0.1)
        covered = memory.database("p").query("SELECT count(*) FROM coverage")[0][0]
        events = memory.database("p").query("SELECT count(*) FROM events")[0][0]
        assert covered == events == 41
        memory.close()
