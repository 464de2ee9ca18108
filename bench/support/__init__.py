"""Helpers shared by the benchmark scripts under ``bench/`` (not part of the package)."""
