"""A store's metadata as plain values: traces, their frontiers, layers and holds."""
