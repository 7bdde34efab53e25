"""Indexer: chunker, embedders, index state with dirty markers, FTS5 and vector stores, sync and rebuild."""
