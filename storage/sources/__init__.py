"""Lake tables as sources: ``ddcli ingest TRACE delta:PATH`` and ``iceberg:…`` (lake.py).

Which sources are lake tables is told here, so that an ingest of update files need not
import the lake code (and what it imports) to find that it has none."""

PREFIXES = ("delta:", "iceberg:")


def is_lake_source(source: str) -> bool:
    return isinstance(source, str) and source.startswith(PREFIXES)
