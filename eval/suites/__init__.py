"""Eval suites: labelled questions, LoCoMo and LongMemEval, each scored per mode through the product."""
