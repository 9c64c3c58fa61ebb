"""differentiate / integrate / moments (ops/dataflow/calculus.py): the laws, on random streams.

* The moment encoding is an order embedding of differential dataflow's ``AltNeu`` times
  that preserves joins (hypothesis, no Spark).
* ``integrate(differentiate(c)) == c`` at every time, with nothing and with linear
  operators in between, over several runs with compaction between them; a differentiated
  collection holds each change only at its own moment.
* The alt/neu "nudge": the delta-query rules for triangles written literally with
  ``differentiate``, ``moments(neu=...)`` and ``integrate`` count edges added together
  once, equal brute force at every time, and agree with ``p.delta_join``.
* Mistakes (an output in moment time, mixing moment and ordinary times, d = 2, a loop,
  verify) are one-line errors before Spark does any work.

The small harness at the top is shared by tests/pipelines/test_asof.py and tests/pipelines/test_triangles.py.
"""

from __future__ import annotations

import os
import random
import textwrap
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops.dataflow import calculus as C
from ops.errors import PipelineError
from ops.run.run import run_pipeline
from ops.verify.verify import verify_pipeline
from storage.lattice import time_columns
from storage.store import Store
from tests.helpers import reference as R

# ------------------------------------------------------------------ harness (shared)


class Bench:
    """A store, the raw updates the test ingested into it, and pipeline files."""

    def __init__(self, root, d: int = 1):
        self.root = str(root)
        os.makedirs(self.root, exist_ok=True)
        self.d = d
        self.tcols = time_columns(d)
        self.store = Store(os.path.join(self.root, "store"))
        self.schemas: dict[str, pa.Schema] = {}
        self.updates: dict[str, list] = defaultdict(list)
        self.files = 0

    def ingest(self, name: str, schema: pa.Schema, updates, *, upper: str | None = None):
        """``updates``: ``[(row tuple, time tuple, diff)]``."""
        self.files += 1
        cols = {f.name: pa.array([u[0][i] for u in updates], f.type) for i, f in enumerate(schema)}
        for i, c in enumerate(self.tcols):
            cols[c] = pa.array([u[1][i] for u in updates], pa.int64())
        cols["diff"] = pa.array([u[2] for u in updates], pa.int64())
        path = os.path.join(self.root, f"{name}_{self.files}.parquet")
        pq.write_table(pa.table(cols), path)
        self.store.ingest(name, [path], key=[schema.names[0]], upper=upper)
        self.schemas[name] = schema
        self.updates[name] += list(updates)

    def pipeline(self, name: str, source: str) -> str:
        path = os.path.join(self.root, f"{name}.py")
        with open(path, "w") as fh:
            fh.write(textwrap.dedent(source))
        return path

    def run(self, path: str, **kw):
        return run_pipeline(self.store, path, **kw)

    def rows(self, out: str) -> list[dict]:
        return self.store.read_updates(self.store.trace(out)).to_pylist()

    def output_at(self, out: str, t, rows=None) -> R.Coll:
        tr = self.store.trace(out)
        return R.fold_updates(self.rows(out) if rows is None else rows, tr.data_columns, self.tcols, t)

    def inputs_at(self, t) -> dict[str, R.Coll]:
        return {n: R.accumulate(self.updates[n], s.names, t) for n, s in self.schemas.items()}

    def times(self) -> list[tuple]:
        return [u[1] for ups in self.updates.values() for u in ups]

    def advance_and_compact(self, since: str, *, full: bool):
        for name in self.schemas:
            self.store.advance(name, since=since)
        self.store.compact(full=full, grace_seconds=0)

    def state(self, pipeline: str) -> dict[str, tuple[int, int]]:
        """The pipeline's state traces: name -> (rows, bytes)."""
        s = self.store.state()
        return {n: (t.rows(), t.bytes()) for n, t in s.traces.items() if n.startswith(pipeline + ".")}

    def check_at_every_time(self, outputs: dict, expected_at, times=None):
        """Every output, accumulated at every time of the box, equals ``expected_at(t)[out]``."""
        times = times or R.box(self.times())
        problems = []
        for out in outputs:
            rows = self.rows(out)
            for t in times:
                want, got = expected_at(t)[out], self.output_at(out, t, rows)
                if want != got:
                    problems.append(f"output {out!r} at time {t}: {R.describe_difference(want, got)}")
                    break
        assert not problems, "\n".join(problems)


