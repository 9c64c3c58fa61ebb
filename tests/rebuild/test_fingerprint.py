"""A pipeline is identified by its dataflow, not by its file's bytes (ops/dataflow/fingerprint.py).

Edits that leave the dataflow alone (comments, docstrings, blank lines, formatting, lines
moving) keep every operator's fingerprint; edits of meaning (an expression, a constant a
function reads, a function's code, a reducer, a key, a loop's body) change the operator's
and everything downstream's, and the comparison with the recorded version names them with
their file and line. No Spark: the pipelines are only declared.
"""

from __future__ import annotations

import textwrap

import pytest

from ops.dataflow.changes import compare, file_hash, pipeline_changes, record_operators
from ops.dataflow.fingerprint import canonical, dataflow_fingerprint, fingerprints
from ops.dataflow.load import load_pipeline

BASE = '''
import numpy as np

LIMIT = 2


def at_least(c):
    return (np.asarray(c) >= LIMIT).astype(np.int64)


def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    kept = xs.filter("w > 0")
    pairs = kept.join(ys.select("k", "u"), on="k")
    p.output("per_v", pairs.select("k", "v", x="u * 2").sum(by="v", column="x"))
    p.output("often", xs.select("v").threshold(at_least))
    scale = 3
    p.output("rows", xs.reduce_per_key("k", lambda t: t.append_column("n", [[scale] * t.num_rows])))
    p.output("reach", ys.select("k").iterate(lambda r: r.concat(r).distinct(), max_rounds=50))
'''

# the same dataflow: a docstring, comments, blank lines (every line moves), other quotes,
# calls split over lines, a docstring in the function
SAME = '''
"""Edited by hand: nothing of the dataflow changed."""
import numpy as np

# a constant
LIMIT = 2



def at_least(c):
    """Rows present at least LIMIT times."""
    # vectorised
    return (np.asarray(c) >= LIMIT).astype(np.int64)


def pipeline(p):
    xs = p.input('xs')  # the left side
    ys = p.input("ys")

    kept = xs.filter(
        "w > 0"
    )
    pairs = kept.join(ys.select("k", "u"),
                      on="k")
    p.output("per_v",
             pairs.select("k", "v", x="u * 2").sum(by="v", column="x"))
    p.output("often", xs.select("v").threshold(at_least))
    scale = 3  # rows per key
    p.output("rows", xs.reduce_per_key("k", lambda t: t.append_column("n", [[scale] * t.num_rows])))
    p.output("reach", ys.select("k").iterate(lambda r: r.concat(r).distinct(),
                                             max_rounds=50))
'''


