"""Numerical edge cases on every backend (issue 19): shifts by runtime counts, integer
division at the extremes, narrowing conversions rounded once, signs of zero, and the
accuracy contract of the math functions (docs/dtypes.md). References are computed here
from the documented rules (Python ints, float64 or long double), not by the interpreter,
and each test runs on ``tlt.default_backends()`` (the interpreter included), so
``TILELANG_TEST_BACKENDS=interpret,cpu,cuda`` covers the GPU. Inputs are runtime arrays:
constant folding is not what these tests check.
"""

import math
import re
from fractions import Fraction

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt
from tilelang._backends.cuda_intrinsics import F8_PAST
from tilelang._ir.primitives import ftz_exponent
from tilelang.dtypes import ALL_DTYPES

N = 16  # elements per test tile
INTS = [d for d in ALL_DTYPES if d.is_int]


def backends():
    return tlt.default_backends()


def edge_ints(d, extra=()):
    """Integers of dtype ``d``: its whole range, its extremes and small values more often."""
    info = np.iinfo(d.np)
    edges = [int(info.min), int(info.min) + 1, -1, 0, 1, 2, int(info.max) - 1, int(info.max), *extra]
    edges = [v for v in edges if info.min <= v <= info.max]
    return hnp.arrays(d.np, (N,), elements=st.sampled_from(edges) | st.integers(int(info.min), int(info.max)))


def wrap(v, d):
    bits = d.bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if d.kind == "i" and v >> (bits - 1) else v


# ------------------------------------------------------------------- shifts


@tl.tile_kernel
def shifts(x, y, left, right):
    a, b = tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))
    tl.store(left, a << b, index=(0,))
    tl.store(right, a >> b, index=(0,))


def shift_reference(x, y, d):
    """docs/dtypes.md: a count of ``bits`` or more, or a negative one, shifts every bit out."""
    left, right = [], []
    for a, b in zip(map(int, x), map(int, y)):
        inside = 0 <= b < d.bits
        left.append(wrap(a << b, d) if inside else 0)
        right.append(a >> b if inside else (-1 if a < 0 else 0))
    return np.array(left, d.np), np.array(right, d.np)


@pytest.mark.parametrize("d", INTS, ids=str)
@given(data=st.data())
def test_shifts_by_runtime_counts_keep_every_bit(d, data):
    """uint64 shifts went through float64 on the numba backends (`x if ok else 0` unified
    uint64 with int64): 2**64 - 2 << 0 gave 2**64 - 1."""
    x = data.draw(edge_ints(d, [2**53 + 1, 2**63 + 1, 2**64 - 2]))
    bits = d.bits
    y = data.draw(edge_ints(d, [bits - 1, bits, bits + 1, -bits, 2 * bits]))
    want = shift_reference(x, y, d)
    for backend in backends():
        left, right = np.zeros(N, d.np), np.zeros(N, d.np)
        shifts[1](x, y, left, right, backend=backend)
        np.testing.assert_array_equal(left, want[0], err_msg=f"<< on {backend}")
        np.testing.assert_array_equal(right, want[1], err_msg=f">> on {backend}")


def ptx_instructions(kernel, *signature, **constants):
    """The instructions of the kernel's PTX (inline assembly's too, several to a line)."""
    ptx = tl.explain(kernel, *signature, backend="cuda", **constants)["ptx"]
    return set(re.findall(r"(?:^|[;{])\s*(?:@%?\w+\s+)?([a-z][a-z0-9]*\.[\w.]+)", ptx, re.M))


def test_uint64_shifts_stay_integers_in_ptx():
    ops = ptx_instructions(shifts, *["u64[:]"] * 4)
    assert {"shl.b64", "shr.u64", "selp.b64"} <= ops, ops
    assert not {op for op in ops if "f64" in op}, ops  # it was cvt.rn.f64.u64, cvt.rzi.u64.f64


@tl.tile_kernel
def high_products(x, y, out):
    tl.store(out, tl.umulhi(tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))), index=(0,))


@pytest.mark.parametrize("d", ["u32", "i32", "u64", "i64"])
def test_umulhi_is_one_unsigned_multiply_in_ptx(d):
    """One mul.hi, unsigned also for signed operands (Triton's __nv_umulhi): LLVM had made a
    32-bit one a 64-bit multiply of the zero-extended words (mul.lo.s64)."""
    ops = ptx_instructions(high_products, *[f"{d}[:]"] * 3)
    assert f"mul.hi.u{d[1:]}" in ops and "mul.lo.s64" not in ops, ops


# ---------------------------------------------------------- integer division


