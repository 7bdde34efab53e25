"""What the remote pydantic-ai tests run ``obsmem serve`` with: a quoting Observer and small thresholds.

The server's Observer, Reflector and Dropper are the scripted OpenAI-compatible server (a model cannot run
here); these settings make it observe after every few events, as the embedded tests do.
"""

from __future__ import annotations

from support.pydantic_ai_stages import event_bodies
from support.scripted_chat import (
    Reply,
    Request,
    StageScript,
    citable_seqs,
    record,
    reflections,
    shown_observations,
    text,
)

REFLECTION_GROUP = 10


class QuotingObserverScript(StageScript):
    """The server's Observer: one observation per event, quoting the start of its text."""

    def opening_reply(self, request: Request, call: int) -> Reply:
        transcript = request.transcript
        bodies = event_bodies(transcript)
        items = [
            {
                "content": f"{bodies[seq][1]}: {bodies[seq][2] or 'no text'}",
                "timestamp": bodies[seq][0],
                "importance": "medium",
                "source_refs": [seq],
            }
            for seq in citable_seqs(transcript)
            if seq in bodies
        ]
        return record(*items) if items else text("nothing to record")


class CondensingReflectorScript(StageScript):
    """The server's Reflector, like a careful one: one short reflection per ten observations no reflection
    covers yet, so the memory stays bounded (the Dropper retires what reflections cover)."""

    def opening_reply(self, request: Request, call: int) -> Reply:
        fresh = [o for o in shown_observations(request.transcript) if o.coverage == "not covered"]
        groups = [fresh[i : i + REFLECTION_GROUP] for i in range(0, len(fresh), REFLECTION_GROUP)]
        if not groups:
            return text("nothing to reflect")
        return reflections(
            *[
                {
                    "content": ("Condensed: " + "; ".join(o.content[:30] for o in group))[:200],
                    "supporting_observation_ids": [o.id for o in group],
                }
                for group in groups
            ]
        )


def server_settings(model_url: str) -> str:
    """TOML for ``live_server(extra=...)``: the scripted model server and thresholds that observe often."""
    return "\n".join(
        [
            "[model]",
            f'base_url = "{model_url}"',
            'model_id = "scripted"',
            "max_retries = 0",
            "[observer]",
            "buffer_tokens = 100",
            "[reflector]",
            "reflect_after_observation_tokens = 1500",
            "[pools]",
            "observations_max_tokens = 1000",
            "[jobs]",
            "poll_seconds = 0.05",
            "retry_backoff_seconds = 0.01",
        ]
    )
