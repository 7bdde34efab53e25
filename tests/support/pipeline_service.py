"""Services whose pipeline talks to the scripted chat server, and the events the pipeline tests append."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.scripted_chat import ScriptedChatServer

# Twenty observations of ~8 tokens each are ~160 tokens: over a reflection threshold of 100 and a target of 60.
SMALL_REFLECTION = {"reflector": {"reflect_after_observation_tokens": 100}, "pools": {"observations_max_tokens": 60}}


def pipeline_options(server: ScriptedChatServer | None, **sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings sections for a pipeline on the scripted server: small buffers and fast retries, so tests are quick.

    Each of ``sections`` is merged over the section of the same name.
    """
    model: dict[str, Any] = {
        "model_id": "scripted",
        "timeout_seconds": 10,
        "max_retries": 0,
        "retry_backoff_seconds": 0.01,
    }
    if server is not None:
        model["base_url"] = server.base_url
    options: dict[str, dict[str, Any]] = {
        "model": model,
        "observer": {"buffer_tokens": 100},
        "jobs": {"retry_backoff_seconds": 0.01, "poll_seconds": 0.02, "lease_seconds": 10},
    }
    for name, values in sections.items():
        options[name] = options.get(name, {}) | values
    return options


def pipeline_service(data_dir: Path, server: ScriptedChatServer | None, **sections: dict[str, Any]) -> Obsmem:
    """A service over ``data_dir`` whose models are the scripted server (see :func:`pipeline_options`)."""
    return Obsmem(load_settings(data_dir=data_dir, **pipeline_options(server, **sections)))


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "created_at": "2026-05-01T10:32:00Z", **extra}


def words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)
