"""One ``ddcli run``: plan, evaluate, write and commit a pipeline's changes."""