def random_updates(rng, make_row, times, n, pool):
    """About ``n`` updates at ``times``: insertions (some twice as many), retractions of rows
    inserted before (at any time), retractions of rows never inserted, exact repeats."""
    out = []
    while len(out) < n:
        t = rng.choice(times)
        x = rng.random()
        if pool and x < 0.3:
            row, diff = rng.choice(pool), -1
        elif x < 0.36:
            row, diff = make_row(rng), -1
        else:
            row, diff = make_row(rng), rng.choice((1, 1, 1, 2))
            pool.append(row)
        out.append((row, t, diff))
        if rng.random() < 0.1:
            out.append((row, t, diff))
    return out


def assert_refused(bench: Bench, path: str, spark_jobs, must_contain, run=None, jobs_ok: bool = False) -> str:
    """A one-line PipelineError, nothing written, no Spark job started (unless ``jobs_ok``)."""
    version, jobs = bench.store.state().version, spark_jobs()
    with pytest.raises(PipelineError) as e:
        (run or bench.run)(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.strip(), msg
    for s in must_contain:
        assert s in msg, (s, msg)
    assert bench.store.state().version == version
    assert jobs_ok or spark_jobs() == jobs
    return msg


# ------------------------------------------------------------------ the encoding's laws

times_ = st.integers(min_value=0, max_value=C.MAX_TIME)
moments_ = st.tuples(times_, st.booleans())


@given(moments_, moments_)
def test_moment_encoding_is_an_order_embedding_of_altneu(a, b):
    assert C.altneu_leq(a, b) == (C.encode(*a) <= C.encode(*b))


@given(moments_, moments_)
def test_moment_encoding_preserves_joins(a, b):
    assert C.encode(*C.altneu_join(a, b)) == max(C.encode(*a), C.encode(*b))


@given(st.integers(min_value=0, max_value=C.MAX_TIME - 1))
def test_both_moments_of_a_time_sit_before_the_next_time(t):
    assert C.encode(t) < C.encode(t, True) < C.encode(t + 1)
    assert C.decode(C.encode(t, True)) == (t, True) and C.decode(C.encode(t)) == (t, False)
    assert C.integrate_time(C.encode(t)) == t and C.integrate_time(C.encode(t, True)) is None


def test_times_too_large_for_moments_are_refused():
    C.encode(C.MAX_TIME, True)
    with pytest.raises(ValueError, match="2\\*\\*62"):
        C.encode(C.MAX_TIME + 1)


def _differentiate(updates):
    return [u for (row, t, d) in updates for u in ((row, C.encode(t), d), (row, C.encode(t, True), -d))]


def _integrate(updates):
    return [(row, C.integrate_time(m), d) for row, m, d in updates if C.integrate_time(m) is not None]


def _at(updates, t) -> dict:
    """The collection at ``t`` (one coordinate): rows with non-zero summed diffs."""
    acc = Counter()
    for row, s, d in updates:
        if s <= t:
            acc[row] += d
    return {k: v for k, v in acc.items() if v}


def _consolidated(updates) -> dict:
    acc = Counter()
    for row, t, d in updates:
        acc[(row, t)] += d
    return {k: v for k, v in acc.items() if v}


update_lists = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.sampled_from([-2, -1, 1, 2])),
                        max_size=25)


@given(update_lists)
@settings(max_examples=200)
def test_a_derivative_holds_each_change_only_at_its_moment_and_integrates_back(updates):
    diff = _differentiate(updates)
    for t in range(8):
        changes = _consolidated([(r, s, d) for r, s, d in updates if s == t])
        assert _at(diff, C.encode(t)) == {r: v for (r, _), v in changes.items()}  # the change at t
        assert _at(diff, C.encode(t, True)) == {}  # gone just after it
    assert _consolidated(_integrate(diff)) == _consolidated(updates)


# ------------------------------------------------------------------ identity laws on Spark

XS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64())])


def xs_row(rng):
    return (rng.randrange(4), rng.choice("pqr"), rng.randrange(5))


