"""``reduce``: the changes shuffled by key, then a kernel per partition."""
