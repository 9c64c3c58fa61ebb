"""The warm engine: a per-user service process that keeps a Spark session warm between
``ddcli run`` and ``ddcli verify`` commands (docs/architecture.md, "The warm engine").

``identity`` names the service a command may use, ``folder`` is where services live,
``protocol`` is what client and service say, ``client`` hands a command over, ``server``
is the service, ``command`` runs one client's command inside it.
"""
