"""Dataset loaders for the eval harness: LoCoMo and LongMemEval."""
