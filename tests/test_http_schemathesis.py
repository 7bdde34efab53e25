"""Schemathesis against the published OpenAPI schema of a live server: no 5xx, no schema violations.

Runs every check except ``positive_data_acceptance``: a request can fit the schema and still be refused
on its meaning (``after: "0000-00-00"`` matches the date pattern but is not a calendar date; a source ref
must cite an event that exists), which a JSON schema cannot say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from obsmem.app import Obsmem
from support.http_server import ALPHA_NOTES, KEY_ALL, KEYS, live_server, seed, settings_for

pytestmark = pytest.mark.slow


def test_schemathesis_finds_no_server_errors_or_schema_violations(tmp_path: Path) -> None:
    with Obsmem(settings_for(tmp_path)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    # Schemathesis sends wrong keys on purpose; the failed-authentication limit has tests of its own.
    with live_server(tmp_path / "data", keys=KEYS, auth_failures_per_minute=100_000) as base:
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
            "60",
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
