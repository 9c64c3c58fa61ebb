"""``ddcli verify``: a pipeline recomputed from scratch by an independent oracle."""
