"""Connected components: label each node with the smallest node id of its component.

Input ``edges`` (``src``, ``dst``, treated as undirected) -> output ``labels``
(``node``, ``label``). Labels spread to neighbours; each node keeps the smallest seen.
"""


def pipeline(p):
    edges = p.input("edges")
    links = edges.select(node="src", other="dst").concat(edges.select(node="dst", other="src"))
    nodes = links.select("node", label="node").distinct()

    def spread(labels):
        offered = labels.join(links, on="node").select(node="other", label="label")
        return offered.concat(nodes).min(by="node", column="label", name="label")

    p.output("labels", nodes.iterate(spread), key="node")