IDENTITY = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    dx = xs.differentiate()
    p.output("plain", dx.integrate())
    p.output("linear", dx.filter("w % 2 = 0").select("k", vw="concat(v, cast(w as string))").integrate())
    p.output("flat", dx.flat_map("x", "sequence(0, w % 3)", keep=["k"]).integrate())
    p.output("both", dx.concat(ys.differentiate().negate()).consolidate().integrate())
    # an ordinary collection in moment time: at alt it is itself; at neu integrate drops it
    p.output("lifted", xs.moments().concat(xs.moments(neu=True).negate()).select("k", "w").integrate())
'''


def identity_ref(i):
    xs, ys = i["xs"], i["ys"]
    lin = R.select(R.filter_(xs, lambda r: r["w"] % 2 == 0), "k", vw=lambda r: r["v"] + str(r["w"]))
    return {
        "plain": xs, "linear": lin,
        "flat": R.flat_map(xs, "x", lambda r: list(range(0, r["w"] % 3 + 1)), keep=["k"]),
        "both": R.consolidate(R.concat(xs, R.negate(ys))),
        "lifted": R.select(xs, "k", "w"),
    }


def test_integrate_undoes_differentiate_with_and_without_linear_operators_between(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("identity", IDENTITY)
    rng, pools = random.Random(5), defaultdict(list)
    for r in range(3):
        times = [(t,) for t in range(6 * r, 6 * r + 6)]  # six epochs per run
        for name, n in (("xs", 30), ("ys", 20)):
            bench.ingest(name, XS, random_updates(rng, xs_row, times, n, pools[name]))
        assert not bench.run(path).nothing_to_do
        if r < 2:
            bench.advance_and_compact(str(6 * r + 3), full=r == 1)
    outputs = ["plain", "linear", "flat", "both", "lifted"]
    bench.check_at_every_time(outputs, lambda t: identity_ref(bench.inputs_at(t)))
    # no moment ever reaches a trace: every output update is at a time some input has
    input_times = set(bench.times())
    for out in outputs:
        assert {(r["time"],) for r in bench.rows(out)} <= input_times, out
    # linear operators between differentiate and integrate keep no state
    assert bench.store.state().pipelines["identity"]["state"] == []


# ------------------------------------------------------------------ alt/neu: the delta-query rules

EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])

ALTNEU = '''
def pipeline(p):
    e = p.input("edges")
    d = e.differentiate()

    def alt(**cols):
        return e.moments().select(**cols)

    def neu(**cols):
        return e.moments(neu=True).select(**cols)

    def rules(ab_ac, ab_bc, ac_bc):
        """dAB joins AC, BC; dAC joins AB, BC; dBC joins AB, AC (each side alt or neu)."""
        r1 = d.select(a="src", b="dst").join(ab_ac[1](a="src", c="dst"), on="a") \\
              .join(ab_bc[1](b="src", c="dst"), on=["b", "c"])
        r2 = d.select(a="src", c="dst").join(ab_ac[0](a="src", b="dst"), on="a") \\
              .join(ac_bc[1](b="src", c="dst"), on=["b", "c"]).select("a", "b", "c")
        r3 = d.select(b="src", c="dst").join(ab_bc[0](a="src", b="dst"), on="b") \\
              .join(ac_bc[0](a="src", c="dst"), on=["a", "c"]).select("a", "b", "c")
        return r1.concat(r2, r3).integrate()

    # rule i sees the inputs before it at alt (their concurrent changes visible) and
    # the inputs after it at neu (hidden): the rules run "one after the other"
    # (with every side at alt, edges added together would be found by all three rules)
    p.output("nudged", rules((alt, neu), (alt, neu), (alt, neu)))
    p.output("delta", p.delta_join([(e, "a", "b"), (e, "a", "c"), (e, "b", "c")]))
