"""Delta-query joins (ops/operators/delta_join.py) and the triangles sample, against brute force.

* Edges (1,2), (1,3), (2,3) added at one time give exactly one triangle.
* Random edge streams — duplicates, self-loops, retractions, many times per run, several
  runs with compaction between — equal brute-force enumeration at every time.
* A general delta join (four relations of different shapes, multiplicities, d = 2 with
  inputs sealed to different frontiers) equals the natural join computed by loops, and
  ``verify`` agrees.
* State: on a graph whose two-paths outnumber its edges more than 50 to 1, the delta
  query's state traces hold about one row per edge; the ordinary two-join plan's hold the
  two-paths (both measured from the store and printed).
"""

from __future__ import annotations

import itertools
import os
import random
from collections import defaultdict

import pyarrow as pa

from ops.verify.verify import verify_pipeline
from storage.lattice import parse_frontier
from tests.helpers import reference as R
from tests.pipelines.test_calculus import Bench, assert_refused, random_updates

from tests.helpers import REPO
TRIANGLES = os.path.join(REPO, "sample_data", "pipelines", "triangles.py")
EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])


def triangles_of_set(edges: R.Coll) -> R.Coll:
    """Brute force over the edge *set* without self-loops: every a->b, a->c, b->c once."""
    present = {(a, b) for (a, b), m in edges.rows.items() if m > 0 and a != b}
    nodes = {x for e in present for x in e}
    out = R.Coll(["a", "b", "c"])
    for a, b, c in itertools.permutations(sorted(nodes), 3):
        if (a, b) in present and (a, c) in present and (b, c) in present:
            out.add((a, b, c), 1)
    return out


def _expect(bench: Bench):
    return lambda t: {"triangles": triangles_of_set(bench.inputs_at(t)["edges"])}


# ------------------------------------------------------------------ the sample


def test_three_edges_added_at_one_time_make_exactly_one_triangle(spark, tmp_path):
    bench = Bench(tmp_path)
    sample = lambda f: os.path.join(REPO, "sample_data", f)  # noqa: E731
    # triangle_edges_1.csv: (1,2), (1,3), (2,3) at time 0; (3,4), (2,4) and a self-loop (4,4) at 1
    bench.store.ingest("edges", [sample("triangle_edges_1.csv")])
    bench.run(TRIANGLES)
    history = R.consolidated(bench.rows("triangles"), ["a", "b", "c"], ["time"])
    assert history == {((1, 2, 3), (0,)): 1, ((2, 3, 4), (1,)): 1}
    # triangle_edges_2.csv: (1,4) at 2; at 3 (2,3) goes and (1,2) is added a second time (a set: no change)
    bench.store.ingest("edges", [sample("triangle_edges_2.csv")])
    bench.run(TRIANGLES)
    at = lambda t: bench.output_at("triangles", (t,)).project(["a", "b", "c"])  # noqa: E731
    assert at(0) == {(1, 2, 3): 1}
    assert at(1) == {(1, 2, 3): 1, (2, 3, 4): 1}
    assert at(2) == {(1, 2, 3): 1, (2, 3, 4): 1, (1, 2, 4): 1, (1, 3, 4): 1}
    assert at(3) == {(1, 2, 4): 1, (1, 3, 4): 1}
    # the only state is the (distinct, loop-free) edge set
    assert list(bench.state("triangles")) == ["triangles.filter_2"]


def test_triangles_equal_brute_force_at_every_time_over_runs(spark, tmp_path):
    bench = Bench(tmp_path)
    rng, pool = random.Random(3), []

    def edge(rng):
        return (rng.randrange(6), rng.randrange(6))

    for r in range(3):
        times = [(t,) for t in range(5 * r, 5 * r + 5)]  # five epochs per run
        bench.ingest("edges", EDGES, random_updates(rng, edge, times, 40, pool))
        bench.run(TRIANGLES)
        bench.check_at_every_time(["triangles"], _expect(bench))
        if r < 2:
            bench.advance_and_compact(str(5 * r + 2), full=r == 1)
    # (verify of the sample itself trips over ops/verify/verify.py naming its own helper columns
    # "a" and "e", which clash with the output column "a"; the general test below verifies
    # a delta join whose columns do not clash)


# ------------------------------------------------------------------ a general delta join

