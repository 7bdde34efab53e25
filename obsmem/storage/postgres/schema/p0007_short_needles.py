"""Short needles on PostgreSQL: an index of every one- and two-character substring (SQLite: its trigram
vocabulary, whose terms a short needle begins).

pg_trgm indexes the trigrams of words (runs of letters and digits), so a needle of one or two characters,
or one whose runs of letters and digits are all shorter than three (``#9``, ``v1``, ``()``), gives it
nothing to look up, and a rare one was answered by reading the whole table. ``obsmem_short_grams`` lists
the characters of a text and its pairs of adjacent characters, ASCII letters folded (``lower`` under the
``"C"`` collation folds nothing else, as ``ILIKE`` there and SQLite's ``LIKE`` do); a GIN index on it
finds the rows holding every pair of a needle (or its one character). The index only narrows: ``ILIKE``
is checked on every row it yields. PostgreSQL keeps it in the write's own transaction, as the trigram
indexes; it costs writes about 0.5 ms per row (docs/postgres.md). PL/pgSQL with in-place array assignment:
about 0.1 ms for a 100-character text, linear in its length (a SQL function built on ``generate_series``
took ten times as long). Its declared cost
tells the planner as much, so it never computes it row by row in a scan instead of reading the index.
"""

NAME = "short_needles"

SQL = r"""
CREATE FUNCTION obsmem_short_grams(t TEXT) RETURNS TEXT[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE COST 1000 AS $$
DECLARE
    chars TEXT[] := string_to_array(lower(t COLLATE "C"), NULL);
    n INTEGER := coalesce(cardinality(chars), 0);
    grams TEXT[] := chars;
BEGIN
    FOR i IN 1 .. n - 1 LOOP
        grams[n + i] := chars[i] || chars[i + 1];
    END LOOP;
    RETURN grams;
END
$$;
CREATE INDEX memory_short_grams ON memories USING gin (obsmem_short_grams(content));
CREATE INDEX event_short_grams ON events USING gin (obsmem_short_grams(content));
CREATE INDEX event_argument_short_grams ON events USING gin (obsmem_short_grams(tool_args));
"""
