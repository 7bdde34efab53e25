"""Every integer a client sends is bounded and strictly typed, on every way in.

A property test per input: integers at and beyond the 64-bit limits, floats, booleans and strings where an
integer is expected. The answer is never a 5xx or a traceback: an out-of-range or mistyped number is a 422
naming the field (or, in a batch of observations, a rejection of that item while the others are stored).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.bounds import MAX_SEQ, decimal_integer, is_strict_int
from obsmem.errors import ValidationFailed
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http.app import create_app
from obsmem.surfaces.tools import run_tool
from obsmem.work.eventlog import MAX_EVENT_ID
from support.http_server import LOCAL

EDGES = [0, -1, 1, 2, 50, 51, 1000, 2**31, MAX_SEQ, MAX_SEQ + 1, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1]
EDGES += [10**30, -(10**30)]
# Anything a JSON body can hold where an integer belongs.
HOSTILE = st.one_of(
    st.sampled_from(EDGES),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 0.5, 1e300]),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(["1", "0x10", "1e3", " 1", "1_0", "+1", "-0", "9" * 30]),
)
# What a query string, a header or a command-line flag can hold: text.
HOSTILE_TEXT = st.one_of(
    st.sampled_from(EDGES).map(str),
    st.integers().map(str),
    st.floats(allow_nan=False).map(str),
    st.sampled_from(["true", "True", "1.0", "1e3", " 1", "1_000", "+1", "0x10", "", "٣", "9" * 40]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW_PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PROJECT = "bounds"
SESSION = "s1"
NOTE = {"session_id": SESSION, "content": "valid neighbour", "timestamp": "2026-01-01 10:00", "source_refs": [1]}


def in_range(value: object, low: int, high: int) -> bool:
    return is_strict_int(value) and low <= value <= high  # type: ignore[operator]


def text_in_range(text: str, low: int, high: int) -> bool:
    try:
        return in_range(decimal_integer(text), low, high)
    except ValueError:
        return False


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bounds") / "data"


@pytest.fixture(scope="module")
def service(data_dir: Path) -> Iterator[Obsmem]:
    """One service for the whole module, not the shared one per test: Hypothesis runs each test for many
    examples, which a function-scoped fixture would not reset between, and three events to cite are enough."""
    service = Obsmem(load_settings(data_dir=data_dir))
    service.append_events(PROJECT, SESSION, [{"role": "user", "content": f"event {n}"} for n in range(1, 4)])
    yield service
    service.close()


@pytest.fixture(scope="module")
def client(service: Obsmem) -> Iterator[TestClient]:
    """Module-scoped like ``service``, and answering a server error as a response (the shared one raises it)."""
    with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as test_client:
        yield test_client


def assert_refused(response: Any, field: str) -> None:
    assert response.status_code == 422, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["field"] == field


def assert_answered(response: Any, field: str) -> None:
    """A valid number: never a 5xx, and never a complaint about that field."""
    assert response.status_code < 500, response.text[:300]
    if response.status_code == 422:
        assert response.json()["error"].get("field") != field, response.text[:300]


# -- HTTP ---------------------------------------------------------------------------------------------------


@PROPERTY
@given(value=HOSTILE)
def test_event_seq(client: TestClient, value: object) -> None:
    response = client.post(
        f"/v1/projects/{PROJECT}/sessions/seq-probe/events",
        json={"events": [{"role": "user", "content": "same", "seq": value}]},
    )
    if in_range(value, 1, MAX_SEQ):
        assert response.status_code == 200, response.text[:300]
    else:
        assert_refused(response, "events.0.seq")


@PROPERTY
@given(value=HOSTILE, as_object=st.booleans())
def test_observation_source_ref_is_rejected_alone(client: TestClient, value: object, as_object: bool) -> None:
    ref = {"seq": value} if as_object else value
    bad = NOTE | {"content": "probe item", "source_refs": [ref]}
    response = client.post(f"/v1/projects/{PROJECT}/observations", json={"observations": [bad, NOTE]})
    assert response.status_code == 200, response.text[:300]
    receipt = response.json()
    stored = {entry["index"] for entry in receipt["added"] + receipt["duplicates"]}
    assert 1 in stored, "a bad item never stops the others"
    rejected = {entry["index"]: entry for entry in receipt["rejected"]}
    if in_range(value, 1, 3):
        assert 0 in stored
    elif in_range(value, 1, MAX_SEQ):
        assert rejected[0]["code"] == "unknown_source_ref"
    else:
        assert rejected[0]["code"] == "invalid_request"
        assert "observations.0.source_refs" in rejected[0]["message"]


@PROPERTY
@given(value=HOSTILE)
def test_search_limit(client: TestClient, value: object) -> None:
    response = client.post(f"/v1/projects/{PROJECT}/search", json={"query": "event", "limit": value})
    if in_range(value, 1, 50):
        assert response.status_code == 200, response.text[:300]
    else:
        assert_refused(response, "limit")


@PROPERTY
@given(text=HOSTILE_TEXT, name=st.sampled_from(["after_id", "limit"]))
def test_event_log_query_integers(client: TestClient, text: str, name: str) -> None:
    low, high = (0, MAX_EVENT_ID) if name == "after_id" else (1, 1000)
    response = client.get(f"/v1/projects/{PROJECT}/events", params={name: text})
    if text_in_range(text, low, high):
        assert response.status_code == 200, response.text[:300]
    else:
        assert_refused(response, name)


@PROPERTY
@given(text=HOSTILE_TEXT)
def test_last_event_id_header(client: TestClient, text: str) -> None:
    if text_in_range(text.strip(), 0, MAX_EVENT_ID) or not text.isascii():
        return  # a valid id opens a stream that never ends; a header is Latin-1 only
    response = client.get(
        f"/v1/projects/{PROJECT}/events", headers={"Accept": "text/event-stream", "Last-Event-ID": text}
    )
    assert response.status_code == 422, response.text[:300]
    assert response.json()["error"]["field"] == "Last-Event-ID"


@PROPERTY
@given(value=HOSTILE)
def test_model_context_window(client: TestClient, value: object) -> None:
    body = {"observer": {"model_id": "probe-model", "context_window_tokens": value}}
    response = client.put(f"/v1/projects/{PROJECT}/models", json=body)
    if in_range(value, 2048, 10_000_000):
        assert_answered(response, "observer.context_window_tokens")
    else:
        assert_refused(response, "observer.context_window_tokens")


# -- agent tools and the Python API --------------------------------------------------------------------------


@PROPERTY
@given(value=HOSTILE)
def test_tool_limit(service: Obsmem, value: object) -> None:
    outcome = run_tool(service, PROJECT, "memory_search", {"query": "event", "limit": value})
    if in_range(value, 1, 50):
        assert not outcome.is_error, outcome.text
    else:
        assert outcome.text.startswith("invalid_request: limit"), outcome.text


@PROPERTY
@given(value=HOSTILE)
def test_python_api_seq_and_ref(service: Obsmem, value: object) -> None:
    if in_range(value, 1, MAX_SEQ):
        service.append_events(PROJECT, "python-probe", [{"role": "user", "content": "same", "seq": value}])
    else:
        with pytest.raises(ValidationFailed) as raised:
            service.append_events(PROJECT, "python-probe", [{"role": "user", "content": "same", "seq": value}])
        assert raised.value.field == "events.0.seq"
    receipt = service.add_observations(PROJECT, [NOTE | {"content": "python probe", "source_refs": [value]}, NOTE])
    assert {entry.index for entry in receipt.added + receipt.duplicates} >= {1}
    if not in_range(value, 1, MAX_SEQ):
        assert receipt.rejected[0].code == "invalid_request"


# -- CLI ----------------------------------------------------------------------------------------------------


def run(data_dir: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args])
    # A refused value exits 1 or 2 with a message; anything else escaping click is a traceback.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


@SLOW_PROPERTY
@given(text=HOSTILE_TEXT, option=st.sampled_from(["search --limit", "events --after-id", "events --limit"]))
def test_cli_integer_flags(service: Obsmem, data_dir: Path, text: str, option: str) -> None:
    command, flag = option.split()
    args = [command, PROJECT, "event"] if command == "search" else [command, PROJECT]
    result = run(data_dir, *args, f"{flag}={text}", "--json")
    low, high = {"search --limit": (1, 50), "events --after-id": (0, MAX_EVENT_ID), "events --limit": (1, 1000)}[option]
    try:
        parsed: int | None = int(text)
    except ValueError:
        parsed = None
    if parsed is not None and low <= parsed <= high:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2, result.output
        assert flag.strip("-") in result.output or flag in result.output or "limit" in result.output


@SLOW_PROPERTY
@given(value=HOSTILE)
def test_cli_ingest_files(service: Obsmem, data_dir: Path, tmp_path: Path, value: object) -> None:
    observations = tmp_path / "observations.jsonl"
    bad = NOTE | {"content": "cli probe", "source_refs": [value]}
    observations.write_text(json.dumps(bad) + "\n" + json.dumps(NOTE) + "\n")
    result = run(data_dir, "ingest", PROJECT, "--observations", str(observations), "--json")
    receipt = json.loads(result.stdout)["observations"]
    assert 1 in {entry["index"] for entry in receipt["added"] + receipt["duplicates"]}
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"session_id": "cli-probe", "role": "user", "type": "message", "seq": value}) + "\n")
    result = run(data_dir, "ingest", PROJECT, str(events), "--json")
    if in_range(value, 1, MAX_SEQ):
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2, result.output
        assert "line 1.seq" in result.output


def click_int_in_range(text: str, low: int, high: int) -> bool:
    """Whether click's integer parsing (Python's ``int()``, which allows ``+1`` and ``1_0``) accepts it."""
    try:
        return low <= int(text) <= high
    except ValueError:
        return False


@SLOW_PROPERTY
@given(text=HOSTILE_TEXT)
def test_cli_model_context_window(service: Obsmem, data_dir: Path, text: str) -> None:
    result = run(data_dir, "models", PROJECT, "--observer", "probe-model", f"--context-window={text}", "--json")
    if click_int_in_range(text, 2048, 10_000_000):
        assert result.exit_code in (0, 1), result.output  # switched, or refused for another reason
    else:
        assert result.exit_code == 2 and "--context-window" in result.output, result.output


@SLOW_PROPERTY
@given(text=HOSTILE_TEXT, option=st.sampled_from(["serve --port", "worker --threads"]))
def test_cli_flags_of_long_running_commands(data_dir: Path, text: str, option: str) -> None:
    command, flag = option.split()
    low, high = (0, 65535) if flag == "--port" else (1, 32)
    if click_int_in_range(text, low, high):
        return  # a valid value starts a server or a worker that runs until stopped
    result = run(data_dir, command, f"{flag}={text}")
    assert result.exit_code == 2 and flag in result.output, result.output


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    """A command in its own process: were a bad value accepted, a worker or a live view would run until the
    timeout kills it (the test then fails), where CliRunner would wait for ever."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
    command = [sys.executable, "-m", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize(
    "args", [["worker", "--grace"], ["status", "--live", "--interval"], ["eval", "calibrate", "--max-recall-loss"]]
)
def test_cli_number_flags_refuse_what_is_not_a_finite_number(data_dir: Path, args: list[str], text: str) -> None:
    *command, flag = args
    done = run_module("obsmem.surfaces.cli", "--data-dir", str(data_dir), *command, f"{flag}={text}")
    assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]


