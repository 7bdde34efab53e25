"""Indexer: chunker, embedders, index state with dirty markers, FTS5 and vector stores, sync and rebuild.

The names below are what other layers may import: the app floor builds a :class:`SemanticIndexer`, and
retrieval reads through the :class:`IndexReader` contract (never the indexer's tables). The modules
inside are internal and may move. Only semantic mode imports this package, so it loads eagerly; the
local embedding model (ONNX Runtime, or torch for the fp32 encoder) still loads only when an embedder is
first used.
"""

from obsmem.indexer.embed_onnx import local_encoder
from obsmem.indexer.embedders import Embedder
from obsmem.indexer.encoder_build import BuiltEncoder
from obsmem.indexer.engine import SemanticIndexer
from obsmem.indexer.postgres import PostgresSemanticIndexer
from obsmem.indexer.postgres_reader import PostgresIndexReader
from obsmem.indexer.project import BatchReport, ProjectIndex
from obsmem.indexer.reader import IndexReader, ValidChunk
from obsmem.indexer.state import IndexState
from obsmem.indexer.vectors import EVENTS as EVENT_SOURCES
from obsmem.indexer.vectors import MEMORIES as MEMORY_SOURCES
from obsmem.indexer.vectors import Filter, VectorSet

__all__ = [
    "EVENT_SOURCES",
    "MEMORY_SOURCES",
    "BatchReport",
    "BuiltEncoder",
    "Embedder",
    "Filter",
    "IndexReader",
    "IndexState",
    "PostgresIndexReader",
    "PostgresSemanticIndexer",
    "ProjectIndex",
    "SemanticIndexer",
    "ValidChunk",
    "VectorSet",
    "local_encoder",
]