'''


def triangles_ref(edges: R.Coll) -> R.Coll:
    """Brute force: every (a, b, c) with multiplicity m(a,b) * m(a,c) * m(b,c)."""
    m = {(a, b): k for (a, b), k in edges.rows.items()}
    out = R.Coll(["a", "b", "c"])
    for (a, b), x in m.items():
        for (a2, c), y in m.items():
            if a2 == a and (b, c) in m:
                out.add((a, b, c), x * y * m[(b, c)])
    return out


def test_altneu_nudged_rules_count_simultaneous_edges_once_and_equal_brute_force(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("altneu", ALTNEU)
    rng, pool = random.Random(7), []

    def edge(rng):
        return (rng.randrange(5), rng.randrange(5))

    # run 1: the triangle (1,2,3) arrives at one time, with other edges around it
    first = [((1, 2), (0,), 1), ((1, 3), (0,), 1), ((2, 3), (0,), 1)]
    bench.ingest("edges", EDGES, first + random_updates(rng, edge, [(1,), (2,), (3,)], 15, pool))
    bench.run(path)
    assert bench.output_at("nudged", (0,)).project(["a", "b", "c"]) == {(1, 2, 3): 1}
    assert bench.output_at("delta", (0,)).project(["a", "b", "c"]) == {(1, 2, 3): 1}
    # run 2: more edges, retractions, several times in one run
    bench.ingest("edges", EDGES, random_updates(rng, edge, [(4,), (5,), (6,), (7,)], 25, pool))
    bench.run(path)
    expect = lambda t: {o: triangles_ref(bench.inputs_at(t)["edges"]) for o in ("nudged", "delta")}  # noqa: E731
    bench.check_at_every_time(["nudged", "delta"], expect)


# ------------------------------------------------------------------ mistakes


@pytest.fixture
def small(tmp_path):
    bench = Bench(tmp_path)
    bench.ingest("xs", XS, [((1, "p", 2), (0,), 1)])
    bench.ingest("ys", XS, [((1, "q", 3), (0,), 1)])
    return bench


MISTAKES = {
    "output_in_moment_time": ('p.output("o", p.input("xs").differentiate())', ["'o'", "integrate()"]),
    "output_in_moment_time_after_linear": ('p.output("o", p.input("xs").differentiate().select("k"))',
                                           ["'o'", "integrate()"]),
    "join_mixes_times": ('d = p.input("xs").differentiate()\n'
                         'p.output("o", d.join(p.input("ys").select("k", u="w"), on="k").integrate())',
                         ["join", "moments()"]),
    "concat_mixes_times": ('xs = p.input("xs")\np.output("o", xs.concat(xs.differentiate()).integrate())',
                           ["concat", "moment time"]),
    "integrate_of_ordinary": ('p.output("o", p.input("xs").integrate())', ["integrate", "not differentiated"]),
    "differentiate_twice": ('p.output("o", p.input("xs").differentiate().differentiate().integrate())',
                            ["differentiate", "already differentiated"]),
    "moments_enter_a_loop": ('d = p.input("xs").differentiate()\n'
                             'p.output("o", d.iterate(lambda x: x.distinct()).integrate())', ["loop"]),
    "differentiate_in_a_loop": ('xs = p.input("xs")\n'
                                'p.output("o", xs.iterate(lambda x: x.differentiate().integrate().distinct()))',
                                ["differentiate needs d = 1", "loop"]),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_calculus_mistakes_are_one_line_errors_before_spark_work(spark, small, spark_jobs, case):
    body, must = MISTAKES[case]
    path = small.pipeline(case, "def pipeline(p):\n" + textwrap.indent(body, "    ") + "\n")
    assert_refused(small, path, spark_jobs, must)


@pytest.mark.parametrize("source, what", [
    ('p.output("o", p.input("xs").differentiate().integrate())', "differentiate needs d = 1"),
    ('p.output("o", p.input("xs").as_of_join(p.input("ys").select("k", u="w"), on="k"))', "as_of_join needs d = 1"),
])
def test_moments_need_times_of_one_coordinate(spark, tmp_path, spark_jobs, source, what):
    bench = Bench(tmp_path, d=2)
    bench.ingest("xs", XS, [((1, "p", 2), (0, 0), 1)], upper="(1,0)")
    bench.ingest("ys", XS, [((1, "q", 3), (0, 1), 1)], upper="(1,0)")
    path = bench.pipeline("two", "def pipeline(p):\n    " + source + "\n")
    assert_refused(bench, path, spark_jobs, [what, "2 coordinates"])


def test_verify_refuses_a_differentiated_collection_in_one_line(spark, small, spark_jobs):
    path = small.pipeline("ident", 'def pipeline(p):\n    p.output("o", p.input("xs").differentiate().integrate())\n')
    small.run(path)
    assert small.output_at("o", (0,)).project(["k", "v", "w"]) == {(1, "p", 2): 1}
    assert_refused(small, path, spark_jobs, ["differentiate", "verify cannot recompute"],
                   run=lambda p: verify_pipeline(small.store, p), jobs_ok=True)
