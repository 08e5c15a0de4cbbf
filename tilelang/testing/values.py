"""What the fuzzer knows about each value of a random program, and how every op changes it.

A random program is only a test if every backend must give the same answer for it. The
generator (programs.py) keeps, for each tile it makes, a :class:`Value`: its shape and
dtype, an interval holding every element, whether NaN may occur, whether a float value
is integral, and ``err``, how far two correct backends may differ on it. ``err == 0``
means bit-identical (up to NaN payloads and the sign of zero): every IEEE operation done
in the same order, integer arithmetic (which wraps), comparisons, conversions. ``err``
grows only where docs/dtypes.md allows backends to differ: math functions (a few ulps)
and float sums, products, scans and dots (the order of additions is unspecified).

The rules here keep programs away from what is unspecified (float to int conversion of
NaN or out-of-range values, overflow of a value that is not bit-identical) by refusing
such an op (``None``); the generator then draws another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from .. import dtypes as _dt
from ..dtypes import DType

INF = math.inf


def int_range(d: DType) -> tuple[int, int]:
    if d.is_bool:
        return 0, 1
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


def float_max(d: DType) -> float:
    return float(ml_dtypes.finfo(d.np).max)


def eps(d: DType) -> float:
    """Spacing of ``d``'s values at 1: one ulp, relative."""
    return float(ml_dtypes.finfo(d.np).eps)


def exact_integers(d: DType) -> float:
    """Integers of magnitude below this are exact in the float ``d`` (and their sums, while they stay below)."""
    return 2.0 ** (ml_dtypes.finfo(d.np).nmant + 1)


@dataclass(frozen=True)
class Value:
    """A tile of the program being generated: its source name and what is known about its elements."""

    name: str
    shape: tuple
    dtype: DType
    lo: float = 0  # every element lies in [lo, hi] (ints: Python ints)
    hi: float = 0
    nan: bool = False  # floats: NaN may occur
    integral: bool = False  # floats: every finite element is an integer
    err: float = 0.0  # how far two correct backends may differ, absolutely (0: bit-identical)

    @property
    def exact(self) -> bool:
        return self.err == 0

    @property
    def finite(self) -> bool:
        return not self.nan and -INF < self.lo and self.hi < INF

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def constant(name, value, d: DType, shape=()) -> Value:
    """A literal or scalar argument of known value."""
    if d.is_float:
        v = float(d.np.type(value))
        return Value(name, shape, d, v, v, nan=math.isnan(v), integral=float(v).is_integer())
    v = int(value)
    return Value(name, shape, d, v, v)


def padded(v: Value, padding) -> Value:
    """What a read of ``v``'s memory holds when elements outside the array read ``padding``."""
    p = constant("", padding, v.dtype)
    integral = v.integral and (p.integral or not math.isfinite(p.lo))
    return replace(v, lo=min(v.lo, p.lo), hi=max(v.hi, p.hi), nan=v.nan or p.nan, integral=integral)


def _fit(v: Value) -> Value | None:
    """``v`` with its interval clipped to what its dtype can hold: ints wrap (any value then),
    floats overflow to infinity (refused if the value is not bit-identical)."""
    d = v.dtype
    if d.is_bool:
        return replace(v, lo=0, hi=1)
    if d.is_int:
        lo, hi = int_range(d)
        return v if lo <= v.lo and v.hi <= hi else replace(v, lo=lo, hi=hi)
    big, widen = float_max(d), eps(d)  # outward by an ulp: the bounds themselves may round up
    v = replace(v, lo=v.lo - widen * abs(v.lo), hi=v.hi + widen * abs(v.hi))
    if v.nan or v.lo < -big or v.hi > big:
        if v.err:
            return None
        return replace(v, lo=-INF if v.lo < -big else v.lo, hi=INF if v.hi > big else v.hi)
    return v


def rounded(v: Value, err: float, d: DType | None = None) -> float:
    """``err`` carried through one rounding to ``d``: a result that may differ may also round the other way."""
    d = d or v.dtype
    return 0.0 if err == 0 or not d.is_float else err + eps(d) * v.bound


