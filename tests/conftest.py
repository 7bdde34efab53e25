"""Shared fixtures: real SQLite files in a temporary data directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from obsmem.app import Obsmem  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's settings file or data directory."""
    for name in list(os.environ):
        if name.startswith("OBSMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Obsmem]:
    memory = Obsmem(load_settings(data_dir=tmp_path / "data"))
    yield memory
    memory.close()
