"""Directed triangles, with state proportional to the graph: a delta-query join.

Input ``edges`` (``src``, ``dst``) -> output ``triangles`` (``a``, ``b``, ``c``): every
``a, b, c`` with edges a->b, a->c and b->c, once (edges are taken as a set: duplicates and
self-loops do not count). Edges (1,2), (1,3), (2,3) added at the same time give exactly
one triangle (1,2,3).

An ordinary plan ``ab.join(ac, on="a").join(bc, on=["b", "c"])`` keeps every two-path
a->b, a->c as state, which for a node of degree k is k^2 rows. The delta join keeps only
the edges: each change of one of the three uses of ``edges`` is joined against the other
two (see ops/operators/delta_join.py).

    ddcli ingest edges sample_data/triangle_edges_1.csv
    ddcli run sample_data/pipelines/triangles.py
    ddcli ingest edges sample_data/triangle_edges_2.csv
    ddcli run sample_data/pipelines/triangles.py
    ddcli history triangles
"""


def pipeline(p):
    edges = p.input("edges").distinct().filter("src <> dst")
    triangles = p.delta_join([(edges, "a", "b"), (edges, "a", "c"), (edges, "b", "c")])
    p.output("triangles", triangles, key=["a", "b", "c"])