def convert(v: Value, d: DType, name=None) -> Value | None:
    """``v.astype(d)``, or ``None`` where the result is unspecified (float to int out of range or NaN)."""
    name = name or v.name
    s = v.dtype
    if d is s:
        return replace(v, name=name)
    if d.is_bool:
        return None if v.err else Value(name, v.shape, d, 0, 1)
    if s.is_bool:
        return Value(name, v.shape, d, 0, 1, integral=True)
    if d.is_int:
        if s.is_int:
            return _fit(Value(name, v.shape, d, v.lo, v.hi))
        lo, hi = int_range(d)
        if v.err or not v.finite or v.lo <= lo - 1 or v.hi >= hi + 1:
            return None
        return Value(name, v.shape, d, math.trunc(v.lo), math.trunc(v.hi))
    # to a float
    if s.is_int:
        return _fit(Value(name, v.shape, d, float(v.lo), float(v.hi), integral=True))
    out = replace(v, name=name, dtype=d, err=rounded(v, v.err, d) if d.bits < s.bits else v.err)
    return _fit(out)


# --------------------------------------------------------------------------- elementwise


def _hull(values) -> tuple[float, float]:
    values = [x for x in values if not (isinstance(x, float) and math.isnan(x))]
    return (min(values), max(values)) if values else (-INF, INF)


def binary(op: str, a: Value, b: Value, d: DType, shape, name, fast_math: bool = False) -> Value | None:
    """``a <op> b`` computed in ``d`` (the promoted dtype; both operands are converted to it first;
    ``fast_math``: a kernel's, whose float32 ``/`` is within 2 ulps)."""
    a, b = convert(a, d), convert(b, d)
    if a is None or b is None:
        return None
    if op in ("==", "!=", "<", "<=", ">", ">="):
        return None if a.err or b.err else Value(name, shape, _dt.bool_, 0, 1)
    if op in ("&", "|", "^"):
        if d.is_bool or (a.lo >= 0 and b.lo >= 0):  # nonnegative: no more bits than the wider operand
            top = 2 ** max(int(a.hi), int(b.hi), 0).bit_length() - 1
            return _fit(Value(name, shape, d, 0, top if not d.is_bool else 1))
        return _fit(Value(name, shape, d, *int_range(d)))
    if op == "umulhi":  # (any high half)
        return Value(name, shape, d, *int_range(d))
    if op in ("<<", ">>"):
        if op == ">>" and a.lo >= 0:
            return Value(name, shape, d, 0, a.hi)
        return Value(name, shape, d, *int_range(d))
    if d.is_int:
        return _fit(Value(name, shape, d, *_int_interval(op, a, b)))
    return _float_binary(op, a, b, d, shape, name, fast_math and d.bits <= 32)


def _int_interval(op, a, b):
    if op == "+":
        return a.lo + b.lo, a.hi + b.hi
    if op == "-":
        return a.lo - b.hi, a.hi - b.lo
    if op == "*":
        return _hull([x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)])
    if op == "maximum":
        return max(a.lo, b.lo), max(a.hi, b.hi)
    if op == "minimum":
        return min(a.lo, b.lo), min(a.hi, b.hi)
    if op == "//":  # |a // b| <= |a| + 1 (b == 0 gives 0)
        return -a.bound - 1, a.bound + 1
    if op == "%":  # |a % b| < |b|
        return -b.bound, b.bound
    raise ValueError(op)


def _float_binary(op, a, b, d, shape, name, approximate=False):
    if op in ("//", "%", "/") and (a.err or b.err):
        return None  # amplifies differences without bound
    nan = a.nan or b.nan
    if not (a.finite and b.finite):
        if a.err or b.err or approximate and op == "/":  # (an approximate quotient of inf or NaN: no bound)
            return None
        return Value(name, shape, d, -INF, INF, nan=True)
    if op in ("+", "-"):
        lo, hi = (a.lo + b.lo, a.hi + b.hi) if op == "+" else (a.lo - b.hi, a.hi - b.lo)
        err, integral = a.err + b.err, a.integral and b.integral
    elif op == "*":
        lo, hi = _hull([x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)])
        err, integral = a.err * b.bound + b.err * a.bound + a.err * b.err, a.integral and b.integral
    elif op in ("maximum", "minimum"):
        pick = max if op == "maximum" else min
        lo, hi, err, integral = pick(a.lo, b.lo), pick(a.hi, b.hi), max(a.err, b.err), a.integral and b.integral
    elif b.lo <= 0 <= b.hi:  # / // % by a divisor that may be 0: inf or NaN (fast_math's `/`: no bound)
        return None if approximate and op == "/" else Value(name, shape, d, -INF, INF, nan=True)
    else:
        small = min(abs(b.lo), abs(b.hi))
        q = a.bound / small
        err = 2 * eps(_dt.float32) * q if op == "/" and approximate else 0.0  # (fast_math's: within 2 ulps)
        if op == "/":
            lo, hi, integral = -q, q, False
        elif op == "//":
            lo, hi, integral = -q - 1, q + 1, True
        else:
            lo, hi, integral = -b.bound, b.bound, a.integral and b.integral
    out = Value(name, shape, d, lo, hi, nan=nan, integral=integral)
    return _fit(replace(out, err=rounded(out, err)))


