"""Element types and the promotion rules.

A dtype is a small immutable object (``tl.float32``); anything NumPy understands
(``np.float16``, ``"int32"``) is accepted wherever a dtype is expected. bfloat16 and float8
host arrays use ``ml_dtypes``' types (``ml_dtypes.bfloat16``, ``ml_dtypes.float8_e4m3fn``,
``ml_dtypes.float8_e5m2``); Triton's names ``"float8e4nv"`` and ``"float8e5"`` are accepted.

Promotion (the full table is in docs/dtypes.md and tested):

- bool < any integer < any float.
- two signed or two unsigned ints: the wider; signed with unsigned: the signed type
  wide enough for both, capped at int64 (so uint64 with a signed int gives int64).
- an integer with a float: the float (as in Triton and JAX, unlike NumPy).
- two floats of one width: the smallest float holding both (float16 with bfloat16:
  float32; float8_e4m3fn with float8_e5m2: float16); otherwise the wider float.
- weak types (Python scalars and runtime scalar arguments) take the other operand's
  dtype when it is of the same or a higher category (bool < int < float); otherwise the
  weak operand's own dtype wins: a Python int is int32 (int64, then uint64, if it does
  not fit), a Python float is float32, so ``int_tile * 0.5`` is float32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import TileTypeError

__all__ = ["DType", "dtype", "promote", "promote_strong", "scalar_dtype", "ALL_DTYPES"]


class DType:
    """One element type: its name, short name (used by the IR printer) and NumPy dtype."""

    __slots__ = ("name", "short", "np", "kind", "bits")

    def __init__(self, name: str, short: str, np_dtype, kind: str, bits: int):
        self.name, self.short, self.np = name, short, np.dtype(np_dtype)
        self.kind, self.bits = kind, bits

    def __repr__(self):
        return f"tl.{self.name}"

    def __reduce__(self):
        return (dtype, (self.name,))

    def __eq__(self, other):
        """Equal to the dtypes NumPy names alike: ``x.dtype == np.float32`` or ``== "float32"``."""
        if isinstance(other, DType) or other is None:
            return self is other
        try:
            return self is dtype(other)
        except TileTypeError:
            return NotImplemented

    __hash__ = object.__hash__

    @property
    def is_float(self):
        return self.kind == "f"

    @property
    def is_int(self):
        return self.kind in "iu"

    @property
    def is_bool(self):
        return self.kind == "b"

    @property
    def is_narrow_float(self):
        """A float narrower than 32 bits: its registers are float32, each result rounded to it."""
        return self.kind == "f" and self.bits < 32

    @property
    def is_float8(self):
        return self.kind == "f" and self.bits == 8

    @property
    def itemsize(self):
        return max(self.bits // 8, 1)

    def cast(self, x) -> np.ndarray:
        """``x`` as a NumPy array of this dtype, floats rounded to nearest once (integers wrap,
        as NumPy's ``astype``). ml_dtypes before 0.7 rounds float64 and integers to bfloat16
        through float32, twice: 1 + 2**-8 + 2**-40 became 1, not 1 + 2**-7."""
        x = np.asarray(x)
        wide = ("float64", "int32", "uint32", "int64", "uint64")
        if self.is_narrow_float and self.name != "float16" and x.dtype.name in wide:
            x = _float32_odd(x)
        return x.astype(self.np)


_ALL = [
    DType("bool", "bool", np.bool_, "b", 8),
    DType("int8", "i8", np.int8, "i", 8),
    DType("int16", "i16", np.int16, "i", 16),
    DType("int32", "i32", np.int32, "i", 32),
    DType("int64", "i64", np.int64, "i", 64),
    DType("uint8", "u8", np.uint8, "u", 8),
    DType("uint16", "u16", np.uint16, "u", 16),
    DType("uint32", "u32", np.uint32, "u", 32),
    DType("uint64", "u64", np.uint64, "u", 64),
    DType("float8_e4m3fn", "f8e4m3", ml_dtypes.float8_e4m3fn, "f", 8),
    DType("float8_e5m2", "f8e5m2", ml_dtypes.float8_e5m2, "f", 8),
    DType("float16", "f16", np.float16, "f", 16),
    DType("bfloat16", "bf16", ml_dtypes.bfloat16, "f", 16),
    DType("float32", "f32", np.float32, "f", 32),
    DType("float64", "f64", np.float64, "f", 64),
]
BY_NAME = {d.name: d for d in _ALL}
ALL_DTYPES = tuple(_ALL)
bool_, int8, int16, int32, int64 = (BY_NAME[n] for n in ("bool", "int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (BY_NAME[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float16, bfloat16, float32, float64 = (BY_NAME[n] for n in ("float16", "bfloat16", "float32", "float64"))
float8_e4m3fn, float8_e5m2 = BY_NAME["float8_e4m3fn"], BY_NAME["float8_e5m2"]
# Triton's names for the two float8 types
ALIASES = {"float8e4nv": float8_e4m3fn, "float8e5": float8_e5m2}

# bool < int < float, used for weak-type promotion.
CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}


def dtype(x) -> DType:
    """Normalise ``x`` (a DType, NumPy dtype or type, or name) to a DType."""
    if isinstance(x, DType):
        return x
    if x is bool:
        return bool_
    if x is None:  # NumPy would read it as float64
        raise TileTypeError("None is not a dtype; name one, e.g. tl.float32")
    if isinstance(x, str) and x in ALIASES:
        return ALIASES[x]
    try:
        name = np.dtype(x).name
    except (TypeError, ValueError):  # (a tile, say)
        name = None
    if name in BY_NAME:
        return BY_NAME[name]
    raise TileTypeError(f"{x!r} is not a supported dtype; use one of {', '.join(BY_NAME)}")


def highest(d: DType) -> float:
    """The float ``d``'s highest value: infinity, or (float8_e4m3fn, which has none, its
    conversions' NaN past it) its largest finite value."""
    return float("inf") if d is not float8_e4m3fn else float(ml_dtypes.finfo(d.np).max)


def _int_join(a: DType, b: DType) -> DType:
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    return BY_NAME[f"int{min(unsigned.bits * 2, 64)}"]


def promote_strong(a: DType, b: DType) -> DType:
    """The common dtype of two strongly typed operands."""
    if a is b:
        return a
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.is_float and b.is_float:
        if a.bits == b.bits:  # float16 with bfloat16, or the two float8s: the next width holds both
            return float32 if a.bits == 16 else float16
        return a if a.bits > b.bits else b
    if a.is_float or b.is_float:
        return a if a.is_float else b
    return _int_join(a, b)


def promote(a: DType, a_weak: bool, b: DType, b_weak: bool) -> tuple[DType, bool]:
    """The common dtype of two operands and whether the result is still weak.

    A weak scalar's own dtype is what it becomes when nothing else decides (a Python int
    is int32, or int64 (then uint64) when it does not fit; a Python float is float32).
    """
    if a_weak and b_weak:
        if CATEGORY[a.kind] != CATEGORY[b.kind]:
            return (a if CATEGORY[a.kind] > CATEGORY[b.kind] else b), True
        return (a if a.bits >= b.bits else b), True
    if a_weak or b_weak:
        strong, weak = (b, a) if a_weak else (a, b)
        return (weak if CATEGORY[weak.kind] > CATEGORY[strong.kind] else strong), False
    return promote_strong(a, b), False


def unsigned(bits: int) -> DType:
    """The unsigned integer dtype of ``bits`` bits: what holds a value's raw bits (8 to 64)."""
    return BY_NAME[f"uint{bits}"]


def scalar_dtype(value) -> DType:
    """The (weak) dtype of a Python scalar; NumPy scalars keep their own dtype."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, np.generic):
        return dtype(value.dtype)
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return int32
        if -(2**63) <= value < 2**63:
            return int64
        if 0 <= value < 2**64:  # e.g. a uint64 mask; it still converts to the other operand's dtype
            return BY_NAME["uint64"]
        raise TileTypeError(f"Python int {value} does not fit in int64 or uint64")
    if isinstance(value, float):
        return float32
    raise TileTypeError(f"{type(value).__name__} value {value!r} is not a scalar")


def _float32_odd(x: np.ndarray) -> np.ndarray:
    """float64 or integer values → float32 rounded to odd (toward zero, the last bit set where
    inexact): rounding that to a 16-bit float rounds once."""
    with np.errstate(all="ignore"):
        r = x.astype(np.float32)  # rounded to nearest, once
        if x.dtype.kind == "f":
            back = r.astype(np.float64)
            inexact, away = (back != x) & (x == x), np.abs(back) > np.abs(x)
        else:
            hi = (x >> 11) << 11  # x = hi + lo, both exact in float64
            diff = (r.astype(np.float64) - hi.astype(np.float64)) - (x - hi).astype(np.float64)  # r - x, exact
            inexact, away = diff != 0, (diff > 0) == (r > 0)
    u = r.view(np.uint32)
    return np.where(inexact, (u - away.astype(np.uint32)) | np.uint32(1), u).view(np.float32)
