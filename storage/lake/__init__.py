"""Every trace is also a Delta Lake table over its own layer files (see storage/lake/follow.py)."""