# Math functions: (ulps allowed by docs/dtypes.md, the result's interval from the argument's).
MATH = {
    "exp": (2, lambda lo, hi: (math.exp(lo), math.exp(hi))),
    "exp2": (2, lambda lo, hi: (2.0**lo, 2.0**hi)),
    "sin": (2, lambda lo, hi: (-1.0, 1.0)),
    "cos": (2, lambda lo, hi: (-1.0, 1.0)),
    "tanh": (3, lambda lo, hi: (-1.0, 1.0)),
    "erf": (3, lambda lo, hi: (-1.0, 1.0)),
    "sigmoid": (4, lambda lo, hi: (0.0, 1.0)),
    # taken of abs(x) + 1 (the generator writes it so), which is >= 1
    "log": (2, lambda lo, hi: (0.0, math.log(hi))),
    "log2": (2, lambda lo, hi: (0.0, math.log2(hi))),
    "sqrt": (1, lambda lo, hi: (1.0, math.sqrt(hi))),
    "rsqrt": (2, lambda lo, hi: (0.0, 1.0)),
}
SHIFTED = ("log", "log2", "sqrt", "rsqrt")  # applied to abs(x) + 1


def math_fn(fn: str, x: Value, name, fast_math: bool = False) -> Value | None:
    """``tl.<fn>(x)`` (for SHIFTED functions ``x`` is already ``abs(.) + 1``); ints become float32.
    ``fast_math``: a kernel's. Every backend runs its rewritten formulas (_passes/fast_math.py), so
    they differ only where the GPU's instructions approximate: exp by exp2's ulps (the product
    ``x * log2(e)`` is rounded alike everywhere), sigmoid by those and the division's 2, log by 5.5."""
    d = x.dtype if x.dtype.is_float else _dt.float32
    x = convert(x, d)
    if x is None or x.err or not x.finite:
        return None
    if fn in ("exp", "exp2") and x.hi > math.log2(float_max(d)) / 2:
        return None  # keep well away from overflow, where one backend may round to inf
    if fn in ("sin", "cos") and x.bound > 1e4:
        return None
    ulps, interval = MATH[fn]
    if fast_math and d.bits <= 32 and fn in ("log", "sigmoid"):
        ulps = 5.5 if fn == "log" else ulps + 2
    lo, hi = interval(x.lo, x.hi)
    bound = max(abs(lo), abs(hi))
    # a few float32 ulps of the result, and for 16-bit floats one ulp of their own rounding
    within = (ulps + 1) * eps(d if d.bits > 16 else _dt.float32) * bound + eps(d) * bound
    return _fit(Value(name, x.shape, d, lo - within, hi + within, err=within))


def unary(op: str, x: Value, name) -> Value | None:
    d = x.dtype
    if op == "-":
        if d.is_bool:
            return None
        if d.is_int:
            return _fit(Value(name, x.shape, d, -x.hi, -x.lo))
        return replace(x, name=name, lo=-x.hi, hi=-x.lo)
    if op == "abs":
        if d.kind in "bu":
            return replace(x, name=name)
        if d.is_int and x.lo == int_range(d)[0]:  # abs(INT_MIN) wraps to INT_MIN; INT_MIN + 1 gives INT_MAX
            return replace(x, name=name, hi=int_range(d)[1])
        lo = 0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
        return replace(x, name=name, lo=lo, hi=x.bound)
    if op == "~":
        if d.is_float:
            return None
        if d.is_bool:
            return Value(name, x.shape, d, 0, 1)
        if d.kind == "u":
            top = int_range(d)[1]
            return Value(name, x.shape, d, top - x.hi, top - x.lo)
        return Value(name, x.shape, d, -x.hi - 1, -x.lo - 1)
    if op in ("floor", "ceil"):
        if not d.is_float:
            return replace(x, name=name)
        if x.err:
            return None
        return replace(
            x,
            name=name,
            lo=math.floor(x.lo) if x.finite else x.lo,
            hi=math.ceil(x.hi) if x.finite else x.hi,
            integral=True,
        )
    raise ValueError(op)