def load(tmp_path, source: str, name: str = "edited"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return load_pipeline(str(path), "pipe"), str(path)


def line_of(source: str, needle: str) -> int:
    """The line of the pipeline file (dedented as written) holding ``needle``."""
    lines = textwrap.dedent(source).splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def test_comments_docstrings_blank_lines_and_formatting_keep_every_fingerprint(tmp_path):
    base, _ = load(tmp_path, BASE, "base")
    same, path = load(tmp_path, SAME)
    fb, fs = fingerprints(base), fingerprints(same)
    assert [fb[n.id] for n in base.nodes] == [fs[n.id] for n in same.nodes]
    assert dataflow_fingerprint(fb) == dataflow_fingerprint(fs)
    # the lines did move: the comparison is not by line
    assert [n.where for n in base.nodes] != [n.where for n in same.nodes]
    changes = compare(same, fs, record_operators(base, fb))
    assert {c.status for c in changes} == {"unchanged"} and len(changes) == len(same.nodes)
    # a record written before fingerprints: only an identical file is known to be the same
    legacy = {"fingerprint": file_hash(path), "runs": 1}
    assert not pipeline_changes(same, path, legacy).changed
    unknown = pipeline_changes(same, path, {"fingerprint": "0" * 16, "runs": 1})
    assert unknown.changed and not unknown.known


# (edit of BASE, how the operator it touches changed, the text of its line, the operators
# downstream of it: recomputed because what they read changed)
EDITS = [
    (("w > 0", "w > 1"), "changed filter", 'xs.filter("w > 1")', ["join", "output", "reduce", "select"]),
    (("x=\"u * 2\"", "x=\"u * 3\""), "changed select", 'x="u * 3"', ["output", "reduce"]),
    (("LIMIT = 2", "LIMIT = 3"), "changed threshold", "threshold(at_least)", ["output"]),
    ((">= LIMIT", "> LIMIT"), "changed threshold", "threshold(at_least)", ["output"]),
    (("scale = 3", "scale = 4"), "changed reduce", "reduce_per_key", ["output"]),
    (('column="x"', 'column="k"'), "changed reduce", 'column="k"', ["output"]),
    (("r.concat(r).distinct()", "r.concat(r).distinct().distinct()"), "new distinct", "iterate",
     ["concat", "distinct", "enter", "leave", "loop", "output", "variable"]),
    (("max_rounds=50", "max_rounds=60"), "changed loop", "iterate",
     ["concat", "distinct", "enter", "leave", "output", "variable"]),
]


@pytest.mark.parametrize("edit, how, text, downstream", EDITS, ids=[e[0][1] for e in EDITS])
def test_an_edit_of_meaning_names_the_operator_that_changed_and_what_reads_it(tmp_path, edit, how, text, downstream):
    base, _ = load(tmp_path, BASE, "base")
    source = BASE.replace(*edit)
    assert source != BASE
    new, _ = load(tmp_path, source)
    fb, fn = fingerprints(base), fingerprints(new)
    assert dataflow_fingerprint(fb) != dataflow_fingerprint(fn)
    changes = compare(new, fn, record_operators(base, fb))
    changed = [c for c in changes if c.status in ("changed", "new")]
    assert [f"{c.status} {c.op}" for c in changed] == [how], [(c.status, c.describe()) for c in changes]
    assert changed[0].where == f"edited.py:{line_of(source, text)}"
    assert sorted(c.op for c in changes if c.status == "affected") == downstream
    # upstream of the change and the other branches keep their fingerprints; nothing is removed
    unchanged = [c for c in changes if c.status == "unchanged"]
    assert len(unchanged) == len(changes) - 1 - len(downstream)
    assert {"input", "output"} <= {c.op for c in unchanged}


def test_new_and_removed_operators_are_named_and_unchanged_ones_found_after_lines_move(tmp_path):
    base, _ = load(tmp_path, BASE, "base")
    source = BASE.replace('    kept = xs.filter("w > 0")',
                          '    p.output("first", ys.distinct())\n    kept = xs.filter("w > 0")')
    source = source.replace('    p.output("often", xs.select("v").threshold(at_least))\n', "")
    new, _ = load(tmp_path, source)
    fb, fn = fingerprints(base), fingerprints(new)
    changes = compare(new, fn, record_operators(base, fb))
    news = [c.describe() for c in changes if c.status == "new"]
    assert news == [f"distinct (edited.py:{line_of(source, 'ys.distinct()')})",
                    f"output (edited.py:{line_of(source, 'ys.distinct()')})"]
    removed = sorted(c.op for c in changes if c.status == "removed")
    assert removed == ["output", "select", "threshold"]
    # every other operator is found again, although its id (and line) moved
    assert all(c.status == "unchanged" for c in changes if c.status not in ("new", "removed"))
    assert {fn[n.id] for n in new.nodes if n.op == "join"} == {fb[n.id] for n in base.nodes if n.op == "join"}


def test_twins_are_told_apart_and_objects_are_read_by_value(tmp_path):
    twins, _ = load(tmp_path, '''
        def pipeline(p):
            xs = p.input("xs")
            p.output("a", xs.count(by="k"))
            p.output("b", xs.count(by="k"))
    ''')
    fps = fingerprints(twins)
    counts = [fps[n.id] for n in twins.nodes if n.op == "reduce"]
    assert len(counts) == 2 and len(set(counts)) == 2

    class Column:  # stands for a Spark Column: read by the expression it prints
        __module__ = "pyspark.sql.column"

        def __init__(self, text):
            self.text = text

        def __str__(self):
            return f"Column<'{self.text}'>"

    assert canonical(Column("(a + 1)")) == canonical(Column("(a + 1)"))
    assert canonical(Column("(a + 1)")) != canonical(Column("(a + 2)"))
    assert canonical(object()) == canonical(object()), "no memory address in a fingerprint"


def test_a_frame_ending_at_the_current_row_is_identified_as_before_frames_could_end_later():
    """Frames gained an end (``following``); the pipelines whose frames end at the current
    row, all of them before, keep their fingerprints and are not reported as edited."""
    from ops.dataflow.fingerprint import canonical
    from ops.dataflow.windows import RANGE, rows

    assert canonical(rows(3)) == ["Frame", "rows", 3]  # the form a 2-field frame had
    assert canonical(RANGE) == ["Frame", "range", None]
    assert canonical(rows(3, 2)) == ["Frame", "rows", 3, 2]
    assert canonical(rows(3, 2)) != canonical(rows(3))
