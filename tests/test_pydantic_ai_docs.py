"""docs/pydantic-ai.md's example runs as written (offline: pydantic-ai's function models play both models), and its
Construction block lists every parameter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "pydantic-ai.md"


def test_the_documented_example_runs(tmp_path: Path) -> None:
    example = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert example is not None
    script = tmp_path / "example.py"
    script.write_text(example.group(1), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")} | {"TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "answer: You like tabs."
    for event in ("om_status", "om_observation_end", "om_buffering_end", "om_activation"):
        assert f"event: {event}" in lines


def test_the_construction_block_lists_every_parameter() -> None:
    import inspect

    from obsmem.pydantic_ai import ObservationalMemory

    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"```python\nObservationalMemory\((.*?)\)\n```", text, re.DOTALL)
    assert block is not None
    listed = set(re.findall(r"^\s+(\w+)(?:=|,)", block.group(1), re.MULTILINE))
    parameters = set(inspect.signature(ObservationalMemory.__init__).parameters) - {"self", "memory", "client"}
    assert parameters <= listed, f"parameters the Construction block leaves out: {sorted(parameters - listed)}"


def test_the_documented_close_bounds_match_the_code() -> None:
    import inspect

    from obsmem.pydantic_ai import ObservationalMemory
    from obsmem.pydantic_ai.capability import STORE_AGAIN_PAUSES_SECONDS, STORE_GRACE_SECONDS

    text = " ".join(DOC.read_text(encoding="utf-8").split())
    timeout = inspect.signature(ObservationalMemory.close).parameters["timeout"].default
    *first, last = (f"{pause:g}" for pause in STORE_AGAIN_PAUSES_SECONDS)
    assert f"`close(timeout={timeout})`" in text
    assert (
        f"up to {len(STORE_AGAIN_PAUSES_SECONDS) + 1} attempts with pauses of {', '.join(first)} and {last} s" in text
    )
    assert STORE_GRACE_SECONDS == 0.5 and "plus half a second" in text