@pytest.mark.parametrize(
    ("module", "flag", "text"),
    [
        ("obsmem.surfaces.http", "--port", "65536"),
        ("obsmem.surfaces.http", "--port", "-1"),
        ("obsmem.surfaces.http", "--port", str(2**64)),
        ("obsmem.surfaces.worker", "--threads", "0"),
        ("obsmem.surfaces.worker", "--threads", "33"),
        ("obsmem.surfaces.worker", "--grace", "nan"),
        ("obsmem.surfaces.worker", "--grace", "inf"),
    ],
)
def test_module_entry_points_refuse_numbers_out_of_range(data_dir: Path, module: str, flag: str, text: str) -> None:
    # ``python -m obsmem.surfaces.http`` and ``python -m obsmem.surfaces.worker`` check what ``obsmem serve``
    # and ``obsmem worker`` check: a bad value stops them before they serve or start threads.
    done = run_module(module, "--data-dir", str(data_dir), flag, text)
    assert done.returncode == 2, done.stderr[-500:]
    assert flag.strip("-").removesuffix("s") in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]


def test_the_worker_module_is_the_obsmem_worker_command(data_dir: Path) -> None:
    """``python -m obsmem.surfaces.worker`` runs the click command itself: the same help, and ``--data-dir`` or
    ``--config`` (options of the ``obsmem`` group) accepted anywhere among the worker's options."""
    module_help = run_module("obsmem.surfaces.worker", "--help")
    cli_help = run_module("obsmem.surfaces.cli", "worker", "--help")
    assert module_help.returncode == cli_help.returncode == 0
    assert module_help.stdout == cli_help.stdout and "--log-level" in module_help.stdout
    after = run_module("obsmem.surfaces.worker", "--grace", "nan", f"--data-dir={data_dir}")
    assert after.returncode == 2 and "--grace" in after.stderr and "Traceback" not in after.stderr, after.stderr
    missing = data_dir / "missing.toml"
    config = run_module("obsmem.surfaces.worker", "--threads=2", "--config", str(missing), f"--data-dir={data_dir}")
    assert config.returncode == 1 and "configuration_error" in config.stderr, config.stderr[-500:]
