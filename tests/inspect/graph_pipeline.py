"""The pipeline the explain, runs and report tests share: three loops that take three
paths (reachability in tasks by root, connected components resident, one with a
Spark-only function round by round), a shared arrangement and a priority."""

import textwrap

PIPELINE = textwrap.dedent('''\
    def pipeline(p):
        edges = p.input("edges")
        roots = p.input("roots")
        start = roots.select(root="node", node="node")
        steps = edges.select(node="src", next="dst")
        by_node = steps.arrange("node")
        fanout = by_node.count(by="node")
        twice = by_node.join(by_node.select(node="next", back="node"), on="node")

        def hop(reached):
            return reached.join(steps, on="node").select("root", node="next").concat(start).distinct()

        reach = start.iterate(hop, name="reach")
        links = steps.select("node", other="next").concat(steps.select(node="next", other="node"))
        labels = links.select("node", label="node").distinct()

        def spread(lab):
            offered = lab.join(links, on="node").select(node="other", label="label")
            return offered.concat(labels).min(by="node", column="label", name="label")

        cc = labels.iterate(spread, name="cc")

        def odd(x):
            return x.filter("length(cast(root AS STRING)) > 0").concat(start).distinct()

        spark_only = start.iterate(odd, name="spark_only", priority="length(root)")
        p.output("reach", reach, key=["root", "node"])
        p.output("labels", cc, key="node")
        p.output("fanout", fanout)
        p.output("twice", twice)
        p.output("odd", spark_only)
''')
