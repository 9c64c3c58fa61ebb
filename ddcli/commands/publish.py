"""``ddcli publish``: a trace's current collection as a table of another lakehouse format.

Registered on the main app by ``ddcli/cli.py``; the work is in ``storage/lake/iceberg.py``
(pyiceberg, no Spark).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt, store_at, trace_arg


@app.command(epilog=EXIT_CODES_HELP)
def publish(
    trace: Annotated[str, trace_arg("The pipeline output (or any trace) to publish.")],
    iceberg: Annotated[str, typer.Option(
        "--iceberg", metavar="CATALOG_URI#NS.TABLE",
        help="An Iceberg table in a SQL catalog, e.g. sqlite:////data/catalog.db#analytics.counts.")],
    warehouse: Annotated[Optional[str], typer.Option(
        "--warehouse", metavar="URI",
        help="Where a new table's files go (default: a folder 'warehouse' next to a SQLite catalog).")] = None,
    catalog_name: Annotated[str, typer.Option(
        "--catalog-name", metavar="NAME", help="The catalog's name, as its readers configure it.")] = "default",
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Publish the collection of TRACE at its latest complete time as an Iceberg table
    (its data columns and the multiplicity, as `ddcli query` shows them).

    The first publish creates the table; each later one applies the change since the time
    the table shows as one snapshot, copy on write (no delete files), whose summary names
    the ddcli time (`ddcli.time`) and upper. Publishing again with no change does nothing.

    Examples:

        ddcli publish counts --iceberg sqlite:////data/catalog.db#analytics.counts

        ddcli publish counts --iceberg postgresql://host/cat#bi.counts --warehouse s3://lake/wh
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.lake.iceberg import publish as publish_iceberg
    done = publish_iceberg(store_at(store), trace, iceberg, warehouse, catalog_name)
    what = {"created": "created", "current": "already current", "incremental": "updated",
            "full": "updated (full comparison)"}[done.how]
    render.report({"command": "publish", "trace": trace, "table": done.table, "snapshot": done.snapshot,
                   "time": done.time, "how": done.how, "changed_rows": done.changed_rows,
                   "rewritten_files": done.rewritten_files},
                  f"Iceberg table {done.table} {what} at time {done.time or 'upper'}: snapshot {done.snapshot}, "
                  f"{done.changed_rows} changed rows, {done.rewritten_files} files rewritten", out, output)
