"""``python -m ddcli``: the same as the ``ddcli`` console script."""

from ddcli.cli import main

if __name__ == "__main__":
    main()