@tl.tile_kernel
def divmod_kernel(x, y, q, r):
    a, b = tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))
    tl.store(q, a // b, index=(0,))
    tl.store(r, a % b, index=(0,))


def divmod_reference(x, y, d):
    """Python's floor division and modulo, wrapped (``INT_MIN // -1`` is ``INT_MIN``); both 0 for a zero divisor."""
    q = [wrap(a // b, d) if b else 0 for a, b in zip(map(int, x), map(int, y))]
    r = [wrap(a % b, d) if b else 0 for a, b in zip(map(int, x), map(int, y))]
    return np.array(q, d.np), np.array(r, d.np)


@pytest.mark.parametrize("d", INTS, ids=str)
@given(data=st.data())
def test_integer_floordiv_and_mod_at_the_extremes(d, data):
    """``INT64_MIN // -1`` gave 0 on the CPU backend (numba's own ``//``); int32 was right."""
    x, y = data.draw(edge_ints(d)), data.draw(edge_ints(d))
    info = np.iinfo(d.np)
    x[:4], y[:4] = info.min, (-1 if d.kind == "i" else 1, info.min or 1, info.max, 0)  # the overflowing quotient
    want = divmod_reference(x, y, d)
    for backend in backends():
        q, r = np.zeros(N, d.np), np.zeros(N, d.np)
        divmod_kernel[1](x, y, q, r, backend=backend)
        np.testing.assert_array_equal(q, want[0], err_msg=f"// on {backend}")
        np.testing.assert_array_equal(r, want[1], err_msg=f"% on {backend}")


# ------------------------------------------------------------ signs of zero

FLOATS = [d for d in ALL_DTYPES if d.is_float]


@tl.tile_kernel
def rounding(x, y, lo, hi, q, r):
    a, b = tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))
    tl.store(lo, tl.floor(a), index=(0,))
    tl.store(hi, tl.ceil(a), index=(0,))
    tl.store(q, a // b, index=(0,))
    tl.store(r, a % b, index=(0,))


def assert_same_floats(got, want, msg):
    """Bit for bit up to NaN payloads: values, infinities and signs of zero."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    np.testing.assert_array_equal(got, want, err_msg=msg)
    assert np.array_equal(np.signbit(got) | np.isnan(got), np.signbit(want) | np.isnan(want)), f"{msg}: signs differ"


SIGNED_ZERO_CASES = [0.0, -0.0, -0.5, 0.5, -1.0, 2.5, -2.5, 1e-30, -1e-30, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("d", FLOATS, ids=str)
@given(data=st.data())
def test_floor_ceil_and_floordiv_keep_the_sign_of_zero(d, data):
    """floor(-0.0), ceil(-0.0), ceil(-0.5) and 0.0 // -1.0 gave +0.0 on the CPU backend (NumPy: -0.0)."""
    values = st.sampled_from(SIGNED_ZERO_CASES) | st.floats(-1e6, 1e6, width=32)
    x, y = data.draw(hnp.arrays(np.float64, (2, N), elements=values))
    x[:6], y[:6] = (0.0, -0.0, 0.0, -0.0, -2.0, 2.0), (-1.0, 1.0, 1.0, -1.0, 1.0, -1.0)  # the zero quotients
    t = np.float32 if d.bits < 32 else d.np  # 16- and 8-bit floats compute in float32
    with np.errstate(all="ignore"):  # 1e6 is inf in float16
        x, y = x.astype(d.np), y.astype(d.np)
        xt, yt = x.astype(t), y.astype(t)
        want = [np.floor(xt), np.ceil(xt), np.floor_divide(xt, yt), np.mod(xt, yt)]
    for backend in backends():
        outs = [np.zeros(N, d.np) for _ in want]
        rounding[1](x, y, *outs, backend=backend)
        for name, got, w in zip(("floor", "ceil", "//", "%"), outs, want):
            assert_same_floats(got, w.astype(d.np), f"{name} {d} on {backend}")


def test_floor_and_ceil_are_single_instructions_in_ptx():
    for d in ("f32", "f64"):
        ops = ptx_instructions(rounding, *[f"{d}[:]"] * 6)
        assert {f"cvt.rmi.{d}.{d}", f"cvt.rpi.{d}.{d}"} <= ops, ops  # floor, ceil: float results
        assert not {op for op in ops if op.startswith("cvt.rzi.s64")}, ops  # no trip through int64


@tl.tile_kernel(num_threads=128, arch="sm_90a")
def divide_beside_a_dot(x, y, q, a, b, c):
    """A float division in a kernel whose dot runs on wgmma: CUDA divides there through
    float64 (cuda_arith.py: div.rn.f32 calls a subroutine, which serializes the wgmmas)."""
    u, v = tl.load(x, index=(0,), shape=(64,)), tl.load(y, index=(0,), shape=(64,))
    tl.store(q, u / v, index=(0,))
    product = tl.dot(tl.load(a, index=(0, 0), shape=(64, 16)), tl.load(b, index=(0, 0), shape=(16, 16)))
    tl.store(c, product, index=(0, 0))


TINY = 2.0**-149  # the smallest float32 subnormal
DIVISIONS = [(-0.0, 5.0), (0.0, -5.0), (0.0, 0.0), (1.0, 0.0), (-1.0, 0.0), (np.inf, np.inf), (1.0, -np.inf),
             (-np.inf, 3.0), (np.nan, 1.0), (3 * TINY, 2.0), (5 * TINY, 2.0), (3e38, 1e-38), (TINY, 3e38),
             (1.0, 3.0), (6.0, 3.0), (3.4028235e38, 0.5), (147 * TINY, 98.0), (2175 * TINY, 150.0)]  # fmt: skip


@given(data=st.data())
def test_float_division_in_a_wgmma_kernel_rounds_correctly(data):
    """Bit for bit NumPy's correctly rounded float32 quotient: zeros' signs, infinities,
    NaN, subnormal quotients (ties to even among them), overflow."""
    x, y = data.draw(hnp.arrays(np.float32, (2, 64), elements=st.floats(width=32)))
    x[: len(DIVISIONS)], y[: len(DIVISIONS)] = np.array(DIVISIONS, np.float32).T
    with np.errstate(all="ignore"):
        want = x / y
    a, b = np.ones((64, 16), np.float16), np.ones((16, 16), np.float16)
    for backend in backends():
        q, c = np.zeros(64, np.float32), np.zeros((64, 16), np.float32)
        divide_beside_a_dot[1](x, y, q, a, b, c, backend=backend)
        assert_same_floats(q, want, f"/ on {backend}")
        assert np.all(c == 16), backend


@tl.tile_kernel(num_threads=32)
def divide_by_a_scalar(x, s, q, BLOCK: tl.Constant):
    """BLOCK / 32 quotients a thread by one divisor: on CUDA from its reciprocal by fmas, or, in
    a thread with any dividend outside that route's exact range, through float64
    (cuda_arith.divide_by_shared)."""
    tl.store(q, tl.load(x, index=(0,), shape=(BLOCK,)) / s, index=(0,))


SHARED_DIVISORS = [3.0, -7.0, 1.0, 0.0, -0.0, np.inf, np.nan, TINY, 2.0**-126, 1e-38, 3e38, 2.0**125, 2.0**126, 0.1]


@tl.tile_kernel(num_threads=32)
def divide_rows(x, s, q):
    """A (8, 64) tile by its rows' divisors: a few divisors a thread, each shared by many quotients."""
    t, d = tl.load(x, index=(0, 0), shape=(8, 64)), tl.load(s, index=(0,), shape=(8,))
    tl.store(q, t / d[:, None], index=(0, 0))


@given(data=st.data())
def test_quotients_by_one_divisor_round_correctly(data):
    """Bit for bit NumPy's quotients: threads whose dividends are all ordinary (the fma route
    on CUDA) and threads with a zero, infinity, NaN, subnormal or huge one among them."""
    s = np.float32(data.draw(st.sampled_from(SHARED_DIVISORS) | st.floats(width=32)))
    x = data.draw(hnp.arrays(np.float32, 256, elements=st.floats(-1e6, 1e6, width=32)))
    specials = np.array([d for d, _ in DIVISIONS] + [TINY, -(2.0**-100), 2.0**-101, 3.4e38], np.float32)
    x[:: len(x) // len(specials)][: len(specials)] = specials  # (a thread's 8 dividends are 8 consecutive ones)
    with np.errstate(all="ignore"):
        want = x / s
    for backend in backends():
        q = np.zeros_like(x)
        divide_by_a_scalar[1](x, s, q, BLOCK=256, backend=backend)
        assert_same_floats(q, want, f"/ {s!r} on {backend}")
    rows = np.array([s, 3.0, -0.0, np.inf, TINY, 7.0, 1e-30, 0.1], np.float32)
    with np.errstate(all="ignore"):
        want = x.reshape(8, 32).repeat(2, axis=1) / rows[:, None]
    for backend in backends():
        q = np.zeros((8, 64), np.float32)
        divide_rows[1](x.reshape(8, 32).repeat(2, axis=1), rows, q, backend=backend)
        assert_same_floats(q, want, f"rows / {rows} on {backend}")


@tl.tile_kernel
def scale_at_runtime(x, s, prod, less, filled):
    t = tl.load(x, index=(0,), shape=(N,))
    tl.store(prod, t * s, index=(0,))
    tl.store(less, t < s, index=(0,))
    tl.store(filled, tl.full((N,), s, x.dtype), index=(0,))


@tl.tile_kernel
def scale_by_constant(x, prod, less, filled, S: tl.Constant):
    t = tl.load(x, index=(0,), shape=(N,))
    tl.store(prod, t * S, index=(0,))
    tl.store(less, t < S, index=(0,))
    tl.store(filled, tl.full((N,), S, x.dtype), index=(0,))


def same_as_a_literal(d, s, x):
    for backend in backends():
        runtime = [np.zeros(N, d.np), np.zeros(N, np.bool_), np.zeros(N, d.np)]
        constant = [np.zeros(N, d.np), np.zeros(N, np.bool_), np.zeros(N, d.np)]
        with np.errstate(all="ignore"):
            scale_at_runtime[1](x, s, *runtime, backend=backend)
            scale_by_constant[1](x, *constant, S=s, backend=backend)
        for name, got, want in zip(("x * s", "x < s", "full(s)"), runtime, constant):
            assert_same_floats(got, want, f"{name}, s={s!r}, {d} on {backend}")


# float32(s) first, then the tile's dtype: f64 times float32(0.1), inf, rounded twice to f16 and bf16
ROUNDED_TWICE = [0.1, 1e300, -1e-300, 1 + 2**-11 + 2**-30, 1 + 2**-8 + 2**-40]


@pytest.mark.parametrize("s", ROUNDED_TWICE)
@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_a_runtime_python_float_is_its_double_as_a_literal_is(d, s):
    """A Python float passed at launch was rounded to float32 first: float64 tiles times 0.1
    multiplied by float32(0.1), times 1e300 gave inf, and 16-bit tiles rounded it twice."""
    same_as_a_literal(d, s, np.linspace(-2, 2, N).astype(d.np))


@pytest.mark.parametrize("d", FLOATS, ids=str)
@given(data=st.data())
def test_runtime_python_floats_match_literals(d, data):
    s = data.draw(st.floats())
    with np.errstate(over="ignore"):  # (1e6 is inf in float16)
        x = data.draw(hnp.arrays(np.float64, (N,), elements=st.floats(-1e6, 1e6))).astype(d.np)
    same_as_a_literal(d, s, x)


# ---------------------------------------------------- narrowing conversions

# name: (significand bits, smallest normal exponent, largest exponent)
FORMATS = {
    "float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127), "float64": (53, -1022, 1023),
    "float8_e4m3fn": (4, -6, 8), "float8_e5m2": (3, -14, 15),
}  # fmt: skip
NO_INFINITY = {"float8_e4m3fn": 448}  # its largest value: past it (and infinities) NaN


def round_exactly(v, name):
    """The exact value ``v`` (a Python int or float) rounded once to nearest even in format ``name``."""
    if not isinstance(v, int) and not math.isfinite(v):
        return math.nan if name in NO_INFINITY else v
    mant, emin, emax = FORMATS[name]
    a = abs(Fraction(v))
    if a == 0:
        return math.copysign(0.0, v) if isinstance(v, float) else 0.0
    e = max(a.numerator.bit_length() - a.denominator.bit_length(), emin)  # floor(log2(a)), maybe one too big
    if e > emin and a < Fraction(2) ** e:
        e -= 1
    step = Fraction(2) ** (e - mant + 1)  # the spacing of the format at a (subnormals: at emin)
    n, rem = divmod(a, step)
    n += rem > step / 2 or (rem == step / 2 and n % 2 == 1)
    value = n * step
    if name in NO_INFINITY and value > NO_INFINITY[name]:
        return math.nan
    return math.copysign(math.inf if value >= Fraction(2) ** (emax + 1) else float(value), v)


@tl.tile_kernel
def narrow(x, h, b, f, g, e4, e5):
    a = tl.load(x, index=(0,), shape=(N,))
    tl.store(e4, a.astype(tl.float8_e4m3fn), index=(0,))
    tl.store(e5, a.astype(tl.float8_e5m2), index=(0,))
    tl.store(h, a.astype(tl.float16), index=(0,))
    tl.store(b, a.astype(tl.bfloat16), index=(0,))
    tl.store(f, a.astype(tl.float32), index=(0,))
    tl.store(g, a.astype(tl.float64), index=(0,))


TIES = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 1 + 2**-24 + 2**-50, 1 + 2**-11, -(1 + 2**-8 + 2**-30), 65519.99,
        65520.0, 2**-25 + 2**-60, 2**-24 * 1.5, 3.4e38, 3.4028235677973366e38, 1e300, 2**-149 * 0.75, -1e-310,
        0.0, -0.0, math.inf, -math.inf, math.nan,
        464.0, 464.00001, -470.0, 61440.0, 61439.99, 2**-10, 3 * 2**-10, 2**-17, 3 * 2**-17 + 2**-40,
        1 + 2**-4 + 2**-40, 1 + 2**-3 + 2**-40]  # (float8: overflow, subnormal and normal ties)  # fmt: skip
INT_TIES = [2**24 + 1, 2**30 + 2**22 + 1, 2**30 + 2**22, 2**31 - 1, 2**60 + 2**36 + 1, 2**60 + 2**52 + 1, 2**63 - 1,
            2**63 + 2**39 + 1, 2**64 - 1, 65519, 65520, -(2**30 + 2**22 + 1), -(2**60 + 2**36 + 1)]  # fmt: skip
SOURCES = ["float64", "float32", "int64", "uint64", "int32", "uint32", "int16", "uint16"]


@pytest.mark.parametrize("src", SOURCES)
@given(data=st.data())
def test_narrowing_conversions_round_once(src, data):
    """float64 → float16 went through float32 on the CPU backend (1 + 2**-11 + 2**-40 became
    1.0), and float64 or 32/64-bit ints → bfloat16 everywhere (ml_dtypes rounds through float32).
    float8: the GPU's conversion saturates, NaN and infinity are the overflow's here."""
    d = np.dtype(src)
    if d.kind == "f":
        values = st.sampled_from(TIES) | st.floats(width=d.itemsize * 8)
        x = data.draw(hnp.arrays(np.float64, (N,), elements=values))
        with np.errstate(over="ignore"):
            x = x.astype(d)
    else:
        x = data.draw(edge_ints(tl.dtypes.dtype(d), INT_TIES))
    exact = [v.item() for v in x]  # Python ints or floats: exact values
    outs = {name: np.zeros(N, tl.dtypes.dtype(name).np) for name in FORMATS}
    want = {name: np.array([round_exactly(v, name) for v in exact]) for name in outs}
    for backend in backends():
        narrow[1](x, *outs.values(), backend=backend)
        for name, got in outs.items():
            assert_same_floats(got, want[name], f"{src} → {name} on {backend}, from {x}")


@tl.tile_kernel
def float8_round_trip(x, e4, e5, back4, back5, TILE: tl.Constant):
    i = tl.block_id(0)
    a = tl.load(x, index=(i,), shape=(TILE,))
    for out, back, d in ((e4, back4, tl.float8_e4m3fn), (e5, back5, tl.float8_e5m2)):
        tl.store(out, a.astype(d), index=(i,))
        tl.store(back, tl.load(out, index=(i,), shape=(TILE,)).astype(tl.float32), index=(i,))


def float8_edges(name):
    """float32 values where rounding to float8 ``name`` decides: every value of the format, the
    midpoints between neighbours and a float32 ulp either side, past the largest value."""
    codes = np.arange(256, dtype=np.uint8).view(tl.dtypes.dtype(name).np).astype(np.float32)
    finite = np.unique(codes[np.isfinite(codes)])
    mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)  # (exact in float32)
    top = finite[-1] * np.float32(1.2)
    near = [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))]
    return np.concatenate([codes, *near, [top, -top, np.inf, -np.inf, np.nan, 1e30, 1e-30]]).astype(np.float32)


