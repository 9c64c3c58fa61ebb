"""``ddcli report``: one self-contained HTML page of a store (tables, a lineage graph, plots)."""
