"""Phrases of common words on PostgreSQL: an index of the joins between adjacent words.

pg_trgm indexes the trigrams of each word on its own, never one that spans a space, so a phrase of common
words (``login session``) has only common trigrams to look up, and was answered by walking the date index
until enough rows matched: 8,231 rows at 1M memories, where SQLite's window plan probes a few hundred
(its FTS5 trigrams do span spaces). ``obsmem_word_joins`` lists, for each pair of adjacent words (runs of
ASCII letters and digits, ASCII letters folded as ``ILIKE`` under ``"C"`` folds them), the last three
characters of the first word, the characters between the two, and the first three of the second:
``gin ses`` for ``login session``. A needle that holds such a join between two of its words, with the
words long enough (or whole, between two gaps of the needle), holds the same key in every row that
matches it, so a GIN index on the list finds the rows to check (``retrieval/exact_postgres.py``:
``needle_word_joins``). Joins across more than ``WORD_JOIN_MAX_GAP`` characters
(:mod:`obsmem.storage.text_keys`) are not listed (a needle's longer gap is not looked up): the keys stay
short whatever the text.

The index only narrows: each row it yields is checked as every other plan checks it. PostgreSQL keeps it in
the write's own transaction, as the trigram indexes; each adjacent pair of words is one more index entry of
a write. PL/pgSQL over ``regexp_matches``, in-place array assignment; its declared cost keeps the planner
from computing it row by row in a scan instead of reading the index.
"""

from obsmem.storage.text_keys import WORD_JOIN_MAX_GAP

NAME = "word_joins"

SQL = rf"""
CREATE FUNCTION obsmem_word_joins(t TEXT) RETURNS TEXT[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE COST 1000 AS $$
DECLARE
    part TEXT[];  -- a word and the characters after it
    joins TEXT[] := '{{}}';
    n INTEGER := 0;
    previous TEXT;  -- the previous word's last three characters and the gap after it, when the gap is short
BEGIN
    FOR part IN SELECT regexp_matches(lower(t COLLATE "C"), '([0-9a-z]+)([^0-9a-z]*)', 'g') LOOP
        IF previous IS NOT NULL THEN
            n := n + 1;
            joins[n] := previous || left(part[1], 3);
        END IF;
        IF length(part[2]) BETWEEN 1 AND {WORD_JOIN_MAX_GAP} THEN
            previous := right(part[1], 3) || part[2];
        ELSE
            previous := NULL;
        END IF;
    END LOOP;
    RETURN joins;
END
$$;
CREATE INDEX memory_word_joins ON memories USING gin (obsmem_word_joins(content));
CREATE INDEX event_word_joins ON events USING gin (obsmem_word_joins(content));
CREATE INDEX event_argument_word_joins ON events USING gin (obsmem_word_joins(tool_args));
"""
