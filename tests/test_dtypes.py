"""The dtype rules: the promotion table (every pair of dtypes, and Python scalars with every
dtype) as traced kernels see it, result dtypes of `/`, comparisons, math and reductions,
and docs/dtypes.md's tables, which must match tilelang.dtypes (run this file to print them).
"""

import pathlib
import re

import numpy as np
import pytest

import tilelang as tl
from tilelang.dtypes import ALL_DTYPES, float32, int32, promote, promote_strong, scalar_dtype

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "dtypes.md"
BY_SHORT = {d.short: d for d in ALL_DTYPES}
WEAK_SCALARS = {"Python bool": True, "Python int": 1, "Python float": 1.0}
SEEN = {}  # what the kernels below saw while they were traced


def traced(kernel, *signatures, **constants):
    """Trace ``kernel`` for these argument signatures; returns what it recorded in SEEN."""
    SEEN.clear()
    tl.explain(kernel, *signatures, **constants, backend="interpret")
    return dict(SEEN)


def sig(d, ndim=1):
    return f"{d.short}[{', '.join(':' * ndim)}]"


def dtype_id(d):
    return d.short


def outcome(fn):
    """``fn()``'s dtype, or the class of the TileError it raises."""
    try:
        return fn().dtype
    except tl.TileError as err:
        return type(err)


# -------------------------------------------------------------- strong x strong


