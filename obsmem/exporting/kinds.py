"""What a project export holds: one record kind per canonical table (or part of one), in restore order.

The exporter and the restorer are driven by :data:`KINDS`: adding a canonical table to the export is one
entry here. Every other table of a project database must be named in :data:`DERIVED_TABLES` with the
reason it is not exported (an index rebuilt from the canonical rows, runtime state), so a new table can
never be dropped from exports silently: :func:`unclassified_tables` finds it and the export is refused.

The order of :data:`KINDS` is the order of the file and of the restore: every row's references (foreign
keys, triggers) point at rows of earlier kinds or earlier rows of its own kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.exporting import postgres
from obsmem.exporting.generations import finish_generations, insert_generation, replay_active_generation
from obsmem.exporting.rows import SEQUENCE_TABLE, RestoreState, raise_sequence
from obsmem.exporting.trust_rules import check_trust
from obsmem.exporting.write_rules import check_observation_ids, check_reflection_ids

RowRestorer = Callable[[RestoreState, "RecordKind", dict[str, Any]], None]
KindFinisher = Callable[[RestoreState], None]


@dataclass(frozen=True)
class RecordKind:
    """One kind of record: the rows of ``table`` (those passing ``where``) in primary-key order.

    ``restore`` writes one row (default: a plain insert of the exported columns); ``after`` runs once the
    restore has passed every record of this kind, whether or not the file held any.
    """

    name: str
    table: str
    where: str = ""
    order_by: str = ""  # for a table without a primary key whose rowids differ between copies
    optional: bool = False  # a table that only some databases have: exported when it exists
    restore: RowRestorer | None = None
    after: KindFinisher | None = None


KINDS: tuple[RecordKind, ...] = (
    RecordKind("session", "sessions"),
    RecordKind("event", "events"),
    RecordKind("observation", "memories", where="kind = 'observation'"),
    # A memory's id is made from its sources or supports too: checked once they are all in.
    RecordKind("observation_source", "observation_sources", after=check_observation_ids),
    RecordKind("reflection", "memories", where="kind = 'reflection'"),
    RecordKind("reflection_support", "reflection_supports", after=check_reflection_ids),
    # Generations are restored through the schema's own rules (see obsmem/exporting/generations.py).
    RecordKind("generation", "generations", restore=insert_generation),
    RecordKind("generation_reflection", "generation_reflections"),
    # Records attach only to a running generation (a schema trigger), so restored generations wait in the
    # running state until the last kind of record that attaches to them is in.
    RecordKind("dropped_observation", "dropped_observations", after=finish_generations),
    RecordKind("active_generation", "active_generation", restore=replay_active_generation),
    RecordKind("coverage", "coverage"),
    RecordKind("observer_progress", "observer_progress"),
    RecordKind("pipeline_event", "om_events"),
    RecordKind("model_override", "model_overrides"),
    # Where the job and event-log ids continue: the history cites job ids (coverage, generations, the event
    # log), so a restored project must never hand those ids out again to new jobs.
    RecordKind(
        "id_sequence", SEQUENCE_TABLE, where="name IN ('jobs', 'om_events')", order_by="name", restore=raise_sequence
    ),
    # Notes written by agents and people, then the judgments of them and the append-only trust ledger (a
    # judgment cites its note; ledger entries keep their ids, so the ledger's order survives the copy).
    RecordKind("note", "notes"),
    RecordKind("judgment", "judgments", order_by="judgment_id"),
    RecordKind("trust_entry", "trust_ledger", after=check_trust),
    # How far each agent transcript was imported, and the agents' record ids seen: a copy that imports the
    # same transcripts again stores nothing twice (see docs/importing.md).
    RecordKind("import_file", "import_files", order_by="source, path"),
    RecordKind("import_record", "import_records", order_by="record_id"),
)
KIND_INDEX: dict[str, int] = {kind.name: position for position, kind in enumerate(KINDS)}
EXPORTED_TABLES: frozenset[str] = frozenset(kind.table for kind in KINDS)

# Tables a project database holds that an export leaves out, each with the reason. Everything here is
# rebuilt from the canonical rows or belongs to the running process, never to the project's history.
DERIVED_TABLES: dict[str, str] = {
    "schema_migrations": "the migration ledger: the restoring database has its own, for its own code",
    "memory_trigrams": "exact search's trigram index: filled by triggers as memories are restored",
    "memory_trigram_terms": "the vocabulary view of memory_trigrams",
    "event_trigrams": "conversation search's trigram index of events: rebuilt from the restored events",
    "event_trigram_terms": "the vocabulary view of event_trigrams",
    "event_keys": "event id prefixes for recall: rebuilt from the restored events with event_trigrams",
    "event_trigram_progress": "how far event_trigrams has got: a restored copy indexes its events anew",
    "event_marker_progress": "which events the semantic indexer has marked: a restored copy marks its events anew",
    "semantic_state": "the semantic index's state row: a restored project starts with no index",
    "semantic_pending": "the indexer's queue: filled by triggers as memories are restored, so all get indexed",
    "semantic_sources": "semantic index: which memories are indexed (rebuilt by indexing)",
    "semantic_chunks": "semantic index: chunks of memory text (rebuilt by indexing)",
    "semantic_vectors": "semantic index: embeddings (rebuilt by indexing, from the same model)",
    "semantic_removed": "semantic index: removal log for other processes' in-memory vectors",
    "semantic_fts": "semantic index: keyword documents (rebuilt by indexing)",
    "semantic_fts_vocab": "semantic index: keyword vocabulary (no longer made; dropped on a rebuild)",
    "semantic_context": "semantic index: neighbours' context in keyword documents (rebuilt by indexing)",
    "semantic_postings": "semantic index on PostgreSQL: keyword postings (rebuilt by indexing)",
    "semantic_terms": "semantic index on PostgreSQL: chunks per keyword token (rebuilt by indexing)",
    "semantic_keyword_totals": "semantic index on PostgreSQL: keyword document totals (rebuilt by indexing)",
    "note_words": "notes' keyword index: filled by triggers as notes are restored",
    "note_trigrams": "notes' trigram index for exact search: filled by triggers as notes are restored",
    "jobs": "the background job queue: runtime work; housekeeping queues what a restored project needs",
    "current_activity": "the model stage running now, per session: ephemeral",
}


def project_tables(conn: apsw.Connection) -> set[str]:
    """The tables and virtual tables of the database (not SQLite's own, not virtual tables' shadows); on
    PostgreSQL the tables of the project's schema."""
    if postgres.is_postgres(conn):
        return postgres.tables(conn)
    rows = conn.execute("PRAGMA main.table_list").fetchall()
    return {
        str(name) for _, name, kind, *_ in rows if kind in ("table", "virtual") and not str(name).startswith("sqlite_")
    }


def exportable_tables(conn: apsw.Connection) -> set[str]:
    """The project's tables and SQLite's id sequences, where the database has them (PostgreSQL's identity
    sequences stand for them, always)."""
    if postgres.is_postgres(conn):
        return project_tables(conn) | {SEQUENCE_TABLE}
    found = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (SEQUENCE_TABLE,))
    return project_tables(conn) | ({SEQUENCE_TABLE} if found.fetchone() else set())


def unclassified_tables(conn: apsw.Connection) -> list[str]:
    """Tables neither exported nor declared derived: an export would lose them."""
    return sorted(project_tables(conn) - EXPORTED_TABLES - set(DERIVED_TABLES) - postgres.CARRIER_TABLES)
