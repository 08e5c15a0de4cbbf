"""Every primitive of the tile IR with its rules side by side.

Each primitive registers a ``type`` rule (input types and params → output types, raising
a TileError on misuse; the verifier re-runs it) and an ``interpret`` rule (NumPy values →
NumPy values, the reference semantics). Later stages add their own rules to the same
``Primitive.rules`` dict. Elementwise operations are driven by tables.

The frontend inserts explicit ``convert`` and ``broadcast`` equations, so elementwise
primitives see operands of one type.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..dtypes import DType, bool_, dtype, float32, int32, int64
from ..errors import TileShapeError, TileTypeError, TileValueError
from .core import ArrayType, TileType, primitive

# ---------------------------------------------------------------------------- helpers


def _np(t: TileType):
    return t.strong().dtype.np


def _same_types(name, types):
    """Elementwise operands share one dtype; each is 0-d (a scalar) or of the result shape."""
    shapes = {t.shape for t in types if t.shape != ()}
    dtypes = {t.dtype for t in types}
    if len(shapes) > 1 or len(dtypes) > 1:
        raise TileTypeError(f"{name}: operands must have one type, got {', '.join(map(str, types))}")
    return TileType(shapes.pop() if shapes else (), types[0].dtype, all(t.weak for t in types))


def _is_float(a) -> bool:
    """Whether NumPy array ``a`` holds floats (NumPy's kind for ml_dtypes' bfloat16 is "V", not "f")."""
    return dtype(a.dtype).is_float


# Math functions whose float32 result is computed in float64 and rounded: NumPy's float32 loops
# are a few ulps off and differ with the host's SIMD level, the reference should be neither.
_WIDENED = {"exp", "exp2", "exp2_ftz", "log", "log2", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid", "pow"}


def _rounded(fn, out_dtype: DType, *args, widen=False):
    """Apply ``fn``; 16-bit floats are computed in float32 and rounded once, as the GPU does
    (``widen``: the float32 result is float64's rounded, so 16-bit floats round it again)."""
    with np.errstate(all="ignore"):
        if out_dtype.is_float and out_dtype.bits <= 32:
            wide = np.float64 if widen else np.float32
            out = np.asarray(fn(*(a.astype(wide) if _is_float(a) else a for a in args))).astype(np.float32)
            return out.astype(out_dtype.np)
        return np.asarray(fn(*args)).astype(out_dtype.np)


def ftz_exponent(d: DType) -> float:
    """``exp2(x, flush_to_zero=True)`` is 0 below this ``x``: the smallest normal's exponent of
    the dtype the math runs in (float32 for 16-bit floats), where exp2's result turns subnormal."""
    return -1022.0 if d.bits == 64 else -126.0


def _kinds(name, t: TileType, kinds: str):
    if t.dtype.kind not in kinds:
        allowed = {"b": "bool", "i": "signed int", "u": "unsigned int", "f": "float"}
        raise TileTypeError(
            f"{name} is not defined for {t.dtype.name}; it takes {', '.join(allowed[k] for k in kinds)} tiles"
        )


# ---------------------------------------------------------------------- elementwise

_erf = np.frompyfunc(math.erf, 1, 1)

# name: (NumPy function, dtype kinds allowed)
UNARY = {
    "neg": (np.negative, "iuf"),
    "invert": (np.invert, "biu"),
    "abs": (np.abs, "iuf"),
    "exp": (np.exp, "f"),
    "exp2": (np.exp2, "f"),
    "exp2_ftz": (np.exp2, "f"),  # exp2(x, flush_to_zero=True): the input clamped below in `interpret`
    "log": (np.log, "f"),
    "log2": (np.log2, "f"),
    "sqrt": (np.sqrt, "f"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "f"),
    "sin": (np.sin, "f"),
    "cos": (np.cos, "f"),
    "tanh": (np.tanh, "f"),
    "erf": (lambda x: np.asarray(_erf(x.astype(np.float64)), np.float64), "f"),  # (a 0-d result is a float)
    "sigmoid": (lambda x: np.where(x >= 0, 1, np.exp(-np.abs(x))) / (1 + np.exp(-np.abs(x))), "f"),  # no overflow
    "floor": (np.floor, "f"),
    "ceil": (np.ceil, "f"),
}


def _umulhi(x, y):
    """The high half of the 2N-bit product of two N-bit integers' bits, read unsigned."""
    bits = x.dtype.itemsize * 8
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    wide = x.astype(unsigned).astype(object) * y.astype(unsigned).astype(object)
    return np.asarray(wide >> bits, dtype=object).astype(np.uint64).astype(unsigned).view(x.dtype)


BINARY = {
    "add": (np.add, "iuf"),
    "sub": (np.subtract, "iuf"),
    "mul": (np.multiply, "iuf"),
    "div": (np.true_divide, "f"),
    "div_approx": (np.true_divide, "f"),  # fast_math's `/` (_passes/fast_math.py): within 2 ulps on the GPU
    "floordiv": (np.floor_divide, "iuf"),
    "mod": (np.mod, "iuf"),
    "pow": (np.power, "f"),
    "maximum": (np.maximum, "biuf"),
    "minimum": (np.minimum, "biuf"),
    "and": (np.bitwise_and, "biu"),
    "or": (np.bitwise_or, "biu"),
    "xor": (np.bitwise_xor, "biu"),
    "shl": (np.left_shift, "iu"),
    "shr": (np.right_shift, "iu"),
    "umulhi": (_umulhi, "iu"),
}

COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _def_unary(name, fn, kinds):
    p = primitive(name)

    def type_rule(x):
        _kinds(name, x, kinds)
        return [x]

    def interpret(ctx, x):
        out_dtype = dtype(x.dtype)
        if name == "invert" and x.dtype == np.bool_:
            return [np.logical_not(x)]
        if name == "exp2_ftz":  # a result below the smallest normal of the math's dtype is 0
            x = np.where(x < ftz_exponent(out_dtype), -np.inf, x)
        return [_rounded(fn, out_dtype, x, widen=name in _WIDENED)]

    p.rules.update(type=type_rule, interpret=interpret)


def _shift(name, x, y):
    """Shift counts of the bit width or more (or negative) shift everything out, as PTX does."""
    bits = x.dtype.itemsize * 8
    too_far = y.astype(np.uint64) >= bits
    y = np.where(too_far, bits - 1, y).astype(x.dtype)
    with np.errstate(all="ignore"):
        if name == "shl":
            return np.where(too_far, 0, np.left_shift(x, y)).astype(x.dtype)
        shifted = np.right_shift(x, y)
        return shifted if x.dtype.kind == "i" else np.where(too_far, 0, shifted).astype(x.dtype)


def _def_binary(name, fn, kinds, result_bool=False):
    p = primitive(name)

    def type_rule(x, y):
        t = _same_types(name, [x, y])
        _kinds(name, t, kinds)
        return [TileType(t.shape, bool_)] if result_bool else [t]

    def interpret(ctx, x, y):
        if result_bool:
            return [fn(x, y)]
        if name in ("shl", "shr"):
            return [_shift(name, x, y)]
        out_dtype = dtype(x.dtype)
        return [_rounded(fn, out_dtype, x, y, widen=name in _WIDENED)]

    p.rules.update(type=type_rule, interpret=interpret)


for _n, (_f, _k) in UNARY.items():
    _def_unary(_n, _f, _k)
for _n, (_f, _k) in BINARY.items():
    _def_binary(_n, _f, _k)
for _n, _f in COMPARE.items():
    _def_binary(_n, _f, "biuf", result_bool=True)


fma = primitive("fma")


def _fma_type(x, y, z):
    t = _same_types("fma", [x, y, z])
    _kinds("fma", t, "f")
    return [t]


def _fma64(x, y, z):
    """float64 ``x * y + z`` rounded once (exact rationals; NaN and infinities as IEEE's)."""
    out = np.empty(np.broadcast(x, y, z).shape)
    for i, (a, b, c) in enumerate(zip(*(np.broadcast_to(v, out.shape).ravel() for v in (x, y, z)))):
        out.flat[i] = _fma1(float(a), float(b), float(c))
    return out


def _fma1(a: float, b: float, c: float) -> float:
    with np.errstate(all="ignore"):
        inexact = np.float64(a) * np.float64(b) + np.float64(c)  # (its infinities, NaN and signed zero are IEEE's)
    if not (math.isfinite(a) and math.isfinite(b)) or math.isnan(c):
        return float(inexact)
    if math.isinf(c):  # (the exact product is finite, though a rounded one may overflow: c)
        return c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact) if exact else math.copysign(0.0, inexact)
    except OverflowError:  # (past the largest float64)
        return math.inf if exact > 0 else -math.inf


