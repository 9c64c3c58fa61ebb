"""``ddcli bench tpch``: TPC-H's tables and refreshes (data.py), its 22 queries as SQL models
(queries/), each engine's side (engines.py, spark_sql.py), the driver (bench.py), the picture
(plot.py)."""
