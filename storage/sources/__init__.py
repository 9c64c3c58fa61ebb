"""Lake tables as sources: ``ddcli ingest TRACE delta:PATH`` and ``iceberg:…`` (lake.py)."""