GENERAL = '''
def pipeline(p):
    rs = p.input("rs")
    ss = p.input("ss")
    p.output("q", p.delta_join([
        (rs, "x", "y"),
        (ss, {"y": "k", "z": "w"}),
        (rs.filter("y % 2 = 0"), {"z": "x", "x": "y"}),
        ss.select(x="k", tag="v"),
    ]))
'''
RS = pa.schema([("x", pa.int64()), ("y", pa.int64())])
SS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64())])


def general_ref(i) -> R.Coll:
    rs, ss = i["rs"].rows, i["ss"].rows
    out = R.Coll(["x", "y", "z", "tag"])
    for (x, y), m1 in rs.items():
        for (k, _, w), m2 in ss.items():
            if k != y:
                continue
            z = w
            for (x3, y3), m3 in rs.items():  # (z, x) from rs filtered on even y
                if x3 != z or y3 != x or y3 % 2:
                    continue
                for (k4, v4, _), m4 in ss.items():
                    if k4 == x:
                        out.add((x, y, z, v4), m1 * m2 * m3 * m4)
    return out


def test_a_four_way_delta_join_with_partially_ordered_times_equals_the_natural_join(spark, tmp_path):
    bench = Bench(tmp_path, d=2)
    path = bench.pipeline("general", GENERAL)
    rng, pools = random.Random(9), defaultdict(list)
    rs_row = lambda rng: (rng.randrange(3), rng.randrange(3))  # noqa: E731
    ss_row = lambda rng: (rng.randrange(3), rng.choice("pq"), rng.randrange(3))  # noqa: E731
    uppers = {"rs": ["(2,0)", "(3,2) (4,0)", "(6,0)"], "ss": ["(1,2) (2,0)", "(4,0)", "(6,0)"]}
    prev = {"rs": [(0, 0)], "ss": [(0, 0)]}
    for r in range(3):
        for name, schema, make_row in (("rs", RS, rs_row), ("ss", SS, ss_row)):
            lo, hi = prev[name], parse_frontier(uppers[name][r], 2)
            cells = [(a, b) for a in range(7) for b in range(4)]
            times = [t for t in cells if any(R.leq(f, t) for f in lo) and not hi.beyond(t)]
            bench.ingest(name, schema, random_updates(rng, make_row, times, 18, pools[name]),
                         upper=uppers[name][r])
            prev[name] = list(hi)
        bench.run(path)
    bench.check_at_every_time(["q"], lambda t: {"q": general_ref(bench.inputs_at(t))},
                              times=[t for t in R.box(bench.times()) if t[0] < 6])
    v = verify_pipeline(bench.store, path)
    assert v.times and v.ok, [x.describe() for x in v.differences]
    # state: the arrangements of the two derived relations, nothing joined
    assert sorted(bench.state("general")) == ["general.filter_2", "general.select_3"]


# ------------------------------------------------------------------ inside a loop

CLOSURE = '''
def pipeline(p):
    edges = p.input("edges").distinct()

    def one_more_hop(reach):
        hop = p.delta_join([(reach, "x", "y"), (edges, {"y": "src", "z": "dst"})])
        return hop.select(x="x", y="z").concat(edges.select(x="src", y="dst")).distinct()

    p.output("closure", edges.select(x="src", y="dst").iterate(one_more_hop))
'''


def closure_ref(edges: R.Coll) -> R.Coll:
    reach = {e for e, m in edges.rows.items() if m > 0}
    while True:
        more = reach | {(x, z) for (x, y) in reach for (y2, z) in reach if y == y2}
        if more == reach:
            return R.Coll(["x", "y"], {e: 1 for e in reach})
        reach = more


