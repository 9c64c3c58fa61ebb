"""The type matrix of tests/types/test_type_matrix.py: every column type through every
operator family, against the reference.

Each column type has two input traces of its own: ``xs_T`` (columns ``g`` int64, ``id``
int64, ``c`` of the type; key ``g``) and ``ys_T`` (``c``, ``id``; key ``c``: a trace
arranged by a column of the type). Their updates are random bags over a few values of the
type (its edge cases, nulls in ``g`` and ``c``), with retractions only of rows inserted at
an earlier or equal time, so every collection at every time is a bag (no negative
multiplicity) and SQL's meaning of every operator applies. tests/pipelines/test_operators.py
covers negative multiplicities with integers.

``columns``: the column types and their values; ``cells``: the operators and what each
cell should give; ``runs``: the update streams, the runs of a group and the check of a cell.

One pipeline per group of types holds every cell of its types as an output, so one run
checks them all. A group runs in ``RUNS`` runs with ``advance --since`` and compaction
between them (tests/helpers/pipeline_bench.py's schedule: several distinct times per run,
``ys`` lagging behind ``xs``). When a run fails, the cell whose line the error names is
left out and the others run again from the start; an error that names no line splits the
cells by type, then one type's in halves, each run on its own, until each failing cell
stands alone: one broken cell never hides the others. A type whose updates ingest refuses has every cell
fail with that error, and is left out of the pipeline.
"""