def _fma_interpret(ctx, x, y, z):
    """One rounding of the exact ``x * y + z`` to float64, or to float32: the float64 product
    of two float32s is exact, and the float64 sum rounded to odd (its error found by TwoSum)
    rounds to float32 correctly. Narrower floats: that float32 rounded once more, as every
    op of theirs is a float32 op rounded."""
    d = dtype(x.dtype)
    if d.bits == 64:
        return [_fma64(x, y, z)]
    with np.errstate(all="ignore"):
        p = x.astype(np.float64) * y.astype(np.float64)
        c = z.astype(np.float64)
        s = p + c
        v = s - p
        err = (p - (s - v)) + (c - v)  # (TwoSum: s + err is p + c exactly)
        even = (s.view(np.int64) & 1) == 0
        odd = np.where(np.isfinite(s) & (err != 0) & even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return [odd.astype(np.float32).astype(d.np)]


fma.rules.update(type=_fma_type, interpret=_fma_interpret)
where = primitive("where")


def _where_type(c, x, y):
    if c.dtype is not bool_:
        raise TileTypeError(f"where: condition must be bool, got {c}")
    t = _same_types("where", [x, y])
    if c.shape not in ((), t.shape) and t.shape != ():
        raise TileShapeError(f"where: condition {c} and values {t} differ in shape")
    return [TileType(c.shape if t.shape == () else t.shape, t.dtype, t.weak)]


where.rules.update(type=_where_type, interpret=lambda ctx, c, x, y: [np.where(c, x, y)])

convert = primitive("convert")


def _convert_interpret(ctx, x, *, dtype, weak=False):
    with np.errstate(all="ignore"):
        if dtype.is_bool:
            return [x != 0]
        if dtype.is_int and _is_float(x):  # truncate toward zero; NaN and overflow give 0
            x = np.trunc(x.astype(np.float64))
            info = np.iinfo(dtype.np)
            x = np.where((x >= info.min) & (x < float(info.max) + 1), x, 0)  # float(max) rounds up for 64 bits
        return [dtype.cast(x)]


convert.rules.update(
    # weak=True (only between two weak operands, e.g. `n + 0.5` for a runtime int `n`) keeps the result weak
    type=lambda x, *, dtype, weak=False: [TileType(x.shape, dtype, weak)],
    interpret=_convert_interpret,
)

# every primitive computed element by element on operands of one shape (or scalars)
ELEMENTWISE = (*UNARY, *BINARY, *COMPARE, "where", "fma", "convert")

# A change of layout (which thread holds which element), inserted by the
# insert_conversions pass after layout assignment: the values do not change.
convert_layout = primitive("convert_layout")
convert_layout.rules.update(type=lambda x: [x], interpret=lambda ctx, x: [x])

# ------------------------------------------------------------------------ creation

full = primitive("full")


def _full_type(v, *, shape, dtype):
    if v.shape != ():
        raise TileShapeError(f"full: the fill value must be a scalar, got {v}")
    return [TileType(tuple(shape), dtype)]


full.rules.update(
    type=_full_type,
    interpret=lambda ctx, v, *, shape, dtype: [np.broadcast_to(dtype.cast(v), shape).copy()],
)

iota = primitive("iota")
iota.rules.update(
    type=lambda *, start, stop: [TileType((stop - start,), int32)],
    interpret=lambda ctx, *, start, stop: [np.arange(start, stop, dtype=np.int32)],
)

# ---------------------------------------------------------------------- grid, arrays

block_id = primitive("block_id")
block_id.rules.update(
    type=lambda *, axis: [TileType((), int32)],
    interpret=lambda ctx, *, axis: [np.int32(ctx.block[axis])],
)
num_blocks = primitive("num_blocks")
num_blocks.rules.update(
    type=lambda *, axis: [TileType((), int32)],
    interpret=lambda ctx, *, axis: [np.int32(ctx.grid[axis])],
)
array_dim = primitive("array_dim")


def _array_dim_type(a, *, axis):
    if not isinstance(a, ArrayType) or not 0 <= axis < a.ndim:
        raise TileValueError(f"array_dim: axis {axis} out of range for {a}")
    return [TileType((), int64)]


array_dim.rules.update(type=_array_dim_type, interpret=lambda ctx, a, *, axis: [np.int64(a.shape[axis])])

# ----------------------------------------------------------------------- reductions

REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
ARG_REDUCE = {"argmax": np.argmax, "argmin": np.argmin}


def _reduce_type(name, kinds):
    def rule(x, *, axis):
        _kinds(name, x, kinds)
        if not 0 <= axis < x.ndim:
            raise TileValueError(f"{name}: axis {axis} out of range for a {x.ndim}-d tile")
        shape = x.shape[:axis] + x.shape[axis + 1 :]
        return [TileType(shape, int32 if name.startswith("arg") else x.dtype)]

    return rule


def _def_reduce(name, fn):
    p = primitive(f"reduce_{name}")
    kinds = "biuf" if name in ("max", "min") else "iuf"

    def interpret(ctx, x, *, axis):
        with np.errstate(all="ignore"):
            return [np.asarray(fn(x, axis=axis)).astype(x.dtype)]

    p.rules.update(type=_reduce_type(name, kinds), interpret=interpret)


def _def_arg_reduce(name, fn):
    p = primitive(name)

    def interpret(ctx, x, *, axis):
        return [np.asarray(fn(x, axis=axis)).astype(np.int32)]

    p.rules.update(type=_reduce_type(name, "biuf"), interpret=interpret)


for _n, _f in REDUCE.items():
    _def_reduce(_n, _f)
for _n, _f in ARG_REDUCE.items():
    _def_arg_reduce(_n, _f)

SCAN = {"cumsum": np.cumsum, "cumprod": np.cumprod}


def _def_scan(name, fn):
    p = primitive(name)

    def type_rule(x, *, axis):
        _kinds(name, x, "iuf")
        if not 0 <= axis < x.ndim:
            raise TileValueError(f"{name}: axis {axis} out of range for a {x.ndim}-d tile")
        return [x]

    def interpret(ctx, x, *, axis):
        with np.errstate(all="ignore"):
            return [np.asarray(fn(x, axis=axis)).astype(x.dtype)]

    p.rules.update(type=type_rule, interpret=interpret)


for _n, _f in SCAN.items():
    _def_scan(_n, _f)

# ----------------------------------------- reductions and scans by a combine function
# (tl.reduce, tl.associative_scan): several tiles of one shape combined together, the
# combine function a traced block (core.Combine) applied to pairs of element groups


def _along_axis(name, xs, axis):
    """The tiles of an operation along ``axis`` share one shape that has it."""
    if {x.shape for x in xs} != {xs[0].shape} or not 0 <= axis < xs[0].ndim:
        raise TileValueError(f"{name}: the tiles must share one shape with axis {axis}, got {', '.join(map(str, xs))}")


def _combined_type(name, keep_axis):
    def rule(*xs, axis, combine, reverse=False):
        _along_axis(name, xs, axis)
        shape = xs[0].shape if keep_axis else xs[0].shape[:axis] + xs[0].shape[axis + 1 :]
        return [TileType(shape, x.dtype) for x in xs]

    return rule


def _combined(ctx, combine, left, right):
    """``combine`` applied elementwise to the groups of arrays ``left`` and ``right``."""
    out = ctx.run_block(combine.body, [*left, *right])
    return [np.broadcast_to(o, left[0].shape).astype(x.dtype) for o, x in zip(out, left)]


def _reduce_interpret(ctx, *xs, axis, combine):
    """Neighbours combined pairwise, in order (the combine function need not commute)."""
    xs = [np.moveaxis(x, axis, -1) for x in xs]
    while xs[0].shape[-1] > 1:
        even = xs[0].shape[-1] // 2 * 2
        out = _combined(ctx, combine, [x[..., 0:even:2] for x in xs], [x[..., 1:even:2] for x in xs])
        xs = [np.concatenate([o, x[..., even:]], axis=-1) for o, x in zip(out, xs)]
    return [np.array(x[..., 0]) for x in xs]  # (ascontiguousarray would make a 0-d result 1-d)


def _scan_interpret(ctx, *xs, axis, combine, reverse):
    """Hillis-Steele: after the step of ``d`` each element holds the combination of the ``2d``
    elements up to it, earlier ones on the left (``reverse``: of the flipped axis)."""
    xs = [np.moveaxis(x, axis, -1)[..., ::-1] if reverse else np.moveaxis(x, axis, -1) for x in xs]
    n, d = xs[0].shape[-1], 1
    while d < n:
        out = _combined(ctx, combine, [x[..., : n - d] for x in xs], [x[..., d:] for x in xs])
        xs = [np.concatenate([x[..., :d], o], axis=-1) for o, x in zip(out, xs)]
        d *= 2
    return [np.ascontiguousarray(np.moveaxis(x[..., ::-1] if reverse else x, -1, axis)) for x in xs]


primitive("reduce", multiple_results=True).rules.update(
    type=_combined_type("reduce", False), interpret=_reduce_interpret
)
primitive("associative_scan", multiple_results=True).rules.update(
    type=_combined_type("associative_scan", True), interpret=_scan_interpret
)


def _sort_type(*xs, axis, descending):
    _along_axis("sort", xs, axis)
    return [x.strong() for x in xs]


def _sort_interpret(ctx, *xs, axis, descending):
    """A stable sort by the first tile (NaN the largest): equal keys keep their order."""
    key = xs[0].astype(np.float64 if _is_float(xs[0]) else np.uint64 if xs[0].dtype.kind == "u" else np.int64)
    if descending:  # (by the keys' dense ranks negated: stable, NaN first)
        key = -np.unique(key, return_inverse=True)[1].reshape(key.shape).astype(np.int64)
    order = np.argsort(key, axis=axis, kind="stable")
    return [np.take_along_axis(x, order, axis) for x in xs]


primitive("sort", multiple_results=True).rules.update(type=_sort_type, interpret=_sort_interpret)

histogram = primitive("histogram")


def _histogram_type(x, *mask, num_bins, masked):
    _kinds("histogram", x, "iu")
    if masked and (mask[0].shape != x.shape or not mask[0].dtype.is_bool):
        raise TileTypeError(f"histogram: the mask must be a bool tile of the values' shape, got {mask[0]}")
    return [TileType((num_bins,), int32)]


def _histogram_interpret(ctx, x, *mask, num_bins, masked):
    keep = (x >= 0) & (x < num_bins) & (mask[0] if masked else True)
    return [np.bincount(x[keep].astype(np.int64), minlength=num_bins).astype(np.int32)]


histogram.rules.update(type=_histogram_type, interpret=_histogram_interpret)

# ----------------------------------------------------------------------- shape ops

reshape = primitive("reshape")


def _reshape_type(x, *, shape):
    new = TileType(tuple(shape), x.dtype, x.weak)
    if new.size != x.size:
        raise TileShapeError(f"reshape: cannot reshape {x} ({x.size} elements) to {list(shape)}")
    return [new]


reshape.rules.update(type=_reshape_type, interpret=lambda ctx, x, *, shape: [x.reshape(shape)])

transpose = primitive("transpose")


def _transpose_type(x, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        raise TileValueError(f"transpose: {list(perm)} is not a permutation of the {x.ndim} axes of {x}")
    return [TileType(tuple(x.shape[p] for p in perm), x.dtype)]


transpose.rules.update(
    type=_transpose_type, interpret=lambda ctx, x, *, perm: [np.ascontiguousarray(np.transpose(x, perm))]
)

broadcast = primitive("broadcast")


def _broadcast_type(x, *, shape):
    shape = tuple(shape)
    if len(shape) != x.ndim or any(s != d and s != 1 for s, d in zip(x.shape, shape)):
        raise TileShapeError(f"cannot broadcast {x} to shape {list(shape)}")
    return [TileType(shape, x.dtype, x.weak)]


broadcast.rules.update(type=_broadcast_type, interpret=lambda ctx, x, *, shape: [np.broadcast_to(x, shape).copy()])

slice_ = primitive("slice")


def _slice_type(x, *, starts, steps, shape):
    """Element ``c`` of the result is ``x[starts + steps * c]`` (per axis; a step may be negative)."""
    if not len(starts) == len(steps) == len(shape) == x.ndim:
        raise TileShapeError(f"slice: {x} needs a start, step and size per axis")
    for n, start, step, size in zip(x.shape, starts, steps, shape):
        if size < 1 or step == 0 or not (0 <= start < n and 0 <= start + step * (size - 1) < n):
            raise TileShapeError(f"slice: {size} elements from {start} in steps of {step} do not fit {x}")
    return [TileType(tuple(shape), x.dtype)]


def _slice_interpret(ctx, x, *, starts, steps, shape):
    return [x[np.ix_(*(start + step * np.arange(size) for start, step, size in zip(starts, steps, shape)))]]


slice_.rules.update(type=_slice_type, interpret=_slice_interpret)

join = primitive("join")


def _join_type(a, b):
    if a.shape != b.shape or a.dtype is not b.dtype or not a.shape:
        raise TileTypeError(f"join: two tiles of one shape and dtype, got {a} and {b}")
    return [TileType((*a.shape, 2), a.dtype)]


join.rules.update(type=_join_type, interpret=lambda ctx, a, b: [np.stack([a, b], axis=-1)])


def _cat_type(a, b, *, axis):
    if a.dtype is not b.dtype or a.ndim != b.ndim or not 0 <= axis < a.ndim:
        raise TileTypeError(f"cat: two tiles of one dtype and rank, got {a} and {b}")
    if any(m != n for d, (m, n) in enumerate(zip(a.shape, b.shape)) if d != axis):
        raise TileShapeError(f"cat: {a} and {b} differ off the axis {axis}")
    return [TileType(tuple(m + n if d == axis else m for d, (m, n) in enumerate(zip(a.shape, b.shape))), a.dtype)]


primitive("cat").rules.update(type=_cat_type, interpret=lambda ctx, a, b, *, axis: [np.concatenate([a, b], axis)])


def _split_type(x):
    if not x.shape or x.shape[-1] != 2:
        raise TileShapeError(f"split: the last axis must have size 2, got {x}")
    return [TileType(x.shape[:-1], x.dtype)] * 2


primitive("split", multiple_results=True).rules.update(
    type=_split_type, interpret=lambda ctx, x: [x[..., 0].copy(), x[..., 1].copy()]
)

# -------------------------------------------------------------------------- memory


def _check_offsets(name, offsets):
    for o in offsets:
        if o.shape != () or not o.dtype.is_int:
            raise TileTypeError(f"{name}: offsets must be integer scalars, got {o}")


def _window(array, starts, shape):
    """Slices of ``array`` and of the tile for the in-bounds part of a window."""
    src, dst = [], []
    for s, n, dim in zip(starts, shape, array.shape):
        s = int(s)
        lo, hi = max(s, 0), min(s + n, dim)
        hi = max(hi, lo)
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    return tuple(src), tuple(dst)


load = primitive("load", effect="read")


def _load_type(a, *rest, shape):
    *offsets, padding = rest
    if len(offsets) != a.ndim or len(shape) != a.ndim:
        raise TileShapeError(f"load: a {a.ndim}-d array needs {a.ndim} offsets and a {a.ndim}-d tile shape")
    _check_offsets("load", offsets)
    if padding.shape != () or padding.dtype is not a.dtype:
        raise TileTypeError(f"load: padding must be a {a.dtype.name} scalar, got {padding}")
    return [TileType(tuple(shape), a.dtype)]


def _load_interpret(ctx, a, *rest, shape):
    *offsets, padding = rest
    out = np.full(shape, padding, dtype=a.dtype)
    src, dst = _window(a, offsets, shape)
    out[dst] = a[src]
    return [out]


load.rules.update(type=_load_type, interpret=_load_interpret)

store = primitive("store", effect="write")


def _store_type(a, tile, *offsets):
    if len(offsets) != a.ndim or tile.ndim != a.ndim:
        raise TileShapeError(f"store: a {a.ndim}-d array needs {a.ndim} offsets and a {a.ndim}-d tile, got {tile}")
    _check_offsets("store", offsets)
    if tile.dtype is not a.dtype:
        raise TileTypeError(f"store: tile {tile} does not match array {a}")
    return []


def _store_interpret(ctx, a, tile, *offsets):
    src, dst = _window(a, offsets, tile.shape)
    a[src] = tile[dst]
    return []


store.rules.update(type=_store_type, interpret=_store_interpret)


def _indexed_type(name, a, indices, mask, values=None):
    if len(indices) != a.ndim:
        raise TileShapeError(f"{name}: a {a.ndim}-d array needs {a.ndim} index tiles, got {len(indices)}")
    shape = indices[0].shape
    for t in indices:
        if not t.dtype.is_int or t.shape != shape:
            raise TileTypeError(f"{name}: index tiles must be integer tiles of one shape, got {t}")
    if mask is not None and (mask.dtype is not bool_ or mask.shape != shape):
        raise TileTypeError(f"{name}: mask must be a bool tile of shape {list(shape)}, got {mask}")
    if values is not None and (values.dtype is not a.dtype or values.shape != shape):
        raise TileTypeError(f"{name}: values must be {a.dtype.name}[{','.join(map(str, shape))}], got {values}")
    return shape


def _split_indexed(a, rest, masked, has_values):
    rest = list(rest)
    mask = rest.pop() if masked else None
    values = rest.pop() if has_values else None
    return rest[: a.ndim], mask, values


def _in_bounds(a, indices, mask):
    ok = np.ones(indices[0].shape, dtype=bool)
    for i, dim in zip(indices, a.shape):
        ok &= (i >= 0) & (i < dim)
    return ok if mask is None else ok & mask


gather = primitive("gather", effect="read")


def _gather_type(a, *rest, masked):
    *rest, padding = rest
    indices, mask, _ = _split_indexed(a, rest, masked, False)
    shape = _indexed_type("gather", a, indices, mask)
    if padding.shape != () or padding.dtype is not a.dtype:
        raise TileTypeError(f"gather: padding must be a {a.dtype.name} scalar, got {padding}")
    return [TileType(shape, a.dtype)]


def _gather_interpret(ctx, a, *rest, masked):
    *rest, padding = rest
    indices, mask, _ = _split_indexed(a, rest, masked, False)
    ok = _in_bounds(a, indices, mask)
    out = np.full(indices[0].shape, padding, dtype=a.dtype)
    out[ok] = a[tuple(i[ok] for i in indices)]
    return [out]


gather.rules.update(type=_gather_type, interpret=_gather_interpret)

scatter = primitive("scatter", effect="write")


def _scatter_type(a, *rest, masked):
    indices, mask, values = _split_indexed(a, rest, masked, True)
    _indexed_type("scatter", a, indices, mask, values)
    return []


def _scatter_interpret(ctx, a, *rest, masked):
    indices, mask, values = _split_indexed(a, rest, masked, True)
    ok = _in_bounds(a, indices, mask)
    a[tuple(i[ok] for i in indices)] = values[ok]
    return []


scatter.rules.update(type=_scatter_type, interpret=_scatter_interpret)

# op: (new value from the old and the operand(s), dtype kinds allowed)
ATOMIC = {
    "add": (lambda old, v: old + v, "iuf"),
    "max": (np.maximum, "iuf"),
    "min": (np.minimum, "iuf"),
    "and": (np.bitwise_and, "iu"),
    "or": (np.bitwise_or, "iu"),
    "xor": (np.bitwise_xor, "iu"),
    "xchg": (lambda old, v: v, "iuf"),
    "cas": (lambda old, compare, v: np.where(old == compare, v, old), "iu"),
}
SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")
RELEASING, ACQUIRING = ("release", "acq_rel"), ("acquire", "acq_rel")  # a barrier and fence before, after
atomic = primitive("atomic", effect="write")


def _atomic_operands(a, rest, op, masked):
    """(indices, mask, operands): ``operands`` the compared value and the new one for cas,
    else the one value."""
    indices, mask, values = _split_indexed(a, rest, masked, True)
    return indices, mask, [rest[a.ndim], values] if op == "cas" else [values]


def _atomic_type(a, *rest, op, masked, sem):
    indices, mask, operands = _atomic_operands(a, rest, op, masked)
    shape = _indexed_type(f"atomic_{op}", a, indices, mask)
    for v in operands:
        _indexed_type(f"atomic_{op}", a, indices, None, v)
    _kinds(f"atomic_{op}", operands[0], ATOMIC[op][1])
    if a.dtype.is_float8:
        raise TileTypeError(f"atomic_{op} is not defined for {a.dtype.name} arrays (no GPU has an 8-bit float atomic)")
    return [TileType(shape, a.dtype)]


def _atomic_interpret(ctx, a, *rest, op, masked, sem):
    """As if element by element in row-major order, each seeing the ones before it (in rounds:
    round r takes every index's r-th element, one vectorized step); the old value of each (0
    where masked off or out of bounds)."""
    indices, mask, operands = _atomic_operands(a, rest, op, masked)
    ok = _in_bounds(a, indices, mask)
    at = np.ravel_multi_index(tuple(i[ok].astype(np.intp) for i in indices), a.shape)
    order = np.argsort(at, kind="stable")
    first = np.r_[True, at[order][1:] != at[order][:-1]] if at.size else np.zeros(0, bool)
    starts = np.maximum.accumulate(np.where(first, np.arange(at.size), 0))
    occurrence = np.empty_like(at)
    occurrence[order] = np.arange(at.size) - starts  # how many before it hit its element
    combine, found = ATOMIC[op][0], np.zeros(at.shape, a.dtype)
    values = [np.broadcast_to(v, ok.shape)[ok] for v in operands]
    with np.errstate(all="ignore"):  # (integers wrap, as on the GPU)
        for r in range(int(occurrence.max(initial=-1)) + 1):
            now = occurrence == r
            found[now] = a.flat[at[now]]
            a.flat[at[now]] = combine(found[now], *(v[now] for v in values))
    old = np.zeros(ok.shape, a.dtype)
    old[ok] = found
    return [old]


atomic.rules.update(type=_atomic_type, interpret=_atomic_interpret)

# A block barrier, inserted by the order_memory pass between a block's conflicting accesses
# to one array (the interpreter runs a block's equations in order already).
barrier = primitive("barrier", effect="sync")
barrier.rules.update(type=lambda: [], interpret=lambda ctx: [])

# ``tl.device_assert`` in a debug-mode trace: runtime_checks.add_checks turns it into a check
# (no later stage sees it; outside debug mode it is not recorded).
device_assert = primitive("device_assert", effect="write")


def _device_assert_type(cond, *, message):
    if not cond.dtype.is_bool:
        raise TileTypeError(f"device_assert: the condition must be a bool tile, got {cond}")
    return []


device_assert.rules.update(type=_device_assert_type, interpret=lambda ctx, cond, *, message: [])

# ``tl.device_print``: one line per element of its tile (or, with none, one per block), the
# same text on every backend (a printf format: the GPU's vprintf, the host's printf)
device_print = primitive("device_print", effect="print")


def print_format(prefix: str, x: TileType | None, hex: bool = False) -> str:
    """The printf format of one line: the block's ids, the element's index and value (with
    ``hex``, its bits)."""
    head = f"block (%lld, %lld, %lld) {prefix.replace('%', '%%')}"
    if x is None:
        return head + "\n"
    d = x.dtype
    value = ("%.17g" if d.bits == 64 else "%.9g") if d.is_float else "%llu" if d.kind == "u" else "%lld"
    value = "0x%llx" if hex else value
    index = ", ".join(["%lld"] * len(x.shape))
    return f"{head} idx ({index}): {value}\n"


def _print_interpret(ctx, *x, prefix, hex=False):
    text = print_format(prefix, None if not x else TileType(x[0].shape, dtype(x[0].dtype)), hex)
    text = text.replace("%lld", "%d").replace("%llu", "%d").replace("%llx", "%x")  # (Python's % takes no length)
    if not x:
        print(text % ctx.block, end="", flush=True)
        return []
    values = np.asarray(x[0])
    if hex:  # the element's bits (bool: 0 or 1)
        values = (values if values.dtype == np.bool_ else values.view(f"u{values.dtype.itemsize}")).astype(object)
    else:
        values = values.astype(np.float64 if _is_float(values) else object)
    lines = (text % (*ctx.block, *index, values[index]) for index in np.ndindex(*values.shape))
    print("".join(lines), end="", flush=True)
    return []


device_print.rules.update(type=lambda *x, prefix, hex=False: [], interpret=_print_interpret)

# ----------------------------------------------------------------------------- dot

dot = primitive("dot")


def dot_result_dtype(d: DType) -> DType:
    """fp32 accumulation for 16- and 8-bit floats, int32 for narrow ints."""
    if d.is_float:
        return d if d.bits >= 32 else float32
    return int64 if d.bits == 64 else int32


def _dot_type(a, b, acc, precision="ieee"):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise TileShapeError(f"dot: needs 2-d tiles (M,K) and (K,N), got {a} and {b}")
    if a.dtype is not b.dtype and not (a.dtype.is_float8 and b.dtype.is_float8):
        raise TileTypeError(f"dot: operands must have one dtype (or two float8 ones), got {a} and {b}")
    _kinds("dot", a, "iuf")
    shape = (a.shape[0], b.shape[1])
    if acc.shape != shape or acc.dtype is not dot_result_dtype(a.dtype):
        raise TileTypeError(f"dot: accumulator must be {dot_result_dtype(a.dtype).name}{list(shape)}, got {acc}")
    return [acc]


def _dot_interpret(ctx, a, b, acc, precision="ieee"):
    if precision == "tf32":  # the operands rounded, the products exact, their sums in float64
        a, b = tf32(a), tf32(b)
        with np.errstate(all="ignore"):
            return [(acc + a.astype(np.float64) @ b.astype(np.float64)).astype(acc.dtype)]
    with np.errstate(all="ignore"):
        return [(acc + a.astype(acc.dtype) @ b.astype(acc.dtype)).astype(acc.dtype)]


def tf32(x: np.ndarray) -> np.ndarray:
    """float32s rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as
    ``cvt.rna.tf32.f32`` does: half a TF32 ulp added to the magnitude's bits, the 13 low bits
    dropped (a carry into the exponent rounds up to the next power of two, or to infinity).
    NaNs stay NaN."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isnan(x), x, rounded).astype(np.float32)


dot.rules.update(type=_dot_type, interpret=_dot_interpret)

# ---------------------------------------------------------------------------- loops

range_loop = primitive("range_loop", multiple_results=True)


def _range_type(start, stop, step, *init, body):
    for t in (start, stop, step):
        if t.shape != () or not t.dtype.is_int:
            raise TileTypeError(f"tl.range bounds must be integer scalars, got {t}")
    return [t for t in init]


def _range_interpret(ctx, start, stop, step, *init, body):
    if step == 0:
        raise TileValueError("tl.range: step must not be zero")
    carried = list(init)
    index_dtype = body.params[0].type.dtype.np
    for k in range(int(start), int(stop), int(step)):
        carried = ctx.run_block(body, [index_dtype.type(k), *carried])
    return carried


range_loop.rules.update(type=_range_type, interpret=_range_interpret)
