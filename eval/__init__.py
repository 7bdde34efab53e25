"""Eval: datasets, runner, metrics, calibration, reports and plots."""
