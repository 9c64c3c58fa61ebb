"""What changes a store besides a run: ingest, upsert, drop, garbage collection, leases."""