def test_float8_conversions_round_every_edge_to_nearest_even():
    """Every float8 value, every midpoint between two and its float32 neighbours: to float8
    and back, against the exact rounding (NaN past float8_e4m3fn's 448, infinity past
    float8_e5m2's 57344, ties to even), on every backend. The GPU's cvt saturates."""
    x = np.concatenate([float8_edges("float8_e4m3fn"), float8_edges("float8_e5m2")])
    want = {name: np.array([round_exactly(float(v), name) for v in x]) for name in ("float8_e4m3fn", "float8_e5m2")}
    for backend in backends():
        e4, e5 = np.zeros(x.size, tl.float8_e4m3fn.np), np.zeros(x.size, tl.float8_e5m2.np)
        back4, back5 = np.zeros(x.size, np.float32), np.zeros(x.size, np.float32)
        float8_round_trip[tl.cdiv(x.size, 256)](x, e4, e5, back4, back5, TILE=256, backend=backend)
        for name, got, back in (("float8_e4m3fn", e4, back4), ("float8_e5m2", e5, back5)):
            assert_same_floats(got, want[name], f"float32 → {name} on {backend}")
            assert_same_floats(back, want[name], f"{name} → float32 on {backend}")


def satfinite_fixed(x: float, name: str) -> float:
    """What a CUDA store to float8 computes (cuda_intrinsics._float8_pair): the bits of
    ``cvt.rn.satfinite`` (the nearest value; past the range, the largest finite one of the
    sign), plus one where ``|x|`` is past ``F8_PAST``'s limit."""
    compare, limit = F8_PAST[name]
    codes = np.arange(256, dtype=np.uint8).view(tl.dtypes.dtype(name).np).astype(np.float64)
    largest = codes[np.isfinite(codes)].max()
    nearest = round_exactly(x, name)
    saturated = nearest if abs(nearest) <= largest else math.copysign(largest, x)
    bits = np.array([saturated], np.float32).astype(tl.dtypes.dtype(name).np).view(np.uint8)
    past = abs(x) > limit if compare == "gt" else abs(x) >= limit
    return float((bits + np.uint8(past)).view(tl.dtypes.dtype(name).np)[0])


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_stores_past_the_range_add_one_to_the_saturated_bits(name):
    """The CUDA store's premise, checked without a GPU: on every float8 edge (NaN aside),
    satfinite's bits plus one past the limit are the exact rounding's (NaN or infinity of the
    sign), and the limit is where rounding leaves the range."""
    limit = np.float32(F8_PAST[name][1])  # (and the limit's float32 neighbours: its tie is no float8's midpoint)
    near = [limit, np.nextafter(limit, np.float32(0)), np.nextafter(limit, np.float32(np.inf))]
    for x in np.concatenate([float8_edges(name), near, np.negative(near)]).astype(np.float64):
        if not math.isnan(x):
            want = round_exactly(float(x), name)
            assert_same_floats(np.array([satfinite_fixed(float(x), name)]), np.array([want]), f"{x} → {name}")


