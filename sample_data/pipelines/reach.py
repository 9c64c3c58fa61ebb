"""Reachability: every node reachable from each root (a root reaches itself).

Inputs ``edges`` (``src``, ``dst``) and ``roots`` (``node``) -> output ``reach``
(``root``, ``node``). A fixed point: start from the roots, follow one edge per round.
"""


def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    start = roots.select(root="node", node="node")
    steps = edges.select(node="src", next="dst")

    def one_more_hop(reached):
        return (reached.join(steps, on="node").select("root", node="next")
                .concat(start).distinct())

    p.output("reach", start.iterate(one_more_hop), key=["root", "node"])
