"""The benchmarks behind ``ddcli bench``: they drive ``ops`` and ``storage`` and return figures."""