def test_conversions_to_16_bit_floats_round_to_odd_first_in_ptx():
    """float32 rounded toward zero with a sticky last bit, then one cvt.rn to 16 bits: on every sm
    (cvt.rn.bf16.f64 and cvt.rn.bf16.s64 are sm_90 only)."""
    for src, steps in (("f64", {"cvt.rz.f32.f64", "setp.neu.f64"}), ("i64", {"cvt.rz.f32.s64", "cvt.rzi.s64.f32"})):
        ops = ptx_instructions(narrow, f"{src}[:]", "f16[:]", "bf16[:]", "f32[:]", "f64[:]", "f8e4m3[:]", "f8e5m2[:]")
        assert steps | {"or.b32", "cvt.rn.f16.f32", "cvt.rn.bf16.f32"} <= ops, (src, ops)


@tl.tile_kernel
def fused(x, y, z, out):
    a, b, c = (tl.load(v, index=(0,), shape=(N,)) for v in (x, y, z))
    tl.store(out, tl.fma(a, b, c), index=(0,))


def exact_fma(a, b, c, name):
    """``a * b + c`` of Python floats, exactly, rounded once to format ``name`` (NaN and
    infinities as IEEE's: an infinite ``c`` is the result where ``a * b`` is finite, even
    if its rounded value is not)."""
    if math.isinf(c) and math.isfinite(a) and math.isfinite(b):
        return c
    if not all(map(math.isfinite, (a, b, c))):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return round_exactly(exact, name) if exact else math.copysign(0.0, a * b + c)


