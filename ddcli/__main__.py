"""``python -m ddcli``: the same as the ``ddcli`` console script."""

from ddcli.launch import main

if __name__ == "__main__":
    main()
