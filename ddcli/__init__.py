"""ddcli: differential dataflow as a batch command-line tool.

``ddcli.cli`` is the command line (``ddcli`` / ``python -m ddcli``); the library it calls
lives in ``storage`` (traces on disk, no Spark) and ``ops`` (pipelines on Spark).
"""

__version__ = "0.1.0"