@pytest.mark.parametrize("d", FLOATS, ids=str)
@given(data=st.data())
def test_fma_rounds_once(d, data):
    """tl.fma against the exact rational result rounded once (float32, float64); narrower
    floats: the float32 fma rounded to them (their ops are float32 ops rounded). The
    products nearly cancel the addends (``c = -a * b`` perturbed), where a product rounded
    first loses every bit, and ties broken by a tiny addend occur."""
    x, y, s = data.draw(hnp.arrays(np.float64, (3, N), elements=st.floats(-1e4, 1e4, width=32)))
    x, y = x.astype(d.np), y.astype(d.np)
    t = np.float32 if d.bits < 32 else d.np
    with np.errstate(all="ignore"):
        z = (-(x.astype(np.float64) * y.astype(np.float64)) * (1 + s * 1e-8)).astype(d.np)
    z[:2] = np.array([2.0**-40, -(2.0**-40)]).astype(d.np)  # (x * y a tie of a narrower float, broken)
    big = float(tlt.ml_dtypes.finfo(d.np).max)
    x[2:5], y[2:5], z[2:5] = (big, np.inf, 0.0), (-big, 1.0, np.inf), (-np.inf, 1.0, 1.0)  # (a rounded x * y: inf)
    exact = [
        exact_fma(float(a), float(b), float(c), np.dtype(t).name)
        for a, b, c in zip(x.astype(t), y.astype(t), z.astype(t))
    ]
    want = np.array(exact).astype(t).astype(d.np)
    for backend in backends():
        out = np.zeros(N, d.np)
        fused[1](x, y, z, out, backend=backend)
        assert_same_floats(out, want, f"fma {d} on {backend}")


