"""End to end with the real bundled embedding model (all-MiniLM-L6-v2, run locally)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from obsmem import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli_index import index as index_command

MEMORIES = [
    ("2024-03-01 09:00", "stabilised auth e2e by mocking the clock"),
    ("2024-03-02 10:00", "upgraded postgres from 14 to 16 and ran a full reindex"),
    ("2024-03-03 11:00", "user prefers tabs over spaces in every repository"),
    ("2024-03-04 12:00", "arm64 runners fail the docker build because of a missing base image"),
    ("2024-03-05 13:00", "renamed the billing service to ledger and updated the dashboards"),
    ("2024-03-06 14:00", "cut the release candidate for version 2.3 on friday"),
]


class _App:
    """The CLI's context object as the index command uses it: something with settings()."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def settings(self):
        return load_settings(data_dir=self.data_dir, semantic={"index": {"background": False}})


def test_paraphrase_finds_its_memory_where_exact_cannot(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path, semantic={"index": {"background": False}})) as service:
        service.append_events("app", "s1", [{"role": "user", "content": "x"} for _ in MEMORIES])
        service.add_observations(
            "app",
            [
                {"session_id": "s1", "content": text, "timestamp": stamp, "source_refs": [i + 1]}
                for i, (stamp, text) in enumerate(MEMORIES)
            ],
        )
    # Backfill through the CLI command, as a user would.
    result = CliRunner().invoke(index_command, ["app", "--json"], obj=_App(tmp_path))
    assert result.exit_code == 0, result.output
    assert '"indexed_count": 6' in result.output
    with Obsmem(load_settings(data_dir=tmp_path, semantic={"index": {"background": False}})) as service:
        query = "the time we fixed the flaky login test"
        assert service.search("app", query, mode="exact").hits == []
        hybrid = service.search("app", query)
        assert hybrid.mode == "hybrid" and not hybrid.partial
        assert hybrid.hits[0].content == MEMORIES[0][1]
        assert service.search("app", "database upgrade").hits[0].content == MEMORIES[1][1]
        assert service.search("app", "CI machines cannot build containers").hits[0].content == MEMORIES[3][1]
        windowed = service.search("app", "database upgrade", after="2024-03-04")
        assert all(h.date >= "2024-03-04" for h in windowed.hits) and len(windowed.hits) == 3
        status = service.status("app")
        assert status.indexed_count == 6 and status.source_count == 6


def test_index_command_without_semantic_settings(tmp_path: Path) -> None:
    class Plain:
        def settings(self):
            return load_settings(data_dir=tmp_path)

    with Obsmem(data_dir=tmp_path) as service:
        service.append_events("app", "s1", [{"role": "user", "content": "x"}])
    # Without [semantic] there is no semantic index, but the conversation index of exact search still
    # catches up: the command indexes the event and says so, and reports nothing of a semantic index.
    result = CliRunner().invoke(index_command, ["app", "--json"], obj=Plain())
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"conversation_events_indexed": 1}
    again = CliRunner().invoke(index_command, ["app"], obj=Plain())
    assert again.exit_code == 0 and "0 events indexed now" in again.output and "semantic" not in again.output
