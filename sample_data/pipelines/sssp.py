"""Weighted shortest paths, prioritized by distance.

Inputs ``edges`` (``src``, ``dst``, ``weight``: non-negative integers) and ``roots``
(``node``) -> output ``distances`` (``root``, ``node``, ``dist``): the least total weight
of a path from each root to every node it reaches.

The loop variable is prioritized by ``dist``: a candidate distance enters the loop at the
iteration equal to it (or the next one, if that is later), so iterations follow distances
as Dijkstra's algorithm does: when a node's distance is offered, every shorter path has
been settled, and a node's distance rarely changes twice. Rounds run only at iterations
where candidates are pending.
"""


def shortest_paths(edges, roots, prioritized=True):
    start = roots.select(root="node", node="node", dist="CAST(0 AS BIGINT)")
    steps = edges.select(node="src", next="dst", weight="CAST(weight AS BIGINT)")

    def relax(dist):
        hop = dist.join(steps, on="node").select("root", node="next", dist="dist + weight")
        return hop.concat(start).min(by=["root", "node"], column="dist", name="dist")

    return start.iterate(relax, priority="dist" if prioritized else None,
                         name="sssp" if prioritized else "sssp_plain")


def pipeline(p):
    p.output("distances", shortest_paths(p.input("edges"), p.input("roots")), key=["root", "node"])