def test_fma_is_one_instruction_in_ptx():
    for d in ("f32", "f64"):
        ops = ptx_instructions(fused, *[f"{d}[:]"] * 4)
        assert f"fma.rn.{d}" in ops and f"mul.rn.{d}" not in ops, ops


# ------------------------------------------------------- math functions' accuracy

# docs/dtypes.md's contract: |result - exact| <= ULPS * ulp(exact) for float32 and float64;
# 16-bit floats are the float32 result rounded, so within 1 ulp of their own.
ULPS = {"sqrt": 0.5, "div": 0.5, "exp": 2, "exp2": 2, "exp2_ftz": 2, "log": 2, "log2": 2, "sin": 2, "cos": 2,
        "rsqrt": 2, "tanh": 3, "erf": 3, "sigmoid": 4, "pow": 4}  # fmt: skip
UNARY_MATH = {"exp": tl.exp, "exp2": tl.exp2, "log": tl.log, "log2": tl.log2, "sqrt": tl.sqrt, "rsqrt": tl.rsqrt,
              "sin": tl.sin, "cos": tl.cos, "tanh": tl.tanh, "erf": tl.erf, "sigmoid": tl.sigmoid,
              "exp2_ftz": lambda x: tl.exp2(x, flush_to_zero=True)}  # fmt: skip
FUNCTIONS = [*UNARY_MATH, "pow", "div"]
WIDE = np.longdouble if np.finfo(np.longdouble).nmant >= 63 else np.float64  # float64's reference


@tl.tile_kernel
def math_functions(x, y, out):
    a, b = tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))
    for k, fn in enumerate(UNARY_MATH.values()):
        tl.store(out, fn(a), index=(k,))  # tile k
    tl.store(out, a**b, index=(len(UNARY_MATH),))
    tl.store(out, a / b, index=(len(UNARY_MATH) + 1,))


def math_reference(name, a, b, d):
    """``name`` in float64 (float32 and 16-bit inputs) or long double (float64 inputs); erf in
    float64; exp2_ftz's results below the smallest normal of the math's dtype (``d``'s, float32
    for 16-bit floats) flushed to 0."""
    with np.errstate(all="ignore"):
        if name == "exp2_ftz":
            exact = np.exp2(a)
            return np.where(exact < WIDE(2.0) ** ftz_exponent(d), 0, exact)
        if name == "erf":
            return np.array([math.erf(v) for v in a.astype(np.float64)])
        return {"rsqrt": lambda: 1 / np.sqrt(a), "sigmoid": lambda: 1 / (1 + np.exp(-a)), "pow": lambda: a**b,
                "div": lambda: a / b}.get(name, lambda: getattr(np, name)(a))()  # fmt: skip


def ulp_errors(got, want, d):
    """|got - want| in ulps of ``d`` at ``want``, inf where NaNs disagree. Infinities and values past
    the range count as 2**(emax+1), so an overflow at the threshold is measured, not refused; in
    float8_e4m3fn, which has no infinity, they are NaN."""
    info = tl.testing.ml_dtypes.finfo(d.np)
    top = WIDE(2.0) ** (int(info.maxexp))
    with np.errstate(all="ignore"):
        want = np.where(np.isnan(want.astype(np.float64).astype(d.np).astype(np.float64)), np.nan, want)
    got, want = got.astype(WIDE), want.astype(WIDE)
    nan = np.isnan(got) | np.isnan(want)
    g, w = np.clip(got, -top, top), np.clip(want, -top, top)  # past the range: inf
    _, e = np.frexp(np.abs(w))
    ulp = np.ldexp(WIDE(1.0), np.maximum(e, int(info.minexp) + 1) - (int(info.nmant) + 1))
    err = np.where(np.isinf(got) & np.isinf(want) & (got == want), 0, np.abs(g - w) / ulp)
    return np.where(nan, np.where(np.isnan(got) & np.isnan(want), 0, np.inf), err)


