"""The commands of ``ddcli``, one module per family; ``ddcli/cli.py`` registers them."""
