"""Benchmarks of operators and pipelines whose every output change is checked against
DuckDB computing the same changes directly (independent SQL), and timed against it:
``reduce``, ``join`` and ``backfill`` (aggregates joined by key over a long history)."""
