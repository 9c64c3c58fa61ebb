"""Decimal arithmetic in a pipeline is exact: a decimal(38,10) plus, minus or times a small
constant keeps every digit (Spark by default cuts such a result's scale to fit 38 digits, a
silent rounding), as DuckDB computes it."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pyarrow as pa

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench

ARITHMETIC = '''
def pipeline(p):
    p.output("out", p.input("xs").select("k", plus="d + 1", twice="d * 2", less="d - 0.5"))
'''


def test_arithmetic_on_a_decimal_of_38_digits_is_exact(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    values = [Decimal("123456789012345678.0123456789"), Decimal("-0.0000000001"),
              Decimal("99999999999999999.9999999999"), Decimal("-7.5000000005"), None]
    schema = pa.schema([("k", pa.int64()), ("d", pa.decimal128(38, 10))])
    bench.ingest("xs", schema, [((i, v), (0,), 1) for i, v in enumerate(values)])
    bench.run(bench.pipeline("arith", ARITHMETIC))
    xs = bench.inputs_at((0,))["xs"]
    with localcontext() as ctx:
        ctx.prec = 60  # Python's default context rounds to 28 digits
        want = R.select(xs, "k", plus=lambda r: None if r["d"] is None else r["d"] + 1,
                        twice=lambda r: None if r["d"] is None else r["d"] * 2,
                        less=lambda r: None if r["d"] is None else r["d"] - Decimal("0.5"))
    assert bench.output_at("out", (0,)) == want
