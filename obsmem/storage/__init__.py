"""Storage: connections, migrations and the schema of a project database."""
