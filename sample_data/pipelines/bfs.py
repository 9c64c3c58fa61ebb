"""Breadth-first search: the shortest hop count from each root to every node it reaches.

Inputs ``edges`` (``src``, ``dst``) and ``roots`` (``node``) -> output ``distances``
(``root``, ``node``, ``dist``).
"""


def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    start = roots.select(root="node", node="node", dist="CAST(0 AS BIGINT)")
    steps = edges.select(node="src", next="dst")

    def relax(dist):
        hop = dist.join(steps, on="node").select("root", node="next", dist="dist + 1")
        return hop.concat(start).min(by=["root", "node"], column="dist", name="dist")

    p.output("distances", start.iterate(relax), key=["root", "node"])
