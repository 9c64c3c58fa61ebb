"""``ddcli explain``: what a pipeline will do, from its file and the store, without Spark."""
