"""Value ranges of the lowering (tilelang/_lower/ranges.py): every interval holds every value
the op can give on operands within theirs (integers wrapping at their width, as NumPy's),
and the decided comparisons and maxima hold for all of them."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang import dtypes as D
from tilelang._lower.ranges import decided, dtype_range, loop_index_range, op_range
from tilelang._lower.thread_ir import Imm, Reg, SlotMap

DTYPES = [D.int16, D.int32, D.int64, D.uint32]
NUMPY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": np.bitwise_and,
    "shl": np.left_shift,
    "shr": np.right_shift,
    "floordiv": np.floor_divide,
    "mod": np.mod,
}

DECIDED = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "maximum": max, "minimum": min}


@st.composite
def intervals(draw, d):
    lo, hi = dtype_range(d)
    small = st.integers(max(lo, -300), min(hi, 300))
    a, b = draw(st.one_of(st.tuples(small, small), st.tuples(st.integers(lo, hi), st.integers(lo, hi))))
    return min(a, b), max(a, b)


def values(draw, r, d, n=20):
    return np.array([draw(st.integers(*r)) for _ in range(n)] + list(r), d.np)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), d=st.sampled_from(DTYPES), op=st.sampled_from(sorted(NUMPY) + ["neg"]))
def test_an_interval_holds_every_result(data, d, op):
    ra = data.draw(intervals(d))
    if op in ("shl", "shr", "and", "floordiv", "mod"):  # (by an immediate)
        lo, hi = (0, d.bits - 1) if op in ("shl", "shr") else (op != "and", dtype_range(d)[1])
        c = data.draw(st.integers(lo, hi))
        args, ranges, b = [Reg("x", d), Imm(c, d)], [ra, (c, c)], np.full(22, c, d.np)
    elif op == "neg":
        args, ranges, b = [Reg("x", d)], [ra], None
    else:
        rb = data.draw(intervals(d))
        args, ranges = [Reg("x", d), Reg("y", d)], [ra, rb]
        b = values(data.draw, rb, d)
    r = op_range(op, d, args, ranges, None, 128)
    if r is None:
        return
    a = values(data.draw, ra, d)
    with np.errstate(all="ignore"):
        out = np.negative(a) if op == "neg" else NUMPY[op](a, b)
    assert ((r[0] <= out.astype(object)) & (out.astype(object) <= r[1])).all(), (op, ra, ranges, r, out)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), d=st.sampled_from(DTYPES), e=st.sampled_from(DTYPES))
def test_a_conversion_keeps_an_interval_only_where_it_fits(data, d, e):
    ra = data.draw(intervals(d))
    r = op_range("convert", e, [Reg("x", d)], [ra], e, 128)
    a = values(data.draw, ra, d)
    if r is not None:
        assert (a.astype(e.np).astype(object) == a.astype(object)).all() and r == ra


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    d=st.sampled_from(DTYPES),
    e=st.sampled_from(DTYPES),
    op=st.sampled_from(["lt", "le", "gt", "ge", "maximum", "minimum"]),
)
def test_a_decided_comparison_holds_for_every_value(data, d, e, op):
    ra, rb = data.draw(intervals(d)), data.draw(intervals(e))
    x, y = Reg("x", d), Reg("y", e)
    known = decided(op, d if op in ("maximum", "minimum") else D.bool_, [x, y], [ra, rb])
    if known is None:
        return
    a, b = values(data.draw, ra, d).astype(object), values(data.draw, rb, e).astype(object)
    if op in ("maximum", "minimum"):
        pick = max if op == "maximum" else min
        assert all(pick(u, v) == (u if known is x else v) for u in a for v in b)
    else:
        compare = {
            "lt": lambda u, v: u < v,
            "le": lambda u, v: u <= v,
            "gt": lambda u, v: u > v,
            "ge": lambda u, v: u >= v,
        }
        assert all(compare[op](u, v) == known.value for u in a for v in b)


@settings(max_examples=300, deadline=None)
@given(start=st.integers(-50, 50), stop=st.integers(-50, 50), step=st.integers(-5, 5), spread=st.integers(0, 9))
def test_a_loop_index_stays_in_its_interval(start, stop, step, spread):
    """Every index ``range(a, b, c)`` gives, for bounds anywhere in their intervals."""
    r = loop_index_range((start, start + spread), (stop, stop + spread), (step, step + spread % 2))
    for a in (start, start + spread):
        for b in (stop, stop + spread):
            for c in {step, step + spread % 2} - {0}:
                assert r is None or all(r[0] <= k <= r[1] for k in range(a, b, c)), (r, a, b, c)


def test_ids_slots_and_shapes():
    assert op_range("thread_id", D.int32, [], [], None, 256) == (0, 255)
    assert op_range("block_id", D.int32, [], [], 0, 256) == (0, 2**31 - 1)
    assert op_range("slot", D.int32, [], [], SlotMap.of_bits([(0, 2), (1, 3), (2, 10)], const=1), 128) == (
        1,
        1 + 12 + 1024,
    )
    assert decided("lt", D.bool_, [Reg("x", D.uint64), Reg("y", D.int32)], [(2**63, 2**63), (0, 5)]) is None
    assert decided("maximum", D.int64, [Reg("x", D.int32), Reg("y", D.int64)], [(5, 9), (0, 1)]) is None  # (dtypes)


@tl.tile_kernel(backend="cpu")
def rows_plus_one(x, out, BN: tl.Constant):
    i = tl.block_id(0)
    for j in tl.range(0, tl.cdiv(x.shape[1], BN)):
        tl.store(out, tl.load(x, index=(i, j), shape=(1, BN)) + 1, index=(i, j))


def test_a_rows_window_tests_no_lower_bounds():
    """The row is a block id and the column windows start at multiples of the loop index,
    which counts up from 0: no window bound below is tested (no ``neg`` of a corner, no
    comparison with 0, no saturation of the offset), the upper ones are."""
    ir = tl.explain(rows_plus_one, "f32[:, :]", "f32[:, :]", BN=64, backend="cpu")["thread_ir"]
    assert " neg " not in ir and " ge " not in ir and " select " not in ir and " lt " in ir, ir
    x = np.arange(3 * 200, dtype=np.float32).reshape(3, 200)
    out = np.zeros_like(x)
    rows_plus_one[3](x, out, BN=64)
    np.testing.assert_array_equal(out, x + 1)
