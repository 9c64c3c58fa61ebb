"""Weighted shortest paths, prioritized by distance.

Inputs ``edges`` (``src``, ``dst``, ``weight``: non-negative numbers, whole or not, such
as 4 or 0.5) and ``roots`` (``node``) -> output ``distances`` (``root``, ``node``, ``dist``,
a double): the least total weight of a path from each root to every node it reaches.

The loop variable is prioritized by the whole part of ``dist``: a candidate distance enters
the loop at that iteration (or the next one, if that is later), so iterations follow
distances as Dijkstra's algorithm does: when a node's distance is offered, every path
shorter by a whole unit has been settled, and a node's distance rarely changes twice.
Rounds run only at iterations where candidates are pending. The order never changes the
result, only the work.
"""


def shortest_paths(edges, roots, prioritized=True):
    start = roots.select(root="node", node="node", dist="CAST(0 AS DOUBLE)")
    steps = edges.select(node="src", next="dst", weight="CAST(weight AS DOUBLE)")

    def relax(dist):
        hop = dist.join(steps, on="node").select("root", node="next", dist="dist + weight")
        return hop.concat(start).min(by=["root", "node"], column="dist", name="dist")

    return start.iterate(relax, priority="CAST(dist AS BIGINT)" if prioritized else None,
                         name="sssp" if prioritized else "sssp_plain")


def pipeline(p):
    p.output("distances", shortest_paths(p.input("edges"), p.input("roots")), key=["root", "node"])
