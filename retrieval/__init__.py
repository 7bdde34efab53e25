"""Retrieval: exact and hybrid memory search, recall with provenance, result shaping."""
