"""Node-set reachability: every node reachable from any root (a root reaches itself).

Inputs ``edges`` (``src``, ``dst``) and ``roots`` (``node``) -> output ``reached``
(``node``). The roots' reach as one set, not per root (``reach.py`` keeps the pairs): no
column deals its rows to tasks, so the loop runs as one task or round by round.
"""


def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    steps = edges.select(node="src", next="dst")

    def one_more_hop(reached):
        return reached.join(steps, on="node").select(node="next").concat(roots).distinct()

    p.output("reached", roots.iterate(one_more_hop), key=["node"])
