"""PostgreSQL migrations of a project's schema, one module each (versions independent of SQLite's)."""