MATH_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-3, 3.0, 10.0, -10.0, 88.72283, 88.7229, -87.3, -103.9, 127.99, -149.5,
              -130.0, -126.0, 1e-7, 1e-30, 1e-40, 3.1415927, 1e4, -1e4, 1e30, 65504.0,
              np.inf, -np.inf, np.nan]  # fmt: skip


@pytest.mark.parametrize("d", FLOATS, ids=str)
@given(data=st.data())
def test_math_functions_meet_the_accuracy_contract(d, data):
    """Each backend within docs/dtypes.md's ulps of the exact result (float64 or long double here):
    the interpreter's NumPy float32 exp(1) was 1 ulp off the CPU backend's."""
    t = np.float32 if d.bits < 32 else d.np
    wide = WIDE if d.np == np.float64 else np.float64
    elements = st.sampled_from(MATH_EDGES) | st.floats(allow_nan=True, allow_infinity=True, width=32)
    if d.np == np.float64:
        elements = elements | st.floats(allow_nan=False, width=64)
    x, y = data.draw(hnp.arrays(np.float64, (2, N), elements=elements))
    with np.errstate(all="ignore"):
        x, y = x.astype(d.np), y.astype(d.np)
        exact = {n: math_reference(n, x.astype(t).astype(wide), y.astype(t).astype(wide), d) for n in FUNCTIONS}
        # ex2.approx of x just above the threshold may round below it, and flush: 0 is right there too
        boundary = (x.astype(wide) >= ftz_exponent(d)) & (x.astype(wide) < ftz_exponent(d) + 2.0**-18)
    for backend in backends():
        out = np.zeros(len(FUNCTIONS) * N, d.np)
        math_functions[1](x, y, out, backend=backend)
        for k, name in enumerate(FUNCTIONS):
            got = out[k * N : (k + 1) * N]
            rounded_reference = d.np == np.float64 and (wide is np.float64 or name == "erf")  # itself 1 ulp off
            limit = 1.0 if d.bits < 32 else ULPS[name] + rounded_reference
            err = ulp_errors(got, exact[name], d)
            if name == "exp2_ftz":
                err = np.where(boundary & (got == 0), 0, err)
            bad = err > limit
            assert not bad.any(), (
                f"{name} {d} on {backend}: {err[bad].max():.3g} ulps > {limit} at x={x[bad]}, y={y[bad]}, got "
                f"{got[bad]}, exact {exact[name][bad]}"
            )


@tl.tile_kernel
def exp2_both(x, out):
    t = tl.load(x, index=(0,), shape=(N,))
    tl.store(out, tl.exp2(t), index=(0,))
    tl.store(out, tl.exp2(t, flush_to_zero=True), index=(1,))


@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_exp2_flush_to_zero_flushes_only_subnormal_results(d):
    """``exp2(x, flush_to_zero=True)`` is ``exp2(x)`` wherever that is a normal number of the
    math's dtype, 0 where it is subnormal (x below -126 in float32; the 16-bit floats' math is
    float32's); subnormal inputs give 1, as any tiny x does."""
    low = ftz_exponent(d)
    x = np.array([low, low - 0.5, low - 4, -149.0, -1100.0, -1e-40, 0.0, 3.0, np.nan, -np.inf, np.inf] + [1.0] * 5)
    x = x.astype(d.np)
    for backend in backends():
        out = np.zeros(2 * N, d.np)
        exp2_both[1](x, out, backend=backend)
        plain, flushed = out[:N].astype(np.float64), out[N:].astype(np.float64)
        subnormal = x.astype(np.float64) < low
        assert np.all(flushed[subnormal] == 0), (backend, x[subnormal], flushed[subnormal])
        assert np.array_equal(flushed[~subnormal], plain[~subnormal], equal_nan=True), (backend, flushed, plain)


# ------------------------------------------------------------ fast_math's numerics

FAST = ("exp", "log", "div", "sigmoid")


@tl.tile_kernel(fast_math=True)
def fast_functions(x, y, out):
    a, b = tl.load(x, index=(0,), shape=(N,)), tl.load(y, index=(0,), shape=(N,))
    tl.store(out, tl.exp(a), index=(0,))
    tl.store(out, tl.log(a), index=(1,))
    tl.store(out, a / b, index=(2,))
    tl.store(out, tl.sigmoid(a), index=(3,))


def fast_limits(name, x, d):
    """fast_math's contract (docs/dtypes.md), in ulps of the exact result: float64 is exact as
    without it; 16-bit floats within 1 ulp (the float32 errors are far below theirs); float32
    ``exp`` rounds ``x * log2(e)`` and log2(e) itself (relative up to ``|x| * 2^-24`` and
    ``|x| * 0.22 * 2^-24``: 1.25 ``|x|`` ulps) and is ``exp2``'s 2 more; ``log`` is ``log2``'s 2
    ulps (relative 2^-22) times ``ln 2`` rounded, the product rounded: 5.5; ``/`` within 2;
    ``sigmoid``, ``1 / (1 + exp(-x))``: exp's error, the sum's rounding and the division's."""
    if d.bits < 32:
        return 1.0
    if d.np == np.float64:
        return ULPS[name] + (WIDE is np.float64)
    size = 1.25 * np.nan_to_num(np.abs(x.astype(np.float64)), posinf=0)
    return {"exp": 2 + size, "log": 5.5, "div": 2.0, "sigmoid": 4.5 + size}[name]