@tl.tile_kernel
def binary(x, y):
    a = tl.load(x, index=(0,), shape=(4,))
    b = tl.load(y, index=(0,), shape=(4,))
    SEEN["add"] = outcome(lambda: a + b)
    SEEN["radd"] = outcome(lambda: b + a)
    SEEN["mul"] = outcome(lambda: a * b)
    SEEN["maximum"] = outcome(lambda: tl.maximum(a, b))
    SEEN["where"] = outcome(lambda: tl.where(a == a, a, b))
    SEEN["div"] = outcome(lambda: a / b)
    SEEN["pow"] = outcome(lambda: a**b)
    SEEN["floordiv"] = outcome(lambda: a // b)
    SEEN["lt"] = outcome(lambda: a < b)
    SEEN["eq"] = outcome(lambda: a == b)
    SEEN["and"] = outcome(lambda: a & b)


@pytest.mark.parametrize("b", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("a", ALL_DTYPES, ids=dtype_id)
def test_strong_promotion(a, b):
    want = promote_strong(a, b)
    assert promote(a, False, b, False) == (want, False)
    assert promote_strong(b, a) is want
    seen = traced(binary, sig(a), sig(b))
    if want.is_bool:  # arithmetic is not defined on bool; max/where and bitwise ops are
        assert seen["add"] is seen["mul"] is tl.TileTypeError
        assert seen["maximum"] is seen["where"] is seen["and"] is tl.bool_
    else:
        assert seen["add"] is seen["radd"] is seen["mul"] is seen["maximum"] is seen["where"] is want
        assert seen["floordiv"] is want
        assert seen["and"] is (want if want.is_int else tl.TileTypeError)
    # `/` and `**` give floats: the promoted float, or float32 when both are ints or bools
    assert seen["div"] is seen["pow"] is (want if want.is_float else float32)
    assert seen["lt"] is seen["eq"] is tl.bool_


def test_promotion_rules_as_documented():
    names = tl.dtypes.BY_NAME
    assert promote_strong(tl.float16, tl.bfloat16) is float32
    assert promote_strong(tl.int64, tl.float16) is tl.float16  # int with float: the float
    assert promote_strong(tl.uint64, tl.int8) is tl.int64  # signed with unsigned, capped at int64
    assert promote_strong(tl.uint8, tl.int8) is tl.int16
    assert promote_strong(tl.uint32, tl.int64) is tl.int64
    assert promote_strong(tl.bool_, tl.uint8) is tl.uint8
    for d in ALL_DTYPES:  # the table is symmetric, and bool is the identity
        assert promote_strong(tl.bool_, d) is d
        for e in ALL_DTYPES:
            assert promote_strong(d, e) is promote_strong(e, d)
            assert promote_strong(d, e).name in names


# -------------------------------------------------------------- weak scalars


def _fits(value, d):
    if not isinstance(value, int) or isinstance(value, bool) or not d.is_int:
        return True
    info = np.iinfo(d.np)
    return info.min <= value <= info.max


@pytest.mark.parametrize("value", [True, False, 1, -1, 2**40, 2**63, 1.0, 0.1], ids=repr)
@pytest.mark.parametrize("d", ALL_DTYPES, ids=dtype_id)
def test_weak_python_scalars(d, value):
    @tl.tile_kernel
    def with_scalar(x):
        a = tl.load(x, index=(0,), shape=(4,))
        SEEN["add"] = outcome(lambda: a + value)
        SEEN["radd"] = outcome(lambda: value + a)
        SEEN["maximum"] = outcome(lambda: tl.maximum(a, value))
        SEEN["div"] = outcome(lambda: a / value)
        SEEN["lt"] = outcome(lambda: a < value)

    want, weak = promote(d, False, scalar_dtype(value), True)
    assert not weak
    seen = traced(with_scalar, sig(d))
    if not _fits(value, want):  # e.g. int8 + 2**40: the Python int must fit the tile's dtype
        assert seen["add"] is seen["radd"] is seen["maximum"] is seen["lt"] is tl.TileTypeError
        return
    if want.is_bool:
        assert seen["add"] is seen["radd"] is tl.TileTypeError
        assert seen["maximum"] is tl.bool_
    else:
        assert seen["add"] is seen["radd"] is seen["maximum"] is want
    assert seen["div"] is (want if want.is_float else float32)
    assert seen["lt"] is tl.bool_


def test_weak_scalar_dtypes():
    assert scalar_dtype(True) is tl.bool_
    assert scalar_dtype(2**31 - 1) is int32 and scalar_dtype(-(2**31)) is int32
    assert scalar_dtype(2**31) is tl.int64 and scalar_dtype(-(2**63)) is tl.int64
    assert scalar_dtype(1.5) is float32
    assert scalar_dtype(np.float16(1)) is tl.float16 and scalar_dtype(np.uint8(1)) is tl.uint8
    assert scalar_dtype(2**63) is tl.uint64 and scalar_dtype(2**64 - 1) is tl.uint64
    for too_big in (2**64, -(2**63) - 1):
        with pytest.raises(tl.TileTypeError, match="does not fit"):
            scalar_dtype(too_big)
    # two weak operands: the higher category wins, then the wider; the result stays weak
    assert promote(int32, True, float32, True) == (float32, True)
    assert promote(tl.int64, True, int32, True) == (tl.int64, True)
    assert promote(tl.bool_, True, int32, True) == (int32, True)


@tl.tile_kernel
def runtime_scalars(x, n, f):
    a = tl.load(x, index=(0,), shape=(4,))
    SEEN["a*n"] = (a * n).dtype
    SEEN["a*f"] = (a * f).dtype
    SEEN["a*(n+f)"] = (a * (n + f)).dtype
    SEEN["n+f"] = ((n + f).dtype, (n + f).type.weak)


@pytest.mark.parametrize("d", ALL_DTYPES, ids=dtype_id)
def test_runtime_scalar_arguments(d):
    """Python scalars passed at launch are weak like literals; NumPy scalars are strong."""
    if d.is_bool:
        return
    weak = traced(runtime_scalars, np.zeros(4, d.np), 3, 2.5)
    assert weak["a*n"] is d
    assert weak["a*f"] is weak["a*(n+f)"] is (d if d.is_float else float32)
    assert weak["n+f"] == (float32, True)
    strong = traced(runtime_scalars, np.zeros(4, d.np), np.int64(3), np.float32(2.5))
    assert strong["a*n"] is promote_strong(d, tl.int64)
    assert strong["a*f"] is promote_strong(d, float32)


# ---------------------------------------------------------- unary, math, reductions


ACCUMULATE = {"sum": tl.sum, "prod": tl.prod, "cumsum": tl.cumsum, "cumprod": tl.cumprod}


@tl.tile_kernel
def unary(x):
    a = tl.load(x, index=(0, 0), shape=(4, 4))
    SEEN["exp"] = outcome(lambda: tl.exp(a))
    SEEN["sqrt"] = outcome(lambda: tl.sqrt(a))
    SEEN["neg"] = outcome(lambda: -a)
    SEEN["invert"] = outcome(lambda: ~a)
    SEEN["max"] = outcome(lambda: tl.max(a, axis=0))
    SEEN["argmax"] = outcome(lambda: tl.argmax(a, axis=0))
    SEEN["dot"] = outcome(lambda: tl.dot(a, a))
    for name, fn in ACCUMULATE.items():
        SEEN[name] = outcome(lambda fn=fn: fn(a, axis=0))


def accumulation_dtypes(d):
    """(accumulator, result) of sum/prod/cumsum/cumprod, and dot's accumulator (None: not defined)."""
    if d.is_bool or (d.is_int and d.bits < 32):
        acc = tl.uint32 if d.kind == "u" else int32
        return acc, acc, (None if d.is_bool else int32)
    if d.is_float and d.bits < 32:
        return float32, d, float32
    dot = d if d.is_float else (tl.int64 if d.bits == 64 else int32)
    return d, d, dot


@pytest.mark.parametrize("d", ALL_DTYPES, ids=dtype_id)
def test_unary_and_reduction_dtypes(d):
    seen = traced(unary, sig(d, 2))
    assert seen["exp"] is seen["sqrt"] is (d if d.is_float else float32)
    assert seen["neg"] is (tl.TileTypeError if d.is_bool else d)
    assert seen["invert"] is (tl.TileTypeError if d.is_float else d)
    assert seen["max"] is d and seen["argmax"] is int32
    acc, result, dot = accumulation_dtypes(d)
    for name in ACCUMULATE:
        assert seen[name] is result, name
    assert seen["dot"] is (dot or tl.TileTypeError)
    text = tl.explain(unary, sig(d, 2), backend="interpret")["tile_ir"]
    for prim in ("reduce_sum", "reduce_prod", "cumsum", "cumprod"):
        line = next(line for line in text.splitlines() if f"= {prim}[" in line)
        assert line.split(":", 1)[1].startswith(f"{acc.short}["), line  # the dtype it accumulates in


# ------------------------------------------------------------------- docs/dtypes.md


def _row(cells):
    return "| " + " | ".join(cells) + " |"


def render_promotion_table():
    head = [_row(["", *(d.short for d in ALL_DTYPES)]), _row(["---"] * (len(ALL_DTYPES) + 1))]
    rows = [_row([f"**{a.short}**", *(promote_strong(a, b).short for b in ALL_DTYPES)]) for a in ALL_DTYPES]
    return "\n".join(head + rows)


def render_weak_table():
    head = [_row(["tile", *WEAK_SCALARS]), _row(["---"] * (len(WEAK_SCALARS) + 1))]
    rows = [
        _row([f"**{d.short}**", *(promote(d, False, scalar_dtype(v), True)[0].short for v in WEAK_SCALARS.values())])
        for d in ALL_DTYPES
    ]
    return "\n".join(head + rows)


def render_accumulation_table():
    head = [
        _row(["input", "sum, prod, cumsum, cumprod accumulate in", "and return", "dot accumulates in and returns"]),
        _row(["---"] * 4),
    ]
    rows = []
    for d in ALL_DTYPES:
        acc, result, dot = accumulation_dtypes(d)
        rows.append(_row([f"**{d.short}**", acc.short, result.short, dot.short if dot else "(error)"]))
    return "\n".join(head + rows)


def doc_table(heading):
    """The cells of the first markdown table after ``heading`` in docs/dtypes.md."""
    lines = DOC.read_text().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([c.strip().strip("*`") for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert rows and set(rows[1]) <= {"---", ":---:", "---:", ":---"}, heading
    return rows[0], rows[2:]


def test_doc_promotion_table_matches_promote():
    header, rows = doc_table("### Tile with tile")
    assert header[1:] == [d.short for d in ALL_DTYPES]
    assert [r[0] for r in rows] == [d.short for d in ALL_DTYPES]
    for row in rows:
        a = BY_SHORT[row[0]]
        for b, cell in zip(ALL_DTYPES, row[1:], strict=True):
            assert BY_SHORT[cell] is promote_strong(a, b), (a, b, cell)


def test_doc_weak_table_matches_promote():
    header, rows = doc_table("### Tile with a Python scalar")
    assert header[1:] == list(WEAK_SCALARS)
    assert [r[0] for r in rows] == [d.short for d in ALL_DTYPES]
    for row in rows:
        d = BY_SHORT[row[0]]
        for value, cell in zip(WEAK_SCALARS.values(), row[1:], strict=True):
            assert BY_SHORT[cell] is promote(d, False, scalar_dtype(value), True)[0], (d, value, cell)


def test_doc_accumulation_table_matches_the_ops():
    _, rows = doc_table("## Accumulation")
    assert [r[0] for r in rows] == [d.short for d in ALL_DTYPES]
    for row in rows:
        acc, result, dot = accumulation_dtypes(BY_SHORT[row[0]])
        assert row[1:] == [acc.short, result.short, dot.short if dot else "(error)"], row


def test_doc_tables_are_rendered_from_the_code():
    text = DOC.read_text()
    for table in (render_promotion_table(), render_weak_table(), render_accumulation_table()):
        assert table in text


def test_doc_lists_every_dtype():
    header, rows = doc_table("## Supported dtypes")
    names = [r[0] for r in rows]
    assert names == [f"tl.{d.name}" if d.name != "bool" else "tl.bool_" for d in ALL_DTYPES]
    for row, d in zip(rows, ALL_DTYPES, strict=True):
        assert row[1] == d.short and row[2] == str(d.bits)
    assert re.search(r"ml_dtypes\.bfloat16", DOC.read_text())


if __name__ == "__main__":  # print the tables for docs/dtypes.md
    print(render_promotion_table(), render_weak_table(), render_accumulation_table(), sep="\n\n")