def where(c: Value, x: Value, y: Value, d: DType, shape, name) -> Value | None:
    x, y = convert(x, d), convert(y, d)
    if c.err or x is None or y is None:
        return None
    lo, hi = min(x.lo, y.lo), max(x.hi, y.hi)
    return Value(name, shape, d, lo, hi, nan=x.nan or y.nan, integral=x.integral and y.integral, err=max(x.err, y.err))


# ------------------------------------------------------------------ reductions and dot


def accumulator(d: DType) -> tuple[DType, DType]:
    """(accumulator, result) dtypes of sum/prod/cumsum/cumprod (docs/dtypes.md, Accumulation)."""
    if d.is_bool or (d.is_int and d.bits < 32):
        wide = _dt.BY_NAME["uint32" if d.kind == "u" else "int32"]
        return wide, wide
    if d.is_narrow_float:
        return _dt.float32, d
    return d, d


def _float_sum(x: Value, n: int, lo, hi, acc: DType, result: DType, shape, name) -> Value | None:
    """A float sum (or sum-like accumulation) of ``n`` terms of ``x``'s size into [lo, hi]."""
    if not x.finite:
        return None
    out = Value(name, shape, result, lo, hi, integral=x.integral)
    if x.exact and x.integral and out.bound < exact_integers(acc):
        return _fit(out)  # every partial sum is an exact integer, whatever the order
    # each backend is within (n - 1) eps of the exact sum of |terms|: twice that between two backends
    err = n * x.err + 2 * n * eps(acc) * out.bound
    return _fit(replace(out, err=rounded(out, err, result)))


def _power(base, n):
    """``base ** n`` as a Python number, or inf where a float would overflow."""
    try:
        return base**n if not isinstance(base, float) or base < 2 or n * math.log2(base) < 1000 else INF
    except OverflowError:
        return INF


def reduce(op: str, x: Value, n: int, shape, name) -> Value | None:
    """``tl.<op>`` over ``n`` of ``x``'s elements into a tile of ``shape``."""
    if op in ("max", "min"):
        return replace(x, name=name, shape=shape)
    if op in ("argmax", "argmin"):
        return None if x.err else Value(name, shape, _dt.int32, 0, n - 1)
    acc, result = accumulator(x.dtype)
    xs = convert(x, acc)
    if op in ("sum", "cumsum"):  # n terms; a scan's prefixes have 1 to n
        lo, hi = (n * xs.lo, n * xs.hi) if op == "sum" else (min(xs.lo, n * xs.lo), max(xs.hi, n * xs.hi))
    else:  # prod, cumprod (a scan's prefixes have 1 to n factors: below 1, the first is the largest)
        top = _power(xs.bound, n) if op == "prod" else max(xs.bound, _power(xs.bound, n))
        lo, hi = -top, top
    if acc.is_int:
        full = int_range(acc)
        return _fit(Value(name, shape, result, int(lo) if lo > -INF else full[0], int(hi) if hi < INF else full[1]))
    if op in ("prod", "cumprod"):
        small = x.bound <= 2 and hi < 1e6
        if not small and not (x.exact and x.integral and hi < exact_integers(acc)):
            return None
    return _float_sum(xs, n, lo, hi, acc, result, shape, name)


def dot(a: Value, b: Value, acc: Value | None, k: int, dt: DType, out: DType, shape, name) -> Value | None:
    """``tl.dot(a, b, acc)`` with operands promoted to ``dt`` and accumulation in ``out``."""
    a, b = convert(a, dt), convert(b, dt)
    if a is None or b is None or not (a.finite and b.finite):
        return None
    top = k * a.bound * b.bound + (acc.bound if acc is not None else 0)
    if out.is_int:
        v = _fit(Value(name, shape, out, -int(top), int(top)))
        return v if acc is None or acc.dtype is out else None
    if acc is not None and not acc.finite:
        return None
    terms = Value(name, shape, out, -a.bound * b.bound, a.bound * b.bound, integral=a.integral and b.integral,
                  err=a.err * b.bound + b.err * a.bound + a.err * b.err)  # fmt: skip
    # (Hopper's float8 tensor cores keep ~13 bits of their sums, the accumulator's too: as float16's 11, to be safe)
    sums = _dt.float16 if dt.is_float8 else out
    v = _float_sum(terms, k + 1, -top, top, sums, out, shape, name)
    if v is None or acc is None:
        return v
    integral = v.integral and acc.integral
    err = v.err + acc.err + (0 if integral and v.exact and acc.exact else 2 * eps(sums) * top)
    return replace(v, integral=integral, err=err)
