"""Memory and event identity.

A memory id is the SHA-256 of a canonical JSON document of what defines the memory, so the same
observation always gets the same id and writes are idempotent. Models and people see the first
12 lowercase hex characters; ``recall`` accepts any unique prefix of 12 to 64 of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable

from obsmem.errors import InvalidId

DISPLAY_LENGTH = 12
FULL_LENGTH = 64
_ID_PREFIX = re.compile(r"[0-9a-f]{12,64}")


def canonical_json(document: object) -> bytes:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 (not ASCII-escaped)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def normalise_source_refs(refs: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Sorted and de-duplicated, so the order a model cites refs in never changes an id."""
    return sorted(set(refs))


def observation_id(session_id: str, timestamp: str, content: str, source_refs: Iterable[tuple[str, int]]) -> str:
    document = {
        "kind": "observation",
        "session_id": session_id,
        "timestamp": timestamp,
        "content": content,
        "source_refs": [[sid, seq] for sid, seq in normalise_source_refs(source_refs)],
    }
    return hashlib.sha256(canonical_json(document)).hexdigest()


def reflection_id(session_id: str, timestamp: str, content: str, supporting_ids: Iterable[str]) -> str:
    document = {
        "kind": "reflection",
        "session_id": session_id,
        "timestamp": timestamp,
        "content": content,
        "supporting_observation_ids": sorted(set(supporting_ids)),
    }
    return hashlib.sha256(canonical_json(document)).hexdigest()


def event_id(session_id: str, seq: int) -> str:
    """An event's id: the SHA-256 of its address, so it never changes and is the same after an export and
    import. Shown and recalled like a memory id (12 to 64 hex characters)."""
    if type(seq) is not int:  # noqa: E721 (a bool or an int subclass takes the general path)
        return hashlib.sha256(canonical_json({"kind": "event", "session_id": session_id, "seq": seq})).hexdigest()
    # canonical_json of that document, spelt out: every append computes one per event, and building and
    # sorting a dict cost more than the hash itself.
    text = '{"kind":"event","seq":' + str(seq) + ',"session_id":' + json.dumps(session_id, ensure_ascii=False) + "}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def display_id(memory_id: str) -> str:
    return memory_id[:DISPLAY_LENGTH]


def parse_id_prefix(value: object, field: str = "id") -> str:
    """Validate a recall id: 12 to 64 lowercase hex characters."""
    if not isinstance(value, str) or not _ID_PREFIX.fullmatch(value):
        raise InvalidId(
            f"{field} must be 12 to 64 lowercase hex characters (a memory id or its 12-character display form)",
            field=field,
        )
    return value
