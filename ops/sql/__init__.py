"""The SQL front end: a model file of ``CREATE [MATERIALIZED] VIEW`` statements planned into
the same dataflow graph a Python pipeline builds (docs/sql.md).

``model.py`` reads the file and its statements; ``scope.py`` names columns; ``expressions.py``
writes an expression in Spark's dialect over those names; ``query.py`` plans a query (set
operations, WITH, WITH RECURSIVE) and ``select.py`` one SELECT (FROM, WHERE, GROUP BY, HAVING,
windows, DISTINCT, ORDER BY ... LIMIT); ``joins.py`` builds inner and outer joins and
``subqueries.py`` decorrelates subqueries into them. Everything is planned without Spark,
and anything that cannot be maintained is refused with the file, line and column.
"""
