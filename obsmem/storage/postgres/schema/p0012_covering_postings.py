"""The keyword list reads its postings from the index alone: the postings' key carries each posting's
weighted count and its chunk's length (``INCLUDE (freq, length)``).

A query token's postings sit together in the ``(token, label)`` key but scattered over the table, one per
heap page: the table is written chunk by chunk, each chunk's hundred tokens side by side. Scoring 5,000
postings of a word at a million chunks read 5,000 heap pages, 61 ms of an open hybrid search at 1M
(``docs/postgres.md``); with the two columns in the key, an index-only scan reads a few dozen leaf pages.
Index-only scans need the table's visibility map, which autovacuum keeps (leave it on). The key grows by
eight bytes a posting. The migration rebuilds the key, minutes at a million chunks (a hundred million
postings): plan it with the other index-building migrations (``obsmem upgrade``).
"""

NAME = "covering_postings"

SQL = """
ALTER TABLE semantic_postings DROP CONSTRAINT semantic_postings_pkey;
ALTER TABLE semantic_postings ADD CONSTRAINT semantic_postings_pkey PRIMARY KEY (token, label) INCLUDE (freq, length);
"""
