"""NumPy references for the op tests, written from the documented rules (not from tilelang's code).

- :func:`promote` / :func:`promote_weak`: the promotion rules of ``tilelang/dtypes.py``'s docstring.
- :func:`compute`: one op as the reference computes it: 16- and 8-bit floats in float32 and
  rounded once to the dtype, everything else in the dtype itself (integers wrap).
"""

from __future__ import annotations

import numpy as np

import tilelang as tl

ALL = (tl.bool_, tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8, tl.uint16, tl.uint32, tl.uint64)
ALL += (tl.float8_e4m3fn, tl.float8_e5m2, tl.float16, tl.bfloat16, tl.float32, tl.float64)
FLOATS = (tl.float8_e4m3fn, tl.float8_e5m2, tl.float16, tl.bfloat16, tl.float32, tl.float64)
CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}


def promote(a, b):
    """The common dtype of two tiles (strong operands)."""
    if a is b:
        return a
    if a.kind == "b" or b.kind == "b":
        return b if a.kind == "b" else a
    if a.kind == "f" and b.kind == "f":  # of one width: float16 holds both float8s, float32 both 16-bit ones
        return {8: tl.float16, 16: tl.float32}[a.bits] if a.bits == b.bits else (a if a.bits > b.bits else b)
    if a.kind == "f" or b.kind == "f":
        return a if a.kind == "f" else b
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    return {8: tl.int16, 16: tl.int32, 32: tl.int64, 64: tl.int64}[unsigned.bits]


def python_scalar_dtype(value):
    """A Python scalar's own (weak) dtype."""
    if isinstance(value, bool):
        return tl.bool_
    if isinstance(value, int):
        return tl.int32 if -(2**31) <= value < 2**31 else tl.int64 if -(2**63) <= value < 2**63 else tl.uint64
    return tl.float32


def promote_weak(tile_dtype, value):
    """The dtype of ``tile OP value`` for a Python scalar: the tile's unless the scalar's category is higher."""
    own = python_scalar_dtype(value)
    return own if CATEGORY[own.kind] > CATEGORY[tile_dtype.kind] else tile_dtype


def is_half(d):
    """A float computed in float32 and rounded to itself: 16 or 8 bits."""
    return d.kind == "f" and d.bits < 32


def compute(fn, dtype, *args):
    """``fn(*args)`` with each argument converted to ``dtype``; narrow floats computed in float32, rounded once."""
    with np.errstate(all="ignore"):
        args = [np.asarray(a).astype(dtype.np) for a in args]
        if is_half(dtype):
            args = [a.astype(np.float32) for a in args]
        return np.asarray(fn(*args)).astype(dtype.np)


def wrap(values, dtype):
    """Python ints (an object array) reduced modulo 2**bits into ``dtype``."""
    bits = dtype.bits
    values = np.asarray(values, dtype=object) % (1 << bits)
    if dtype.kind == "i":
        values = np.where(values >= (1 << (bits - 1)), values - (1 << bits), values)
    return np.asarray(values.astype(object), dtype=object).astype(dtype.np)
