"""How the PostgreSQL exact-search indexes key text, where both their migration and the searcher that reads
them need it: kept outside the PostgreSQL package, which loads the driver, so the searcher's estimates (and
their tests) need no database client."""

# The longest run of other characters between two words that still makes a join of ``p0011_word_joins``
# (``": "`` in JSON is 4); a needle's longer gap is not looked up.
WORD_JOIN_MAX_GAP = 4
