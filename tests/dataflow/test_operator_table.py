"""The OPERATORS table (ops/dataflow/operators.py) describes every operator a pipeline can
declare, and the dispatch tables agree with it: an operator is added in one place and the
passes read its facts from there."""

from __future__ import annotations

from ops.dataflow.aggregates import count
from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import reduce_spec
from ops.dataflow.operators import OPERATORS, REDUCE
from ops.dataflow.reducers import Reducer
from ops.explain.operators import summary
from ops.loops.task import TASK_EVALUATORS
from ops.run.evaluate import EVALUATORS


def _every_operator() -> Pipeline:
    """A pipeline that declares every operator the builder offers."""
    p = Pipeline("every")
    a, b = p.input("a"), p.input("b")
    s = a.select("k", "v", w="v + 1").filter("v > 0")
    c = s.concat(b.select("k", "v", w="v")).negate().consolidate()
    outs = [s.flat_map("e", "split(w, ',')", keep=["k"]), c.join(b.select("k", x="v"), on="k"),
            c.semijoin(b, on="k").distinct(), c.antijoin(b, on="k").threshold(lambda m: m),
            a.agg(by="k", n=count()), a.arrange(by="v"), a.differentiate().integrate(),
            a.moments(neu=True).integrate(), a.as_of_join(b.select("k", z="v"), on="k"),
            p.delta_join([(a, "k", "v"), (b, "v", "k")]),
            a.iterate(lambda x: x.join(b.select("k", x="v"), on="k").select("k", "v")
                      .concat(a.enter_at(x, "v")).min(by="k", column="v", name="v"), priority="v")]
    for i, o in enumerate(outs):
        p.output(f"out_{i}", o, key="k" if i == 0 else None)
    return p


def test_the_table_has_every_operator_the_builder_declares():
    assert {n.op for n in _every_operator().nodes} == set(OPERATORS)


def test_every_operator_has_an_evaluator_but_those_its_loop_evaluates():
    assert set(EVALUATORS) == set(OPERATORS) - {"loop", "leave"}


def test_the_operators_a_loop_task_runs_are_those_the_task_evaluates():
    in_task = {op for op, o in OPERATORS.items() if o.in_task}
    assert in_task == set(TASK_EVALUATORS) | {"enter", "variable"}


def test_every_reduce_family_operator_gives_its_reducer():
    for n in _every_operator().nodes:
        if OPERATORS[n.op].family == REDUCE:
            key, reducer = reduce_spec(n, ["k", "v"])
            assert isinstance(reducer, Reducer)
            assert key == (list(n.args["key"]) if "key" in n.args else ["k", "v"])


def test_every_sentence_is_filled_in_and_names_what_the_node_reads():
    for n in _every_operator().nodes:
        sentence = summary(n)
        assert "{" not in sentence and "}" not in sentence, sentence
        if n.op == "loop":  # its inputs are the outer collections its body reads
            continue
        for i in n.inputs:
            if i.op != "loop":  # a leave names its loop by the loop's name
                assert i.name in sentence, (n.op, sentence)
