"""Where a store's files live: one interface, one backend per module."""
