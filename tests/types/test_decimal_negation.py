"""Negating a decimal in a pipeline is exact, or refused in one line before any Spark job.

Spark negates decimals (``-x``, ``negative``, ``abs``) through Scala's BigDecimal, which
rounds to 34 digits: a decimal(38,10) of 38 digits comes out rounded, the largest one is
refused mid-run as out of range. Up to 34 digits the negation is exact.
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
    p.output("neg", p.input("xs").select("k", m="-d", a="abs(-d)"))
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


def test_a_negation_of_a_decimal_of_34_digits_is_exact(spark, tmp_path):
    bench = _bench(tmp_path, 34)
    path = bench.pipeline("neg", NEGATE)
    bench.run(path)
    xs = bench.inputs_at((0,))["xs"]
    want = R.select(xs, "k", m=lambda r: None if r["d"] is None else r["d"].copy_negate(),
                    a=lambda r: None if r["d"] is None else r["d"].copy_abs())
    assert bench.output_at("neg", (0,)) == want


def test_a_negation_of_a_decimal_of_more_than_34_digits_is_refused_in_one_line_before_any_job(spark, tmp_path):
    bench = _bench(tmp_path, 38)
    path = bench.pipeline("neg", NEGATE)
    with pytest.raises(PipelineError, match=r"select \(neg.py:3\): .*\) negates a decimal of more than 34 digits"):
        bench.run(path)
    assert "neg" not in bench.store.state().traces
