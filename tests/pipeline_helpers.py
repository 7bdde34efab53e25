"""Helpers shared by the pipeline tests (not a test module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripted_chat import ScriptedChatServer

from obsmem.app import Obsmem
from obsmem.settings import load_settings


def pipeline_service(data_dir: Path, server: ScriptedChatServer | None, **sections: dict[str, Any]) -> Obsmem:
    """A service whose observer talks to the scripted server, with fast retries for tests."""
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
    return Obsmem(load_settings(data_dir=data_dir, **options))


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "created_at": "2026-05-01T10:32:00Z", **extra}


def words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)
