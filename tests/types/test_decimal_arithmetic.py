"""Decimal arithmetic in a pipeline is exact: a decimal(38,10) plus, minus or times a small
constant keeps every digit (Spark by default cuts such a result's scale to fit 38 digits, a
silent rounding), as DuckDB computes it. A result that outgrows 38 digits is refused in one
line that names the operator and, for a sum, the key; nothing is written."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pyarrow as pa

from tests.helpers import reference as R
from tests.helpers.cli import ddcli, one_line_error
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


BIG = Decimal("9" * 28 + ".5")  # 28 digits before the point: twice it needs 39 digits in all
OVERFLOW_SUM = '''
def pipeline(p):
    p.output("totals", p.input("xs").sum("k", "d", name="total"))
'''
OVERFLOW_MAP = '''
def pipeline(p):
    p.output("twice", p.input("xs").select("k", twice="d * 2"))
'''


def _overflowing_store(tmp_path) -> Bench:
    bench = Bench(tmp_path, 1)
    schema = pa.schema([("k", pa.string()), ("d", pa.decimal128(38, 10))])
    rows = [(f"key{i}", Decimal(i).scaleb(-3)) for i in range(40)]  # many keys fit; one does not
    bench.ingest("xs", schema, [(r, (0,), 1) for r in rows] + [(("key13", BIG), (0,), 1), (("key13", BIG), (1,), 1)])
    return bench


def test_a_sum_beyond_38_digits_is_refused_naming_its_key(spark, tmp_path):
    bench = _overflowing_store(tmp_path)
    version = bench.store.state().version
    line = one_line_error(ddcli(bench.store.path, "run", bench.pipeline("sums", OVERFLOW_SUM)))
    assert "key k='key13'" in line and "the sum 19999999999999999999999999999.0130000000" in line, line
    assert "DECIMAL(38,10)" in line and "nothing was written" in line, line
    assert bench.store.state().version == version


def test_arithmetic_beyond_38_digits_is_refused_naming_the_operator(spark, tmp_path):
    bench = _overflowing_store(tmp_path)
    version = bench.store.state().version
    line = one_line_error(ddcli(bench.store.path, "run", bench.pipeline("maps", OVERFLOW_MAP)))
    assert "select (maps.py:3)" in line and "`d * 2`" in line and "cannot be represented" in line, line
    assert "ansi" not in line.lower() and "SQLSTATE" not in line, line
    assert bench.store.state().version == version