def test_a_delta_join_inside_a_loop_reaches_the_fixed_point_at_every_time(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("closure", CLOSURE)
    rng = random.Random(4)
    times = [(t,) for t in range(5)]  # one run, five epochs: the loop state carries between them
    bench.ingest("edges", EDGES, random_updates(rng, lambda g: (g.randrange(5), g.randrange(5)), times, 16, []))
    bench.run(path)
    bench.check_at_every_time(["closure"], lambda t: {"closure": closure_ref(bench.inputs_at(t)["edges"])})


# ------------------------------------------------------------------ state size

ORDINARY = '''
def pipeline(p):
    edges = p.input("edges").distinct().filter("src <> dst")
    ab = edges.select(a="src", b="dst")
    ac = edges.select(a="src", c="dst")
    bc = edges.select(b="src", c="dst")
    p.output("triangles_by_joins", ab.join(ac, on="a").join(bc, on=["b", "c"]), key=["a", "b", "c"])
'''


def hub_graph(hubs: int = 3, fanout: int = 80) -> list[tuple[int, int]]:
    """``hubs`` nodes each pointing at ``fanout`` targets, and a path through the targets:
    few edges, many two-paths (a hub's out-edges pair up: fanout² each). Node ids are
    random 40-bit numbers rather than small consecutive ones."""
    rng = random.Random(1)
    ids = rng.sample(range(2**40), hubs + fanout)
    hub, target = ids[:hubs], ids[hubs:]
    out = [(h, t) for h in hub for t in target]
    return out + [(target[i], target[i + 1]) for i in range(fanout - 1)]


def test_delta_query_state_is_proportional_to_the_edges_not_to_the_two_paths(spark, tmp_path):
    bench = Bench(tmp_path)
    edges = hub_graph()
    two_paths = sum(1 for (a, b), (a2, c) in itertools.product(edges, edges) if a == a2)
    assert two_paths >= 50 * len(edges)
    half = len(edges) // 2  # two runs: the second joins its changes with the first's state
    bench.ingest("edges", EDGES, [(e, (0,), 1) for e in edges[:half]])
    ordinary = bench.pipeline("ordinary", ORDINARY)
    bench.run(TRIANGLES)
    bench.run(ordinary)
    bench.ingest("edges", EDGES, [(e, (1,), 1) for e in edges[half:]])
    bench.run(TRIANGLES)
    bench.run(ordinary)
    bench.store.compact(full=True, grace_seconds=0)

    expected = triangles_of_set(bench.inputs_at((1,))["edges"])
    assert len(expected.rows) == 3 * 79
    for out in ("triangles", "triangles_by_joins"):
        assert bench.output_at(out, (1,)).project(["a", "b", "c"]) == expected.project(["a", "b", "c"]), out

    delta = bench.state("triangles")
    plain = bench.state("ordinary")
    delta_rows, delta_bytes = map(sum, zip(*delta.values()))
    plain_rows, plain_bytes = map(sum, zip(*plain.values()))
    print(f"\n{len(edges)} edges, {two_paths} two-paths ({two_paths / len(edges):.0f}x): "
          f"delta-query state {delta_rows} rows / {delta_bytes} bytes in {sorted(delta)}; "
          f"ordinary joins {plain_rows} rows / {plain_bytes} bytes in {sorted(plain)}")
    assert delta_rows <= len(edges)  # one arranged copy of the edge set
    assert plain_rows >= two_paths  # the two-paths, kept as the second join's state
    assert plain_rows >= 50 * delta_rows
    # bytes understate the gap at this scale: Parquet dictionary-encodes the few distinct
    # node ids (a two-path row costs under a byte), and a small file is mostly footer
    assert plain_bytes > 2 * delta_bytes


DELTA_MISTAKES = {
    "too_few": ('p.delta_join([e])', ["at least two relations"]),
    "not_a_relation": ('p.delta_join([e, "edges"])', ["relation 2"]),
    "variable_twice": ('p.delta_join([(e, "a", "a"), (e, "a", "b")])', ["binds a variable twice"]),
    "wrong_arity": ('p.delta_join([(e, "a", "b", "c"), (e, "a", "c")])', ["relation 1 has 2 column(s)", "3 variable(s)"]),
    "unknown_column": ('p.delta_join([(e, "a", "b"), (e, {"b": "nope"})])', ["'nope'"]),
    "type_clash": ('p.delta_join([(e, "a", "b"), (e.select(a="cast(src as string)", c="dst"), "a", "c")])',
                   ["'a'", "bigint", "string"]),
    "cross_product": ('p.delta_join([(e, "a", "b"), (e, "c", "d")])', ["shares no variable"]),
}


def test_delta_join_mistakes_are_one_line_errors_before_spark_work(spark, tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    bench.ingest("edges", EDGES, [((1, 2), (0,), 1)])
    for name, (expr, must) in DELTA_MISTAKES.items():
        path = bench.pipeline(name, f'def pipeline(p):\n    e = p.input("edges")\n    p.output("o", {expr})\n')
        assert_refused(bench, path, spark_jobs, must)
