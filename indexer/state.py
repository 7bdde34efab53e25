"""The index state row: signature, dirty flag, version and the published HNSW file.

- ``signature`` — what the derived data was made with (embedding model, chunk settings). A different
  configured signature means the index is incompatible: every derived row is dropped and rebuilt, but only
  when the index was never built (NULL) or an explicit ``obsmem index`` adopts the new settings; a process
  whose settings differ from a built index refuses it instead (:meth:`IndexState.built_with_other_settings`).
- ``dimensions`` — vector size, learnt from the first valid embedding reply.
- ``fts_tokenizer`` — the keyword tables' signature (layout, tokenizer, context size; see
  :func:`obsmem.indexer.keywords.keyword_signature`); a change rebuilds only those tables. The layout is
  this code's, not a setting: keyword rows of the same settings written by an older release (an older
  layout version) are rebuilt by any indexer, background ones included, while rows of other settings or of
  a newer layout are another process's (:meth:`IndexState.keyword_difference`).
- ``dirty`` — committed as 1 before a write that spans SQLite and the index file directory, cleared
  when both agree again. Seen at start-up it means the file side cannot be trusted: the HNSW file is
  discarded and rebuilt from the stored embeddings (no model call). Canonical rows are never touched.
- ``version`` — bumped by every commit that adds or removes vectors, so a process holding the vectors in
  memory knows when to catch up.
- ``hnsw_*`` — the published graph file, its size and checksum (verified before every load), the state
  version it reflects and how many live items it holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apsw

from obsmem.dates import now_iso
from obsmem.indexer.chunker import ChunkSettings

# How the stored keyword rows differ from those a process would write (IndexState.keyword_difference).
SAME = "same"
SETTINGS = "settings"  # other keyword settings (or a signature this code cannot read)
OLDER_LAYOUT = "older_layout"  # the same settings, rows of an older release's layout: rebuilt by anyone
NEWER_LAYOUT = "newer_layout"  # the same settings, rows of a newer release's layout (or an unknown one)

STATE_COLUMNS = (
    "signature, dimensions, fts_tokenizer, dirty, version, hnsw_file, hnsw_bytes, hnsw_checksum, "
    "hnsw_version, hnsw_count, removed_floor"
)


@dataclass(frozen=True)
class IndexState:
    signature: str | None
    dimensions: int | None
    fts_tokenizer: str | None
    dirty: bool
    version: int
    hnsw_file: str | None
    hnsw_bytes: int | None
    hnsw_checksum: str | None
    hnsw_version: int | None
    hnsw_count: int | None
    removed_floor: int

    @classmethod
    def read(cls, conn: apsw.Connection) -> IndexState:
        row = conn.execute(f"SELECT {STATE_COLUMNS} FROM semantic_state WHERE id = 1").fetchone()
        return cls(row[0], row[1], row[2], bool(row[3]), *row[4:])

    def compatible_with(self, signature: str, keyword_signature: str) -> bool:
        return self.signature == signature and self.fts_tokenizer == keyword_signature

    def built_with_other_settings(self, signature: str, keyword_signature: str) -> bool:
        """Was the index built (a signature recorded) with settings other than these? Such an index belongs
        to whoever runs with its settings, and only an explicit ``obsmem index`` replaces it: several
        processes share one index (one database, or one data directory), and each one that replaced an
        index of other settings on its own would undo the others' work, round after round. An index never
        built (NULL signature, as a new project's is) is anyone's to build, and so are keyword rows that differ
        only by an older layout: a release that changes the layout rebuilds them by itself (see
        :meth:`keyword_difference`)."""
        if self.signature is None:
            return False
        return self.signature != signature or self.keyword_difference(keyword_signature) in (SETTINGS, NEWER_LAYOUT)

    def keyword_difference(self, keyword_signature: str) -> str:
        """How the stored keyword rows differ from those ``keyword_signature`` describes: ``SAME``;
        ``SETTINGS`` (the ``[semantic.bm25]`` settings differ, or the stored signature is none this code
        writes); ``OLDER_LAYOUT`` (the same settings, written by a release whose layout this code's
        supersedes); ``NEWER_LAYOUT`` (the same settings, written by a newer release, or in a layout this code
        cannot place, so that two processes never both find the other's rows older and rebuild them in turn). A
        layout is ``name-N`` parts joined by ``+``; older means the same names, no number higher and one
        lower (see :data:`obsmem.indexer.keywords.LAYOUT`)."""
        if self.fts_tokenizer == keyword_signature:
            return SAME
        stored, wanted = _keyword_parts(self.fts_tokenizer), _keyword_parts(keyword_signature)
        if stored is None or wanted is None or stored[1] != wanted[1]:
            return SETTINGS
        (stored_layout, _), (wanted_layout, _) = stored, wanted
        if (
            stored_layout is not None
            and wanted_layout is not None
            and stored_layout != wanted_layout
            and [name for name, _ in stored_layout] == [name for name, _ in wanted_layout]
            and all(old <= new for (_, old), (_, new) in zip(stored_layout, wanted_layout, strict=True))
        ):
            return OLDER_LAYOUT
        return NEWER_LAYOUT

    def differing_settings(self, signature: str, keyword_signature: str) -> list[str]:
        """The names of the settings the index was built with other values of (never the values: an
        embedder's identity may name a private model), in the ``[semantic]`` section's spelling."""
        names: list[str] = []
        if self.signature != signature:
            stored, wanted = _signature_parts(self.signature), _signature_parts(signature)
            if stored is None or wanted is None:  # not a signature this version writes: name what one covers
                names += ["embedding", "chunk_bytes", "overlap_bytes", "max_lines"]
            else:
                names += [_SETTING_NAMES.get(part, part) for part in sorted(stored) if stored[part] != wanted.get(part)]
                names += [_SETTING_NAMES.get(part, part) for part in sorted(set(wanted) - set(stored))]
        difference = self.keyword_difference(keyword_signature)
        if difference == SETTINGS:
            names.append("bm25")
        elif difference == NEWER_LAYOUT:
            names.append(NEWER_LAYOUT_NAME)
        return names


# What differing_settings calls keyword rows of a newer release's layout (not a setting: see settings_mismatch).
NEWER_LAYOUT_NAME = "keyword layout (written by a newer obsmem release)"

# What each part of the signature is called in the settings ([semantic] section).
_SETTING_NAMES = {
    "embedder": "embedding",
    "chunk_bytes": "chunk_bytes",
    "overlap_bytes": "overlap_bytes",
    "max_lines": "max_lines",
    "sentences": "embedding.sentences",
}


def _json_object(signature: str | None) -> dict[str, object] | None:
    """A stored signature's JSON object, or None when it is none (NULL, or not one this code writes)."""
    try:
        parts = json.loads(signature or "")
    except ValueError:
        return None
    return parts if isinstance(parts, dict) else None


def _signature_parts(signature: str | None) -> dict[str, object] | None:
    """A signature's parts, ``sentences`` filled in where :func:`index_signature` leaves it out."""
    parts = _json_object(signature)
    if parts is not None:
        parts.setdefault("sentences", "whole")
    return parts


def _keyword_parts(signature: str | None) -> tuple[tuple[tuple[str, int], ...] | None, dict[str, object]] | None:
    """A keyword signature as its layout's ``(name, version)`` parts (None: not a layout this code can
    read) and the settings it records besides; None when it is not a signature this code writes."""
    parts = _json_object(signature)
    if parts is None:
        return None
    return _layout_versions(parts.pop("layout", None)), parts


def _layout_versions(layout: object) -> tuple[tuple[str, int], ...] | None:
    """``contextual-1+postings-1`` -> ``(("contextual", 1), ("postings", 1))``; None for anything else."""
    if not isinstance(layout, str):
        return None
    versions = []
    for part in layout.split("+"):
        name, _, number = part.rpartition("-")
        if not name or not number.isdigit():
            return None
        versions.append((name, int(number)))
    return tuple(versions)


def index_signature(embedder_identity: str, chunking: ChunkSettings, sentences: str) -> str:
    parts: dict[str, object] = {
        "embedder": embedder_identity,
        "chunk_bytes": chunking.chunk_bytes,
        "overlap_bytes": chunking.overlap_bytes,
        "max_lines": chunking.max_lines,
    }
    # Only when not "whole", so an index built whole (as every index was before the setting existed) keeps
    # the signature it had; with the default ("mean") such an index is rebuilt once, by `obsmem index`.
    if sentences != "whole":
        parts["sentences"] = sentences
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def update_state(conn: apsw.Connection, **values: object) -> None:
    """Set columns of the state row (inside the caller's write transaction)."""
    names = list(values)
    assignments = ", ".join(f"{name} = ?" for name in names)
    conn.execute(
        f"UPDATE semantic_state SET {assignments}, updated_at = ? WHERE id = 1",
        (*[values[name] for name in names], now_iso()),
    )


def mark_dirty(conn: apsw.Connection) -> None:
    update_state(conn, dirty=1)


def bump_version(conn: apsw.Connection) -> tuple[int, int]:
    """Increment the version; returns ``(before, after)``."""
    before = conn.execute("SELECT version FROM semantic_state WHERE id = 1").fetchone()[0]
    update_state(conn, version=before + 1)
    return before, before + 1
