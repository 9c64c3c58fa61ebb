"""The commit protocol: a versioned metadata log with put-if-absent commits."""
