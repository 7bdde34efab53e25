"""Export files changed on purpose, with a trailer that matches them (what a forger or a future writer makes)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson


def rewritten_export(data: bytes, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], path: Path) -> Path:
    """Write to ``path`` the export ``data`` with its records (header and trailer aside) passed through
    ``change``, and a trailer counting and checksumming the new records."""
    lines = data.splitlines()
    header, records = lines[0], [orjson.loads(line) for line in lines[1:-1]]
    changed = change(records)
    counts: dict[str, int] = {entry["kind"]: 0 for entry in orjson.loads(header)["tables"]}
    for record in changed:
        counts[record["kind"]] = counts.get(record["kind"], 0) + 1
    body = header + b"\n" + b"".join(orjson.dumps(record) + b"\n" for record in changed)
    trailer = {"kind": "end", "counts": counts, "records": len(changed), "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(body + orjson.dumps(trailer) + b"\n")
    return path
