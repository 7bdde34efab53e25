"""The instant projection: a session's active memory as text an agent injects when it compacts.

Deterministic (same memory, same text), no model call, no waiting on background work: it renders what
is durable now. Reflections come first, then observations, each in time order with its 12-character id,
timestamp and (for observations) importance, under a header that tells the agent how to use ``recall``.
The text is wrapped in ``<obsmem-memory>`` tags, which the Observer's input hygiene cuts out if the agent
later sends the text back as conversation. Empty memory is reported as empty (``empty: true``, no text),
so the caller can fall back to its own summariser.

It renders from the session's active generation: every reflection, and every observation that no
promoted generation dropped (dropped observations stay searchable and recallable, they just leave this
text). :func:`~obsmem.pipeline.memory_items.active_memory` is the one place that decides what is active;
it must always equal the ledger replayed by
:func:`obsmem.pipeline.reflect.generations.rebuild_active_memory`, which tests check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.framing import inline_memory_text
from obsmem.pipeline.memory_items import MemoryItem, active_memory
from obsmem.pipeline.observe.coverage import read_progress
from obsmem.pipeline.observe.hygiene import MEMORY_TAG, PROJECTION_HEADER
from obsmem.pipeline.reflect.generations import generation_count
from obsmem.pipeline.tokens import estimate_tokens

HEADER = (
    f"{PROJECTION_HEADER} what happened earlier in this session, as dated observations. Each line starts "
    "with a memory id: pass it to the `recall` tool to see the conversation events it came from, and use "
    "`memory_search` for details not shown here. Verify the current state of files, branches and pull "
    "requests before acting on older decisions."
)


@dataclass(frozen=True)
class Projection:
    session_id: str
    text: str
    reflections: int
    observations: int
    generation: int = 0  # the active generation rendered (0: none promoted yet)
    # Every event up to this seq is covered by the memory rendered, read in the same snapshot: an agent
    # replaces exactly the messages up to it, never one the text does not account for.
    observed_through_seq: int = 0

    @property
    def empty(self) -> bool:
        return not self.reflections and not self.observations

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "empty": self.empty,
            "reflections": self.reflections,
            "observations": self.observations,
            "generation": self.generation,
            "observed_through_seq": self.observed_through_seq,
            "tokens": self.tokens,
            "text": self.text,
        }


def render_projection(
    session_id: str, items: list[MemoryItem], generation: int = 0, observed_through_seq: int = 0
) -> Projection:
    reflections = [item for item in items if item.kind == "reflection"]
    observations = [item for item in items if item.kind == "observation"]
    if not items:
        return Projection(session_id, "", 0, 0, generation, observed_through_seq)
    opening = f'<{MEMORY_TAG} session="{session_id}"' + (f' generation="{generation}">' if generation else ">")
    lines = [opening, HEADER]
    if reflections:
        lines += ["", "Reflections:"]
        lines += [f"- [{r.memory_id[:12]}] {r.timestamp} {inline_memory_text(r.content)}" for r in reflections]
    if observations:
        lines += ["", "Observations:"]
        lines += [
            f"- [{o.memory_id[:12]}] {o.timestamp} [{o.importance}] {inline_memory_text(o.content)}"
            for o in observations
        ]
    lines.append(f"</{MEMORY_TAG}>")
    return Projection(
        session_id, "\n".join(lines), len(reflections), len(observations), generation, observed_through_seq
    )


def project(conn: apsw.Connection, session_id: str) -> Projection:
    """Render the session's active memory now (call inside a read snapshot, which makes the watermark and
    the memory one moment)."""
    return render_projection(
        session_id,
        active_memory(conn, session_id),
        generation_count(conn, session_id),
        read_progress(conn, session_id).observed_through_seq,
    )


def projection_version(conn: apsw.Connection, session_id: str) -> str:
    """A token that changes whenever :func:`project` could render differently: the watermark, the active
    generation (drops happen only when one is promoted), and the count and newest row of the session's
    memories (writes and deletes; memories are never edited in place). A few index reads, so a caller that
    renders often can skip the rendering while nothing changed."""
    count, newest = conn.execute(
        "SELECT count(*), coalesce(max(id), 0) FROM memories WHERE session_id = ?", (session_id,)
    ).fetchone()
    watermark = read_progress(conn, session_id).observed_through_seq
    return f"{watermark}.{generation_count(conn, session_id)}.{count}.{newest}"
