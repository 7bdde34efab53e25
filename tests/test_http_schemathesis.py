"""Schemathesis against the published OpenAPI schema of a live server: no 5xx, no schema violations.

Runs every check except ``positive_data_acceptance``: a request can fit the schema and still be refused
on its meaning (``after: "0000-00-00"`` matches the date pattern but is not a calendar date; a source ref
must cite an event that exists), which a JSON schema cannot say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem.app import Obsmem
from support.http_server import ALPHA_NOTES, KEY_ALL, KEYS, live_server, seed, settings_for, storage_toml

pytestmark = pytest.mark.slow

# Examples per operation. PostgreSQL's run is shorter (every request is a round trip to the database on the
# shared test machine): it looks for answers that differ from SQLite's, which the contract tests pin one by one.
MAX_EXAMPLES = {"sqlite": 60, "postgres": 25}


def test_schemathesis_finds_no_server_errors_or_schema_violations(
    tmp_path: Path, backend: str, backend_storage: dict[str, Any]
) -> None:
    storage = backend_storage.get("storage", {})
    with Obsmem(settings_for(tmp_path, storage=storage)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    # Schemathesis sends wrong keys on purpose; the failed-authentication limit has tests of its own.
    server = live_server(tmp_path / "data", keys=KEYS, auth_failures_per_minute=100_000, extra=storage_toml(storage))
    with server as base:
        command = [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{base}/openapi.json",
            "--header",
            f"Authorization: Bearer {KEY_ALL}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            str(MAX_EXAMPLES[backend]),
            "--seed",
            "20260101",
            "--generation-database",
            "none",
            "--no-color",
            "--output-sanitize",
            "true",
        ]
        finished = subprocess.run(
            command, capture_output=True, text=True, timeout=600, cwd=tmp_path, stdin=subprocess.DEVNULL
        )
        operations = sum(len(methods) for methods in httpx.get(f"{base}/openapi.json").json()["paths"].values())
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output[-6000:]
    assert operations >= 12 and f"Tested: {operations}" in output  # every published operation was exercised
