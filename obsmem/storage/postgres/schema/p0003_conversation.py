"""Conversation search on PostgreSQL: the events' substring and date indexes (SQLite's ``m0006``).

Exact search over events matches their content and their tool arguments, each on its own, newest first by
``created_at``. On SQLite a catch-up fills an FTS5 trigram table and partial date indexes up to a
watermark after the append; here ordinary indexes are kept by PostgreSQL in the append's own transaction,
so there is no watermark and nothing to catch up: a pg_trgm GIN index on each text and the two date orders.
"""

NAME = "conversation"

SQL = """
CREATE INDEX event_trigrams ON events USING gin (content gin_trgm_ops);
CREATE INDEX event_argument_trigrams ON events USING gin (tool_args gin_trgm_ops);
CREATE INDEX events_by_date ON events(created_at, id);
CREATE INDEX events_by_session_date ON events(session_id, created_at, id);
"""
