"""Constant folding gives what running gives (issue 19, items 15, 17, 18).

The thread-IR folder (``_lower/lowering.fold``) computes an op on immediates at compile
time: its results must wrap (integers) or round (floats) to the register's dtype, shifts
must follow docs/dtypes.md for any count, and the identities it applies (``x + -0.0``,
``x * 1``, ...) must be exact. Each test runs on the interpreter and the CPU backend (and
CUDA when ``TILELANG_TEST_BACKENDS`` names it); the property tests compare folding
immediates with the same ops run from arrays.
"""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt
from tilelang._lower.lowering import fold as _fold
from tilelang._lower.thread_ir import Imm

BACKENDS = ("interpret", "cpu") + (("cuda",) if "cuda" in tlt.default_backends() else ())


def run(kernel, *args):
    """``kernel[1](*args)`` on every backend; the arrays each left behind."""
    results = {}
    for backend in BACKENDS:
        copies = [np.array(a, copy=True) for a in args]
        kernel[1](*copies, backend=backend)
        results[backend] = copies
    return results


def assert_same_bits(got, want, what):
    """Equal values, NaN to NaN and the sign of zero included (a NaN's sign and payload are the
    hardware's: the GPU's default NaN is positive, x86's negative)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, what
    nan = (got != got) & (want != want)
    same = (got == want) | nan
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        same &= nan | (np.signbit(got.astype(np.float32)) == np.signbit(want.astype(np.float32)))
    assert same.all(), f"{what}: got {got}, want {want}"


# ------------------------------------------------------------- the kernels


@tl.tile_kernel
def wrapping_constants(o1, o2, o3, o4, o5, o6):
    a = tl.full((4,), 2147483647, tl.int32)
    tl.store(o1, (a + 1) >> 31, index=(0,))
    c = tl.full((4,), 65536, tl.int32)
    tl.store(o2, ((c * c) == 0).astype(tl.int32), index=(0,))
    tl.store(o3, tl.full((4,), -1, tl.int32).astype(tl.uint32) >> 1, index=(0,))
    tl.store(o4, tl.full((4,), 300, tl.int32).astype(tl.int8) >> 1, index=(0,))
    tl.store(o5, (tl.full((4,), 0, tl.uint32) - 1) < 1, index=(0,))  # wraps to 2**32-1, not -1
    tl.store(o6, tl.full((4,), 1, tl.int64) << 40, index=(0,))


def test_folded_integers_wrap_to_their_dtype():
    outs = [np.zeros(4, d) for d in (np.int32, np.int32, np.uint32, np.int8, np.bool_, np.int64)]
    want = [-1, 1, 2**31 - 1, 22, False, 2**40]
    for backend, got in run(wrapping_constants, *outs).items():
        for i, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(g, np.full(4, w, g.dtype), err_msg=f"o{i + 1} on {backend}")


@tl.tile_kernel
def constant_shifts(o1, o2, o3, o4, o5, o6):
    three, minus = tl.full((8,), 3, tl.int32), tl.full((8,), -8, tl.int32)
    tl.store(o1, three << -1, index=(0,))  # a negative count shifts every bit out
    tl.store(o2, minus >> -1, index=(0,))
    tl.store(o3, three << 32, index=(0,))
    tl.store(o4, minus >> 40, index=(0,))
    tl.store(o5, three >> 32, index=(0,))
    tl.store(o6, tl.full((8,), 200, tl.uint8) >> 9, index=(0,))


def test_constant_shift_counts_out_of_range_follow_the_documented_rule():
    outs = [np.full(8, 7, np.int32) for _ in range(5)] + [np.full(8, 7, np.uint8)]
    want = [0, -1, 0, -1, 0, 0]
    for backend, got in run(constant_shifts, *outs).items():
        for i, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(g, np.full(8, w, g.dtype), err_msg=f"o{i + 1} on {backend}")


@tl.tile_kernel
def float_constants(o1, o2, o3, o4):
    tl.store(o1, (tl.full((4,), 1.0, tl.float32) + 1e-8 == 1.0).astype(tl.int32), index=(0,))
    tl.store(o2, (tl.full((4,), 1.0, tl.float16) + 1e-4 == 1.0).astype(tl.int32), index=(0,))
    tl.store(o3, (tl.full((4,), 1.0, tl.bfloat16) * 1.001 == 1.0).astype(tl.int32), index=(0,))
    one = tl.full((), 1.0, tl.float16)  # 0-d: folded in the tile IR (simplify), by the interpreter's rule
    tl.store(o4, tl.full((4,), (one + 1e-4 == 1.0).astype(tl.int32), tl.int32), index=(0,))


def test_folded_floats_round_to_their_dtype():
    for backend, got in run(float_constants, *(np.zeros(4, np.int32) for _ in range(4))).items():
        for i, g in enumerate(got):
            np.testing.assert_array_equal(g, np.ones(4, np.int32), err_msg=f"o{i + 1} on {backend}")


@tl.tile_kernel
def float_identities(x, o1, o2, o3, o4, o5, o6, o7):
    a = tl.load(x, index=(0,), shape=(8,))
    tl.store(o1, a + 0.0, index=(0,))  # -0.0 + 0.0 is +0.0: not an identity
    tl.store(o2, 0.0 + a, index=(0,))
    tl.store(o3, a - -0.0, index=(0,))  # x - -0.0 is x + 0.0
    tl.store(o4, a * 0.0, index=(0,))  # NaN for inf and NaN, -0.0 for negative x
    tl.store(o5, a + -0.0, index=(0,))  # these three are exact identities
    tl.store(o6, a - 0.0, index=(0,))
    tl.store(o7, a * 1.0, index=(0,))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_only_exact_float_identities_are_folded(dtype):
    x = np.array([-0.0, 0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, -1e-3], dtype)
    with np.errstate(all="ignore"):
        want = [x + dtype(0.0), dtype(0.0) + x, x - dtype(-0.0), x * dtype(0.0), x + dtype(-0.0), x - dtype(0.0), x]
    for backend, (_, *got) in run(float_identities, x, *(np.zeros(8, dtype) for _ in range(7))).items():
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_bits(g, w, f"o{i + 1} on {backend}")
    ir = tl.explain(float_identities, x, *(np.zeros(8, dtype) for _ in range(7)), backend="cpu")["thread_ir"]
    assert ir.count(" = add ") + ir.count(" = sub ") + ir.count(" = mul ") >= 4  # o1 to o4 are computed


# ------------------------------------------------ properties: folding immediates vs running


@tl.tile_kernel
def binary_ops(x, y, add, sub, mul, and_, or_, shl, shr, lt, eq):
    a, b = tl.load(x, index=(0,), shape=(16,)), tl.load(y, index=(0,), shape=(16,))
    for out, value in ((add, a + b), (sub, a - b), (mul, a * b), (lt, a < b), (eq, a == b)):
        tl.store(out, value, index=(0,))
    if a.dtype.is_int:
        for out, value in ((and_, a & b), (or_, a | b), (shl, a << b), (shr, a >> b)):
            tl.store(out, value, index=(0,))


INT_OPS = ("add", "sub", "mul", "and", "or", "shl", "shr", "lt", "eq")
FLOAT_OPS = ("add", "sub", "mul", "lt", "eq")


def _operand(d, data, label, counts=False):
    info = np.iinfo(d.np)
    values = st.integers(int(info.min), int(info.max))
    if counts:  # shift counts around the bit width (and negative ones) are the interesting ones
        values = st.integers(max(-3, int(info.min)), d.bits + 3) | values
    return data.draw(hnp.arrays(d.np, 16, elements=values), label=label)


def _py(v):
    return float(v) if v.dtype.kind == "f" or v.dtype == ml_dtypes.bfloat16 else v.item()


def _check_folding(d, x, y, ops):
    names = [{"and": "and_", "or": "or_"}.get(op, op) for op in ops]
    outs = {n: np.zeros(16, np.bool_ if n in ("lt", "eq") else d.np) for n in ("add", "sub", "mul", "lt", "eq")}
    outs.update({n: np.zeros(16, np.bool_ if not d.is_int else d.np) for n in ("and_", "or_", "shl", "shr")})
    order = ["add", "sub", "mul", "and_", "or_", "shl", "shr", "lt", "eq"]
    for backend, (_, _, *got) in run(binary_ops, x, y, *(outs[n] for n in order)).items():
        got = dict(zip(order, got))
        for op, name in zip(ops, names):
            result_dtype = tl.bool_ if op in ("lt", "eq") else d
            folded = [_fold(op, result_dtype, (Imm(_py(a), d), Imm(_py(b), d)), None) for a, b in zip(x, y)]
            assert all(isinstance(f, Imm) for f in folded)
            want = np.array([f.value for f in folded]).astype(got[name].dtype)
            assert_same_bits(got[name], want, f"{op} folded vs run on {backend}, x={x}, y={y}")


@pytest.mark.parametrize("d", [tl.int32, tl.int8, tl.uint32, tl.int64, tl.uint8])
@given(data=st.data())
def test_folded_integer_ops_match_running_them(d, data):
    x = _operand(d, data, "x")
    _check_folding(d, x, _operand(d, data, "y", counts=True), INT_OPS)


@pytest.mark.parametrize("d", [tl.float32, tl.float16, tl.bfloat16])
@given(data=st.data())
def test_folded_float_ops_match_running_them(d, data):
    x = data.draw(tlt.arrays(d, 16, allow_nan_inf=True), label="x")
    near = x.astype(np.float32) * np.float32(data.draw(st.sampled_from([1e-8, 1e-3, -1.0, 1.0]), label="scale"))
    y = np.where(data.draw(hnp.arrays(np.bool_, 16), label="near"), near, data.draw(tlt.arrays(d, 16))).astype(d.np)
    _check_folding(d, x, y, FLOAT_OPS)


@tl.tile_kernel
def conversions(x, o1, o2, o3, o4, o5, o6):
    a = tl.load(x, index=(0,), shape=(16,))
    for out in (o1, o2, o3, o4, o5, o6):
        tl.store(out, a.astype(out.dtype), index=(0,))


@pytest.mark.parametrize("d", [tl.int32, tl.int8, tl.uint32, tl.uint64])
@given(data=st.data())
def test_folded_conversions_match_running_them(d, data):
    targets = (tl.uint32, tl.int8, tl.uint8, tl.int64, tl.bool_, tl.float32)
    x = _operand(d, data, "x")
    for backend, (_, *got) in run(conversions, x, *(np.zeros(16, t.np) for t in targets)).items():
        for t, g in zip(targets, got):
            folded = [_fold("convert", t, (Imm(_py(a), d),), t).value for a in x]
            assert_same_bits(g, np.array(folded).astype(t.np), f"{d.name} -> {t.name} on {backend}, x={x}")
