"""The operators: each turns its inputs' changes into its own, one family per module."""
