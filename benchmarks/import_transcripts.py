"""Transcript import throughput: a generated Claude Code transcript set, imported, then imported again.

    python benchmarks/import_transcripts.py --megabytes 100

Writes ``--sessions`` Claude Code session files (about ``--megabytes`` MB in all) in a temporary
``projects/`` tree, shaped as the agent writes them: user requests; assistant responses split over one
line per content block (thinking with its signature, text, tool calls with JSON arguments), each with the
model's usage and request id; tool results of varied size (a few long ones, cut on import) with the
structured ``toolUseResult`` copy the agent keeps beside them; file-history snapshots. The text that
becomes events (and is redacted) is reported as ``event_text_share`` of the bytes. Imports them
through ``Obsmem.import_transcripts`` (the normal append path: validation, redaction, the Observer
trigger), then imports the unchanged set again.
Prints JSON: events stored, events/s of the first import (target >= 20,000), and the re-import's time
as a share of the first (target <= 5%). Beside the wall time it reports the CPU time of the import, the
reading processes' included (``os.times``, children counted once they have ended, which they do at the
end of each import), the importing process's own, events per CPU-second and the 1-minute load average
before and after: on a shared machine the wall time measures the load of the other processes as much as
the import, the CPU time only the import (SQLite runs in the process, so its work is counted; waiting for
the disk is not). ``--reading-processes N`` sets ``[transcripts] reading_processes`` for the run (0: the
import reads in-process).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import line  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def _signature(rng: random.Random) -> str:
    """A thinking block's signature: opaque base64 of about a kilobyte, as the agent stores it."""
    return base64.b64encode(rng.randbytes(1024)).decode("ascii")


def _tool_use_result(name: str, args: dict[str, str], output: str) -> dict[str, object]:
    """The structured copy of a tool's result that Claude Code keeps beside the result itself."""
    if name == "Bash":
        return {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
    if name == "Read":
        lines = output.count("\n") + 1
        file = {
            "filePath": "/home/bench/src/app/module.py",
            "content": output,
            "numLines": lines,
            "startLine": 1,
            "totalLines": lines,
        }
        return {"type": "text", "file": file}
    if name == "Grep":
        return {
            "mode": "content",
            "numFiles": 3,
            "filenames": [],
            "content": output,
            "numLines": output.count("\n") + 1,
        }
    return {
        "filePath": "/home/bench/src/app/module.py",
        "oldString": args["command"][:40],
        "newString": "x",
        "originalFile": output,
        "structuredPatch": [],
        "userModified": False,
        "replaceAll": False,
    }


def _records(rng: random.Random, session: str, cwd: str, turns: int) -> list[dict[str, object]]:
    """One stretch of a session, shaped as Claude Code writes it (see the module docstring)."""
    records: list[dict[str, object]] = []
    parent: str | None = None
    clock = 0

    def base(kind: str) -> dict[str, object]:
        nonlocal parent, clock
        clock += 1
        uuid = f"{session[:8]}-{len(records):04d}-4000-8000-{rng.getrandbits(48):012x}"
        stamp = f"2025-06-{1 + clock // 80000:02d}T{(clock // 3600) % 24:02d}:{(clock // 60) % 60:02d}:{clock % 60:02d}"
        record = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": cwd,
            "sessionId": session,
            "version": "2.0.14",
            "gitBranch": "main",
            "type": kind,
            "uuid": uuid,
            "timestamp": f"{stamp}.{clock % 1000:03d}Z",
        }
        parent = uuid
        return record

    def assistant(message_id: str, part: dict[str, object], stop: str | None) -> dict[str, object]:
        usage = {
            "input_tokens": rng.randint(3, 900),
            "cache_creation_input_tokens": rng.randint(0, 9000),
            "cache_read_input_tokens": rng.randint(0, 90000),
            "output_tokens": rng.randint(1, 900),
            "service_tier": "standard",
        }
        body = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [part],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        return {**base("assistant"), "message": body, "requestId": f"req_011C{rng.getrandbits(80):020x}"}

    for turn in range(turns):
        records.append({**base("user"), "message": {"role": "user", "content": line(rng, turn)}})
        message_id = f"msg_01{rng.getrandbits(96):024x}"
        thinking = {"type": "thinking", "thinking": line(rng, turn + 1), "signature": _signature(rng)}
        records.append(assistant(message_id, thinking, None))
        records.append(assistant(message_id, {"type": "text", "text": line(rng, turn + 2)}, None))
        for call in range(rng.randint(1, 3)):
            call_id = f"toolu_01{rng.getrandbits(96):024x}"
            name = rng.choice(["Bash", "Read", "Grep", "Edit"])
            args = {"command": f"rg -n {line(rng, call)[:30]!r} src/", "description": "search"}
            records.append(
                assistant(message_id, {"type": "tool_use", "id": call_id, "name": name, "input": args}, "tool_use")
            )
            size = rng.choice([1, 2, 4, 8, 8, 16, 40]) if rng.random() > 0.02 else 600
            output = "\n".join(line(rng, turn * 7 + k) for k in range(size))
            result = {"type": "tool_result", "tool_use_id": call_id, "content": output, "is_error": rng.random() < 0.05}
            records.append(
                {
                    **base("user"),
                    "message": {"role": "user", "content": [result]},
                    "toolUseResult": _tool_use_result(name, args, output),
                }
            )
        if turn % 10 == 0:
            backups = {
                f"src/app/file_{k}.py": {
                    "backupFileName": f"{rng.getrandbits(64):016x}@v2",
                    "version": 2,
                    "backupTime": "2025-06-01T10:00:00.000Z",
                }
                for k in range(4)
            }
            snapshot = {"messageId": message_id, "trackedFileBackups": backups, "timestamp": "2025-06-01T10:00:00Z"}
            records.append(
                {
                    "type": "file-history-snapshot",
                    "messageId": message_id,
                    "snapshot": snapshot,
                    "isSnapshotUpdate": False,
                }
            )
    return records


