"""Retrieval research prototypes used to choose the product recipe (see the study script)."""