@pytest.mark.parametrize("d", FLOATS, ids=str)
@given(data=st.data())
def test_fast_math_meets_its_contract(d, data):
    """``fast_math=True``: exp, log, ``/`` and sigmoid within their documented bounds on every backend
    (the GPU's approximate instructions; the others run the same rewritten formulas)."""
    t = np.float32 if d.bits < 32 else d.np
    wide = WIDE if d.np == np.float64 else np.float64
    # (x * log2(e) just below a power of two: exp's largest error, 1.2 |x| ulps)
    edges = st.sampled_from(MATH_EDGES + [-44.36467, 45.74593, -22.18, 88.0])
    elements = edges | st.floats(allow_nan=True, allow_infinity=True, width=32)
    x, y = data.draw(hnp.arrays(np.float64, (2, N), elements=elements))
    with np.errstate(all="ignore"):
        x, y = x.astype(d.np), y.astype(d.np)
        exact = {n: math_reference(n, x.astype(t).astype(wide), y.astype(t).astype(wide), d) for n in FAST}
    for backend in backends():
        out = np.zeros(len(FAST) * N, d.np)
        fast_functions[1](x, y, out, backend=backend)
        for k, name in enumerate(FAST):
            got = out[k * N : (k + 1) * N]
            err, limit = ulp_errors(got, exact[name], d), fast_limits(name, x, d)
            if name == "sigmoid" and d.np != np.float64:  # 0 where the exact value is subnormal in float32
                err = np.where((got == 0) & (exact[name] < 2.0**-126), 0, err)
            bad = err > limit
            assert not bad.any(), f"{name} {d} on {backend}: {err[bad]} ulps at x={x[bad]}, y={y[bad]}, got {got[bad]}"


def test_fast_math_rewrites_float32_math_only():
    """The ``fast_math`` stage: float32 exp as exp2 of a product, log as log2 times ln 2, ``/``
    as div_approx; 16-bit floats' exp rewritten in float32; float64's left exact. Without the
    option there is no such stage."""
    e = tl.explain(fast_functions, "f32[:]", "f32[:]", "f32[:]", backend="interpret")
    text = e["fast_math"]
    assert "exp2" in text and "log2" in text and "div_approx" in text, text
    assert not re.search(r"= (exp|log|div|sigmoid) ", text), text
    assert "mul" in e["simplified"] and "1.4426950" in text and "0.6931471" in text, text
    half = tl.explain(fast_functions, "bf16[:]", "bf16[:]", "bf16[:]", backend="interpret")["fast_math"]
    assert re.search(r"f32\[16\] = exp2 ", half) and re.search(r"bf16\[16\] = convert\[dtype=bfloat16\]", half), half
    double = tl.explain(fast_functions, "f64[:]", "f64[:]", "f64[:]", backend="interpret")["fast_math"]
    assert re.search(r"= exp ", double) and re.search(r"= div ", double) and "exp2" not in double, double
    assert "fast_math" not in tl.explain(math_functions, "f32[:]", "f32[:]", "f32[:]", backend="interpret").stages


def test_fast_math_is_triton_s_instructions_in_ptx():
    """On the GPU fast_math's exp is one ex2.approx after a multiply (no libdevice range
    reduction), its division one div.full.f32 (no correctly rounded division)."""
    ops = ptx_instructions(fast_functions, "f32[:]", "f32[:]", "f32[:]")
    exact = ptx_instructions(fast_functions.with_options(fast_math=False), "f32[:]", "f32[:]", "f32[:]")
    assert {"ex2.approx.f32", "div.full.f32"} <= ops and "div.rn.f32" not in ops and "fma.rm.f32" not in ops, ops
    assert "fma.rm.f32" in exact and "div.full.f32" not in exact, exact


def test_check_kernel_takes_a_fast_math_kernel_s_tolerance():
    """tilelang.testing's default float32 tolerance (16 ulps) is a fast_math kernel's exp's
    contract (up to ~110 ulps at |x| = 88) where the kernel is one; not otherwise."""
    x = np.linspace(-80, 80, N).astype(np.float32)
    reference = lambda x, out: np.exp(x.astype(np.float64)).astype(np.float32)  # noqa: E731
    fast = exp_only.with_options(fast_math=True)
    tlt.check_kernel(fast, 1, (x, np.zeros_like(x)), reference=reference, backends=("interpret", "cpu"))
    wrong = lambda x, out: reference(x, out) * np.float32(1 + 2.0**-14)  # noqa: E731
    with pytest.raises(AssertionError):
        tlt.check_kernel(fast, 1, (x, np.zeros_like(x)), reference=wrong, backends=("interpret",))
    assert tlt.tolerance(tl.float32, fast_math=True)[0] > tlt.tolerance(tl.float32)[0]


@tl.tile_kernel
def exp_only(x, out):
    tl.store(out, tl.exp(tl.load(x, index=(0,), shape=(N,))), index=(0,))


def test_fast_math_must_be_a_bool():
    with pytest.raises(tl.TileArgumentError, match="fast_math must be True or False"):
        tl.tile_kernel(fast_math="yes")