def generate(root: Path, megabytes: float, sessions: int, seed: int = 11) -> tuple[list[Path], int]:
    rng = random.Random(seed)
    target = int(megabytes * 1024 * 1024)
    per_file = target // sessions
    files: list[Path] = []
    written = 0
    for index in range(sessions):
        cwd = f"/home/bench/src/repo-{index % 4}"
        folder = root / "projects" / cwd.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        session = f"{index:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        path = folder / f"{session}.jsonl"
        size = 0
        with open(path, "w", encoding="utf-8") as handle:
            while size < per_file:
                chunk = "".join(json.dumps(r) + "\n" for r in _records(rng, session, cwd, 20))
                handle.write(chunk)
                size += len(chunk.encode("utf-8"))
        files.append(path)
        written += size
    return files, written


def _event_text_bytes(data_dir: Path) -> int:
    """Bytes of event text stored (content and tool arguments), over every project."""
    import apsw

    total = 0
    for database in data_dir.glob("projects/*/obsmem.db"):
        conn = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
        row = conn.execute("SELECT SUM(length(CAST(content AS BLOB)) + COALESCE(length(tool_args), 0)) FROM events")
        total += row.fetchone()[0] or 0
        conn.close()
    return total


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the reading process is ended
    at the end of each import, so its time is counted in the import that used it)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=100.0)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument(
        "--reading-processes",
        type=int,
        default=None,
        help="[transcripts] reading_processes for this run (0: read in-process; default: the settings')",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        files, size = generate(root, args.megabytes, args.sessions)
        chosen = args.reading_processes
        overrides = {} if chosen is None else {"transcripts": {"reading_processes": chosen}}
        with Obsmem(load_settings(data_dir=root / "data", **overrides)) as memory:
            load_before = os.getloadavg()[0]
            started, cpu_started, main_started = time.perf_counter(), _cpu(), time.process_time()
            first = memory.import_transcripts("claude-code", files)
            first_seconds = time.perf_counter() - started
            first_cpu, first_main_cpu = _cpu() - cpu_started, time.process_time() - main_started
            started, cpu_started = time.perf_counter(), _cpu()
            again = memory.import_transcripts("claude-code", files)
            again_seconds = time.perf_counter() - started
            again_cpu = _cpu() - cpu_started
            load = os.getloadavg()[0]
        stored = first.added
        print(
            json.dumps(
                {
                    "files": len(files),
                    "megabytes": round(size / 1024 / 1024, 1),
                    "events": stored,
                    "skipped": sum(sum(f.skipped.values()) for f in first.files),
                    "problems": first.problems,
                    "first_import_seconds": round(first_seconds, 2),
                    "events_per_second": round(stored / first_seconds),
                    "megabytes_per_second": round(size / 1024 / 1024 / first_seconds, 1),
                    # 0 for code before reading processes existed (run against it to compare)
                    "reading_processes": getattr(memory.settings.transcripts, "reading_processes", 0),
                    "first_import_cpu_seconds": round(first_cpu, 2),
                    "first_import_main_process_cpu_seconds": round(first_main_cpu, 2),
                    "events_per_cpu_second": round(stored / first_cpu),
                    "megabytes_per_cpu_second": round(size / 1024 / 1024 / first_cpu, 1),
                    "event_text_share": round(_event_text_bytes(root / "data") / size, 3),
                    "reimport_seconds": round(again_seconds, 4),
                    "reimport_added": again.added,
                    "reimport_share": round(again_seconds / first_seconds, 4),
                    "reimport_cpu_seconds": round(again_cpu, 4),
                    "reimport_cpu_share": round(again_cpu / first_cpu, 4),
                    "load_average_1min_before": round(load_before, 2),
                    "load_average_1min": round(load, 2),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
