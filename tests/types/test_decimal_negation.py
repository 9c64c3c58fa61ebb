"""Negating a decimal in a pipeline is exact, or refused in one line before any Spark job.

Spark negates decimals (``-x``, ``negative``, ``abs``) through Scala's BigDecimal, which
rounds to 34 digits: a decimal(38,10) of 38 digits would come out rounded, the largest one
refused mid-run as out of range. The engine writes such a negation of an expression string
exactly; one it cannot rewrite (a Spark Column) is refused before any job.
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from ops.errors import PipelineError
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench

NEGATE = '''
def pipeline(p):
    p.output("neg", p.input("xs").select("k", m="-d", a="abs(-d)", n="negative(d)").filter("coalesce(-m <> 5, true)"))
'''

COLUMN = '''
from pyspark.sql import functions as F


def pipeline(p):
    p.output("neg", p.input("xs").select("k", m=-F.col("d")))
'''


def _digits(precision: int, scale: int) -> Decimal:
    """The largest decimal(precision, scale)."""
    return Decimal("9" * (precision - scale) + "." + "9" * scale)


def _bench(tmp_path, precision: int) -> Bench:
    bench = Bench(tmp_path, 1)
    big = _digits(precision, 10)
    values = [big, big.copy_negate(), Decimal("1234567.0000000001"), None]
    schema = pa.schema([("k", pa.int64()), ("d", pa.decimal128(precision, 10))])
    bench.ingest("xs", schema, [((i, v), (0,), 1) for i, v in enumerate(values)])
    return bench


@pytest.mark.parametrize("precision", [34, 38])
def test_a_negation_of_a_decimal_is_exact_up_to_38_digits(spark, tmp_path, precision):
    bench = _bench(tmp_path, precision)
    path = bench.pipeline("neg", NEGATE)
    bench.run(path)
    xs = bench.inputs_at((0,))["xs"]
    want = R.select(xs, "k", m=lambda r: None if r["d"] is None else r["d"].copy_negate(),
                    a=lambda r: None if r["d"] is None else r["d"].copy_abs(),
                    n=lambda r: None if r["d"] is None else r["d"].copy_negate())
    assert bench.output_at("neg", (0,)) == want


def test_a_negation_it_cannot_write_exactly_is_refused_in_one_line_before_any_job(spark, tmp_path):
    bench = _bench(tmp_path, 38)
    path = bench.pipeline("neg", COLUMN)
    with pytest.raises(PipelineError, match=r"select \(neg.py:6\): .*\) negates a decimal of more than 34 digits"):
        bench.run(path)
    assert "neg" not in bench.store.state().traces
