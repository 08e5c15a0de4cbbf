"""The tile language: the operations a ``@tl.tile_kernel`` function is written in.

Every public function here is a thin, documented wrapper that checks its arguments,
applies broadcasting and dtype promotion (see :mod:`tilelang.dtypes`) and records one or
a few primitives of the tile IR. They work only while a kernel is traced.

Example::

    import tilelang as tl

    @tl.tile_kernel
    def add(x, y, out, TILE: tl.Constant):
        i = tl.block_id(0)
        a = tl.load(x, index=(i,), shape=(TILE,))
        b = tl.load(y, index=(i,), shape=(TILE,))
        tl.store(out, a + b, index=(i,))
"""

from __future__ import annotations

import builtins
import functools
import inspect
import types

import numpy as np

from . import dtypes as _dt
from ._frontend.coercion import (
    as_dtype,
    as_tile,
    axis_index,
    broadcast_atom,
    broadcast_shapes,
    converted,
    elementwise_op,
    full_shape,
    promoted_operands,
)
from ._frontend.combine import associative_scan, reduce, sort, topk
from ._frontend.loops import range
from ._frontend.shapes import (
    broadcast_to,
    cat,
    expand_dims,
    flip,
    interleave,
    join,
    permute,
    ravel,
    reshape,
    split,
    transpose,
)
from ._frontend.tracing import (
    Array,
    Tile,
    as_atom,
    bind,
    bind1,
    checked,
    current_block,
    double_of,
    literal,
    located,
    static_int,
    static_shape,
)
from ._ir import primitives as P
from ._ir.core import PRIMITIVES, Literal, TileType
from .dtypes import float32, int64
from .errors import TileShapeError, TileTypeError, TileValueError

__all__ = [
    "Constant", "range", "block_id", "num_blocks", "cdiv",
    "zeros", "full", "zeros_like", "full_like", "arange", "load", "store", "gather", "scatter",
    "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas",
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid",
    "abs", "floor", "ceil", "maximum", "minimum", "umulhi", "fma", "where", "clip", "astype",
    "sum", "max", "min", "prod", "argmax", "argmin", "cumsum", "cumprod", "histogram",
    "reduce", "associative_scan", "sort", "topk",
    "reshape", "transpose", "permute", "expand_dims", "broadcast_to", "ravel",
    "flip", "join", "split", "interleave", "cat",
    "static_assert", "device_assert", "device_print",
    "dot",
]  # fmt: skip


class Constant:
    """Annotation for compile-time parameters: ``def k(x, TILE: tl.Constant)``.

    A Constant's value is a Python value while tracing (usable in shapes and Python
    control flow) and part of the kernel's specialization key.
    """

    def __class_getitem__(cls, item):
        return cls


# ------------------------------------------------------------------- grid


def block_id(axis: int = 0) -> Tile:
    """The index of this block along grid ``axis`` (0, 1 or 2), an int32 scalar.

    Example: ``i = tl.block_id(0)``.
    """
    return bind1(P.block_id, [], "block_id", axis=_grid_axis(axis))


def num_blocks(axis: int = 0) -> Tile:
    """The number of blocks of the grid along ``axis``, an int32 scalar."""
    return bind1(P.num_blocks, [], "num_blocks", axis=_grid_axis(axis))


def _grid_axis(axis):
    axis = static_int(axis, "grid axis")
    if axis not in (0, 1, 2):
        raise located(TileValueError(f"grid axis must be 0, 1 or 2, got {axis}"))
    return axis


def cdiv(a, b):
    """Ceiling division, Python's ``-(-a // b)``: ``tl.cdiv(10, 4) == 3``, ``tl.cdiv(7, -2) == -3``.

    Works on Python ints and on tiles of any integer dtype (in the promoted dtype, with no
    intermediate overflow: ``a // b`` is one step below the ceiling where ``a % b != 0``).
    """
    if type(a) is int and type(b) is int and b:  # the common case (at every launch that computes a grid)
        return -(-a // b)
    if not isinstance(a, Tile) and not isinstance(b, Tile):  # NumPy ints, torch's symbolic sizes, mistakes
        if isinstance(a, (float, np.floating, str)) or isinstance(b, (float, np.floating, str)):
            raise located(TileTypeError(f"tl.cdiv takes integers or integer tiles, got {a!r} and {b!r}"))
        try:
            return -(-a // b)
        except ZeroDivisionError:
            raise located(TileValueError(f"tl.cdiv({a!r}, {b!r}): division by zero")) from None
    return a // b + (a % b != 0)  # not (a + b - 1) // b, which overflows near the maximum and is wrong for b < 0


# --------------------------------------------------------------- creation


def full(shape, value, dtype=None) -> Tile:
    """A tile of ``shape`` filled with ``value`` (a Python scalar or a 0-d tile).

    Example: ``m = tl.full((128,), float("-inf"), tl.float32)``.
    """
    shape = static_shape(shape)
    atom = as_atom(value, "fill value")
    if atom.type.shape != ():
        raise located(TileShapeError(f"full: the fill value must be a scalar, got {atom.type}"))
    d = as_dtype(dtype) if dtype is not None else atom.type.dtype
    return bind1(P.full, [converted(atom, d)], "full", shape=shape, dtype=d)


def zeros(shape, dtype=float32) -> Tile:
    """A tile of zeros: ``acc = tl.zeros((64, 64), tl.float32)``."""
    current_block("zeros")  # (outside a kernel: named as the user wrote it)
    return full(shape, 0, dtype)


def zeros_like(x, dtype=None) -> Tile:
    """Zeros of ``x``'s shape and dtype (or ``dtype``): ``acc = tl.zeros_like(t, tl.float32)``."""
    t = as_tile(x)
    return full(t.shape, 0, dtype or t.dtype)


def full_like(x, value, dtype=None) -> Tile:
    """``value`` in a tile of ``x``'s shape and dtype (or ``dtype``): ``tl.full_like(t, -1)``."""
    t = as_tile(x)
    return full(t.shape, value, dtype or t.dtype)


def arange(start, stop=None) -> Tile:
    """int32 tile ``[start, start+1, ..., stop-1]`` for compile-time bounds: ``tl.arange(0, 128)``."""
    if stop is None:
        start, stop = 0, start
    start, stop = static_int(start, "arange start"), static_int(stop, "arange stop")
    if stop <= start:
        raise located(TileValueError(f"arange({start}, {stop}) would be empty"))
    if start < -(2**31) or stop - 1 > 2**31 - 1:  # its elements are int32: they would wrap
        raise located(
            TileValueError(
                f"arange({start}, {stop}) goes past int32, the dtype of its elements; "
                f"add the offset to an int64 tile instead: tl.arange(0, {stop - start}).astype(tl.int64) + {start}"
            )
        )
    return bind1(P.iota, [], "arange", start=start, stop=stop)


# ------------------------------------------------------------------ memory


def _check_array(array, op):
    if not isinstance(array, Array):
        current_block(op)  # outside a kernel, the mistake is the missing @tl.tile_kernel
        raise located(
            TileTypeError(f"{op}: the first argument must be a kernel array argument, got {type(array).__name__}")
        )


def _offsets(array, index, offset, shape, op):
    if (index is None) == (offset is None):
        raise located(TileValueError(f"{op}: give exactly one of index= (tile-space) or offset= (elements)"))
    coords = index if index is not None else offset
    if not isinstance(coords, (tuple, list)):
        coords = (coords,)
    if len(coords) != array.ndim:
        raise located(TileShapeError(f"{op}: a {array.ndim}-d array needs {array.ndim} coordinates, got {len(coords)}"))
    out = []
    for c, n in zip(coords, shape):
        atom = as_atom(c, "coordinate")
        if atom.type.dtype.is_bool:  # True would silently be 1
            raise located(TileTypeError(f"{op}: a bool is not a coordinate; convert it with .astype(tl.int32)"))
        if atom.type.shape != () or not atom.type.dtype.is_int:
            raise located(TileTypeError(f"{op}: coordinates must be integer scalars, got {atom.type}"))
        out.append(_element_offset(atom, n if index is not None else 1))
    return out


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _element_offset(atom, scale):
    """``atom * scale`` as int64, saturated at int64's ends instead of wrapping: a window that far
    out lies beyond every array, so bounds are decided on the true value (a uint64 offset of
    2**64 - 2 is not -2, an int64 tile index times the tile size does not wrap into range)."""
    if isinstance(atom, Literal):
        return literal(builtins.min(builtins.max(int(atom.value) * scale, _INT64_MIN), _INT64_MAX), int64)
    wide = atom.type.dtype.bits == 64  # narrower ones times a tile size fit int64
    if atom.type.dtype is _dt.uint64:
        atom = minimum(Tile(atom), _INT64_MAX).var
    atom = converted(atom, int64)
    if scale == 1:
        return atom
    if not wide:
        return elementwise_op("mul", atom, scale).var
    high, low = _INT64_MAX // scale, -(-_INT64_MIN // scale)  # the products that fit
    x = Tile(atom)
    # (debug mode checks this multiply: there it is of the clamped value, which cannot overflow)
    scaled = (clip(x, low, high) if checked() else x) * scale
    return where(x > high, _INT64_MAX, where(x < low, _INT64_MIN, scaled)).var


def _value_for(array, value, what):
    atom = as_atom(value, what)
    if atom.type.weak and atom.type.dtype.is_float and not array.dtype.is_float:
        v, d = atom.value.item() if isinstance(atom, Literal) else None, array.dtype
        low, high = (0, 1) if d.is_bool else (np.iinfo(d.np).min, np.iinfo(d.np).max)
        if v is None or not (np.isfinite(v) and v.is_integer() and low <= v <= high):  # (it was truncated silently)
            given = "a runtime Python float" if v is None else f"the Python float {v!r}"
            raise located(
                TileTypeError(
                    f"{what} is {given} but the array holds {d.name}: give a whole number that {d.name} holds"
                    + ("" if d.is_bool else f" (for a max, pad with its minimum, np.iinfo(np.{d.np.name}).min)")
                )
            )
    if atom.type.dtype is not array.dtype and not atom.type.weak:
        raise located(
            TileTypeError(
                f"{what} is {atom.type.dtype.name} but the array holds {array.dtype.name}; "
                f"convert it with .astype(tl.{array.dtype.name})"
            )
        )
    return converted(atom, array.dtype) if atom.type.weak else atom  # a weak literal becomes strong


def load(array, index=None, shape=None, offset=None, padding=0) -> Tile:
    """Read a tile-shaped window of ``array``; out-of-bounds elements read as ``padding``.

    ``index=(i, j)`` addresses the tile grid (element offset ``i*shape[0], j*shape[1]``);
    ``offset=(r, c)`` gives element offsets for windows off the tile grid.

    Example: ``a = tl.load(x, index=(tl.block_id(0),), shape=(1024,))``.
    """
    _check_array(array, "load")
    if shape is None:
        raise located(TileValueError("load: shape= is required"))
    shape = static_shape(shape, "load shape")
    if len(shape) != array.ndim:
        raise located(TileShapeError(f"load: a {array.ndim}-d array needs a {array.ndim}-d shape, got {list(shape)}"))
    offsets = _offsets(array, index, offset, shape, "load")
    pad = _value_for(array, padding, "padding")
    return bind1(P.load, [array, *offsets, pad], "load", shape=shape)


def store(array, tile, index=None, offset=None) -> None:
    """Write ``tile`` into the window of ``array`` at ``index``/``offset``; out-of-bounds elements are skipped.

    Example: ``tl.store(out, a + b, index=(i,))``.
    """
    _check_array(array, "store")
    atom = _value_for(array, tile, "the stored tile")
    if atom.type.ndim != array.ndim:
        raise located(TileShapeError(f"store: a {array.ndim}-d array needs a {array.ndim}-d tile, got {atom.type}"))
    offsets = _offsets(array, index, offset, atom.type.shape, "store")
    bind(P.store, [array, atom, *offsets], "store")


def _indexed(array, indices, operands, mask, op):
    _check_array(array, op)
    if array.ndim == 0:  # (the index tiles give the shape of the access)
        raise located(
            TileShapeError(f"{op} of a 0-d array: pass it as a 1-element array (`total.reshape(1)`) and index 0")
        )
    if len(indices) != array.ndim:
        raise located(
            TileShapeError(f"{op}: a {array.ndim}-d array needs {array.ndim} index tiles, got {len(indices)}")
        )
    atoms = [as_atom(i, "index") for i in indices]
    for a in atoms:
        if not a.type.dtype.is_int:
            raise located(TileTypeError(f"{op}: indices must be integer tiles, got {a.type}"))
    extra = [_value_for(array, v, name) for name, v in operands]
    if mask is not None:
        extra.append(_bool_mask(mask, op))
    everything = atoms + extra
    shape = broadcast_shapes(*(a.type.shape for a in everything))
    return [full_shape(a, shape) for a in everything]


def _bool_mask(mask, op):
    m = as_atom(mask, "mask")
    if not m.type.dtype.is_bool:
        raise located(TileTypeError(f"{op}: mask must be a bool tile, got {m.type}"))
    return m


def gather(array, *indices, mask=None, padding=0) -> Tile:
    """Read ``array[indices...]`` elementwise; one index tile per array dimension, broadcast together.

    Elements whose ``mask`` is False or whose index is out of bounds read as ``padding``.

    Example: ``rows = tl.gather(table, ids[:, None], tl.arange(0, 64)[None, :])``.
    """
    atoms = _indexed(array, indices, (), mask, "gather")
    pad = _value_for(array, padding, "padding")
    return bind1(P.gather, [array, *atoms, pad], "gather", masked=mask is not None)


def _indices_and_values(op, indices_and_values, values):
    """The index tiles and the values, given last or as ``values=``."""
    indices, (values,) = _indices_and_operands(op, indices_and_values, {"values": values})
    return indices, values


def _indices_and_operands(op, args, given: dict):
    """The index tiles and the operands named by ``given`` (name -> keyword value or None):
    all by keyword, or all the last positional arguments in order."""
    if all(v is not None for v in given.values()):
        return args, list(given.values())
    names = ", ".join(given)
    if any(v is not None for v in given.values()):
        raise located(TileTypeError(f"{op}: give {names} all by keyword or all positionally, after the indices"))
    if len(args) <= len(given):
        raise located(TileTypeError(f"{op}: give the index tiles and then {names}"))
    return args[: -len(given)], list(args[-len(given) :])


def scatter(array, *indices_and_values, values=None, mask=None) -> None:
    """Write ``values`` (the last argument, or ``values=``) to ``array[indices...]``
    elementwise: ``tl.scatter(out, idx, vals)``.

    Masked-off and out-of-bounds elements are skipped. Where indices repeat, which write
    lands is unspecified.
    """
    indices, values = _indices_and_values("scatter", indices_and_values, values)
    atoms = _indexed(array, indices, [("values", values)], mask, "scatter")
    bind(P.scatter, [array, *atoms], "scatter", masked=mask is not None)


_ATOMIC_DOC = """{summary}, atomically, element by element, and return the
values the elements held before (0 where masked off or out of bounds): ``old =
tl.atomic_{op}(array, *indices, values, mask=None, sem="relaxed")``.

Indices, values and mask broadcast together (0-d too); the result has their shape and the
array's dtype. Repeated indices, within a block or across blocks, all take effect: each
element's update is indivisible, and each old value is what the updates before it left
(within a block, in row-major order on the interpreter; in an unspecified order on the GPU,
so float adds round in that order).
{kinds}

``sem`` orders the block's other memory accesses (to any array, by any of its threads)
around the atomic, for handing data from block to block: ``"relaxed"`` (the default, as
CUDA's atomics) none; ``"release"``: everything the block did before it is visible to a
block whose ``"acquire"`` atomic reads what this one wrote; ``"acquire"``: everything the
block does after it comes after; ``"acq_rel"``: both (the last-block pattern below). On the
GPU a release is a block barrier and a ``fence.acq_rel.gpu`` before the atomic, an acquire
the fence and a barrier after it. (Triton's default is ``"acq_rel"``, per thread.)

Example, the last block to finish sums the rows the others stored (its acquire sees them)::

    tl.store(parts, tl.sum(x, axis=0, keepdims=True), index=(b, 0))
    last = tl.atomic_add(count, 0, 1, sem="acq_rel") == tl.num_blocks(0) - 1
    total = tl.zeros((N,), tl.float32)
    for k in tl.range(0, tl.where(last, tl.num_blocks(0), 0)):  # the last block only
        total += tl.load(parts, index=(k, 0), shape=(1, N)).reshape((N,))
    tl.scatter(out, tl.arange(0, N), total, mask=last)

On the GPU 32- and 64-bit integer atomics, float adds and exchanges are the hardware's;
float max/min and 8- and 16-bit types are compare-and-swap loops (on the aligned 32-bit
word that holds an 8-bit element: it may reach up to 3 bytes past the end of an allocation,
harmless, but compute-sanitizer's memcheck may report it)."""


def _atomic(op, summary, kinds):
    def atomic_op(array, *indices_and_values, values=None, mask=None, sem="relaxed") -> Tile:
        indices, operands = _indices_and_operands(f"atomic_{op}", indices_and_values, {"values": values})
        return _bind_atomic(op, array, indices, operands, mask, sem)

    atomic_op.__name__ = f"atomic_{op}"
    atomic_op.__doc__ = _ATOMIC_DOC.format(summary=summary, op=op, kinds=kinds)
    return atomic_op


def _bind_atomic(op, array, indices, operands, mask, sem):
    if not isinstance(sem, str) or sem not in P.SEMANTICS:
        raise located(TileValueError(f"atomic_{op}: sem is one of {', '.join(map(repr, P.SEMANTICS))}, got {sem!r}"))
    names = ("compare", "values") if op == "cas" else ("values",)
    atoms = _indexed(array, indices, list(zip(names, operands)), mask, f"atomic_{op}")
    return bind1(P.atomic, [array, *atoms], f"atomic_{op}", op=op, masked=mask is not None, sem=sem)


_NUMBERS = "Int and float arrays of every width: integers wrap, 16-bit floats combine in float32 and round once."
atomic_add = _atomic("add", "Add ``values`` (the last argument, or ``values=``) into ``array[indices...]``", _NUMBERS)
atomic_max = _atomic(
    "max", "Take the maximum of ``array[indices...]`` and ``values``", _NUMBERS + " A NaN wins, as NumPy's maximum."
)
atomic_min = _atomic(
    "min", "Take the minimum of ``array[indices...]`` and ``values``", _NUMBERS + " A NaN wins, as NumPy's minimum."
)
atomic_and = _atomic("and", "Bitwise-and ``values`` into ``array[indices...]``", "Integer arrays.")
atomic_or = _atomic("or", "Bitwise-or ``values`` into ``array[indices...]``", "Integer arrays.")
atomic_xor = _atomic("xor", "Bitwise-xor ``values`` into ``array[indices...]``", "Integer arrays.")
atomic_xchg = _atomic("xchg", "Write ``values`` to ``array[indices...]``", "Int and float arrays of every width.")


def atomic_cas(array, *indices_compare_values, compare=None, values=None, mask=None, sem="relaxed") -> Tile:
    """Compare and swap: where ``array[indices...]`` equals ``compare``, write ``values``
    there, atomically, element by element; return what each element held before (so an
    element was swapped where the result equals ``compare`` and the mask holds: masked-off
    and out-of-bounds elements give 0). ``tl.atomic_cas(array, *indices, compare, values,
    mask=None, sem="relaxed")``
    (or ``compare=``, ``values=`` by keyword). Integer arrays; ``sem`` and the rest as
    :func:`atomic_add`.

    Example, a flag taken by the first block to get there:
    ``won = tl.atomic_cas(flag, tl.zeros((), tl.int32), 0, 1) == 0``.
    """
    given = {"compare": compare, "values": values}
    indices, operands = _indices_and_operands("atomic_cas", indices_compare_values, given)
    return _bind_atomic("cas", array, indices, operands, mask, sem)


# ------------------------------------------------------------- elementwise


def _math(name, doc):
    def fn(x) -> Tile:
        return elementwise_op(name, x, float_only=True)

    fn.__name__ = name
    fn.__doc__ = f"{doc} elementwise; integer tiles are converted to float32 first. Example: ``tl.{name}(x)``."
    return fn


exp = _math("exp", "e**x")


def exp2(x, flush_to_zero: bool = False) -> Tile:
    """2**x elementwise; integer tiles are converted to float32 first. With ``flush_to_zero``
    a result below the smallest normal number of the float the math runs in (float32 for
    float32 and 16-bit tiles: x < -126) is 0 instead of subnormal, as Triton's ``exp2`` and
    ``ct.exp2(x, flush_to_zero=True)``: on the GPU one ``ex2.approx.ftz.f32`` instead of four
    instructions (worth it where exp2 is a large share of the work, as in attention's softmax).
    Example: ``p = tl.exp2(s - m[:, None], flush_to_zero=True)``."""
    if not isinstance(flush_to_zero, (bool, np.bool_)):
        raise located(TileTypeError(f"exp2: flush_to_zero must be True or False, got {type(flush_to_zero).__name__}"))
    return elementwise_op("exp2_ftz" if bool(flush_to_zero) else "exp2", x, float_only=True)


log = _math("log", "Natural logarithm")
log2 = _math("log2", "Base-2 logarithm")
sqrt = _math("sqrt", "Square root")
rsqrt = _math("rsqrt", "1/sqrt(x)")
sin = _math("sin", "Sine")
cos = _math("cos", "Cosine")
tanh = _math("tanh", "Hyperbolic tangent")
erf = _math("erf", "The error function")
sigmoid = _math("sigmoid", "1/(1+exp(-x))")


def abs(x) -> Tile:
    """Absolute value elementwise (``abs(t)`` works too); unsigned and bool tiles are returned unchanged."""
    t = as_tile(x)
    return t if t.dtype.kind in "bu" else elementwise_op("abs", t)


def floor(x) -> Tile:
    """Round down to an integer value, elementwise; integer tiles are returned unchanged."""
    t = as_tile(x)
    return t if not t.dtype.is_float else elementwise_op("floor", t)


def ceil(x) -> Tile:
    """Round up to an integer value, elementwise; integer tiles are returned unchanged."""
    t = as_tile(x)
    return t if not t.dtype.is_float else elementwise_op("ceil", t)


def maximum(x, y) -> Tile:
    """Elementwise maximum with broadcasting; NaN propagates. Example: ``tl.maximum(x, 0.0)``."""
    return elementwise_op("maximum", x, y)


def minimum(x, y) -> Tile:
    """Elementwise minimum with broadcasting; NaN propagates."""
    return elementwise_op("minimum", x, y)


def umulhi(x, y) -> Tile:
    """The high half of the double-width product of two integer tiles (promoted to one dtype of
    N bits), their bits read as unsigned: ``(x * y) >> N`` computed in 2N bits, as Triton's.
    A random-number or hash kernel's 32 x 32 -> 64-bit step: ``hi = tl.umulhi(a, tl.uint32(0xCD9E8D57))``."""
    return elementwise_op("umulhi", x, y)


def fma(x, y, z) -> Tile:
    """``x * y + z`` rounded once (a fused multiply-add) on every backend, for float tiles
    (promoted and broadcast as ``x * y + z``; integers become float32). 16- and 8-bit floats
    compute a float32 fma and round it to their type, as all their ops. Example, a step of
    Horner's rule: ``p = tl.fma(p, x, c)``."""
    return elementwise_op("fma", x, y, z, float_only=True)


def where(cond, x, y) -> Tile:
    """``x`` where ``cond`` is True, else ``y``; all three broadcast. Example: ``tl.where(x > 0, x, 0.0)``."""
    c = as_atom(cond, "condition")
    if not c.type.dtype.is_bool:
        raise located(TileTypeError(f"where: the condition must be a bool tile, got {c.type}"))
    vx, vy = promoted_operands(x, y)
    shape = broadcast_shapes(c.type.shape, vx.type.shape, vy.type.shape)
    c, vx, vy = broadcast_atom(c, shape), broadcast_atom(vx, shape), broadcast_atom(vy, shape)
    return bind1(P.where, [c, vx, vy], "where")


def clip(x, lo, hi) -> Tile:
    """``minimum(maximum(x, lo), hi)``: ``tl.clip(x, 0.0, 6.0)``."""
    return minimum(maximum(x, lo), hi)


def astype(x, dtype) -> Tile:
    """Convert to ``dtype`` (also ``x.astype(dtype)``). Float to int truncates toward zero;
    NaN and out-of-range values give 0 in the interpreter and are unspecified elsewhere."""
    d = as_dtype(dtype)
    atom = as_atom(x)
    if isinstance(atom, Literal):
        return as_tile(Literal(literal(atom.value.item(), d).value, TileType((), d)))
    atom = double_of(atom) or atom
    return Tile(atom) if atom.type.dtype is d and not atom.type.weak else bind1(P.convert, [atom], "astype", dtype=d)


# ------------------------------------------------------ reductions and scans


def _accumulator(t: Tile, dtype):
    """The dtype sums and products accumulate in: narrow ints widen to 32 bits, narrow floats to float32."""
    if dtype is not None:
        return as_dtype(dtype), as_dtype(dtype)
    d = t.dtype
    if d.is_bool or (d.is_int and d.bits < 32):
        wide = _dt.BY_NAME["uint32" if d.kind == "u" else "int32"]
        return wide, wide
    if d.is_narrow_float:
        return float32, d
    return d, d


def _flatten(t: Tile) -> Tile:
    return t if t.ndim == 1 else reshape(t, (t.type.size,))


def _reduce(name, x, axis, keepdims, dtype=None):
    t = as_tile(x)
    if name in ("sum", "prod"):
        acc, result = _accumulator(t, dtype)
        t = astype(t, acc)
    prim = PRIMITIVES[name if name.startswith("arg") else f"reduce_{name}"]
    if t.ndim == 0:
        raise located(TileShapeError(f"{name} of a 0-d tile"))
    if axis is None:
        out = bind1(prim, [_flatten(t)], name, axis=0)
        if keepdims:
            out = reshape(out, (1,) * t.ndim)
    else:
        ax = axis_index(axis, t.ndim, name)
        out = bind1(prim, [t], name, axis=ax)
        if keepdims:
            out = expand_dims(out, ax)
    return astype(out, result) if name in ("sum", "prod") else out


def sum(x, axis=None, keepdims=False, dtype=None) -> Tile:
    """Sum over ``axis`` (all axes if None). Narrow ints and bool sum in int32; float16/bfloat16
    accumulate in float32 and round once. Example: ``row_total = tl.sum(x, axis=1)``."""
    return _reduce("sum", x, axis, keepdims, dtype)


def prod(x, axis=None, keepdims=False, dtype=None) -> Tile:
    """Product over ``axis`` (all axes if None), accumulating like :func:`sum`."""
    return _reduce("prod", x, axis, keepdims, dtype)


def max(x, axis=None, keepdims=False) -> Tile:
    """Maximum over ``axis``; NaN propagates. Example: ``m = tl.max(x, axis=1, keepdims=True)``."""
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False) -> Tile:
    """Minimum over ``axis``; NaN propagates."""
    return _reduce("min", x, axis, keepdims)


def argmax(x, axis=None, keepdims=False) -> Tile:
    """int32 index of the maximum along ``axis`` (of the flattened tile if None); the first
    on ties; NaN counts as the maximum. Example: ``best = tl.argmax(scores, axis=1)``."""
    return _reduce("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False) -> Tile:
    """int32 index of the minimum along ``axis``; the first on ties; NaN counts as the minimum."""
    return _reduce("argmin", x, axis, keepdims)


def _scan(name, x, axis, dtype):
    t = as_tile(x)
    if t.ndim == 0:
        raise located(TileShapeError(f"{name} of a 0-d tile"))
    acc, result = _accumulator(t, dtype)
    out = bind1(PRIMITIVES[name], [astype(t, acc)], name, axis=axis_index(axis, t.ndim, name))
    return astype(out, result)


def cumsum(x, axis=0, dtype=None) -> Tile:
    """Inclusive prefix sum along ``axis``, accumulating like :func:`sum`: ``tl.cumsum(x, axis=1)``."""
    return _scan("cumsum", x, axis, dtype)


def cumprod(x, axis=0, dtype=None) -> Tile:
    """Inclusive prefix product along ``axis``, accumulating like :func:`sum`."""
    return _scan("cumprod", x, axis, dtype)


def histogram(x, num_bins: int, mask=None) -> Tile:
    """int32 counts of the values of the integer tile ``x`` in ``[0, num_bins)``: a tile of
    shape ``(num_bins,)``. Values outside the range, and elements where ``mask`` is False,
    are not counted (a load at an array's edge pads with ``padding``: pass ``padding=-1``
    to leave the padding out). One block counts in shared memory; add the blocks' tiles
    with :func:`atomic_add`::

        t = tl.load(x, index=(i,), shape=(4096,), padding=-1)
        tl.atomic_add(hist, tl.arange(0, 256), tl.histogram(t, 256))
    """
    t = as_tile(x)
    if not t.dtype.is_int:
        raise located(TileTypeError(f"histogram: values must be an integer tile, got {t.var.type}"))
    if isinstance(num_bins, (bool, np.bool_)) or not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise located(TileValueError(f"histogram: num_bins must be a positive int (a constant), got {num_bins!r}"))
    num_bins = int(num_bins)
    inputs = [t.var] if mask is None else [t.var, full_shape(_bool_mask(mask, "histogram"), t.shape)]
    return bind1(PRIMITIVES["histogram"], inputs, "histogram", num_bins=num_bins, masked=mask is not None)


# ------------------------------------------------------------------ assertions


def static_assert(cond, message: str = "") -> None:
    """Check a condition on constants while the kernel is traced (shapes, ``tl.Constant``
    values): a ``TileValueError`` at this line when it is false, before anything compiles.
    Example: ``tl.static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16")``."""
    if isinstance(cond, Tile):
        raise located(
            TileTypeError("static_assert takes a Python value (a constant); check a tile with tl.device_assert")
        )
    if not cond:
        raise located(TileValueError(f"static_assert failed{': ' + message if message else ''}"))


def device_assert(cond, message: str = "") -> None:
    """Check a condition on the values while the kernel runs, in
    :ref:`debug mode <debug-mode>` (``debug=True`` or ``TILELANG_CHECKS=1``) on every
    backend: where any element of ``cond`` (a bool tile or scalar) is False, the launch
    raises a ``TileCheckError`` at this line with ``message``. Outside debug mode it is
    not compiled (as Triton's under ``TRITON_DEBUG``), so it costs nothing. Example::

        tl.device_assert((idx >= 0) & (idx < n), "token id out of range")
    """
    c = as_tile(cond)
    if not c.dtype.is_bool:
        raise located(TileTypeError(f"device_assert: the condition must be a bool tile, got {c.type}"))
    if not isinstance(message, str):
        raise located(TileTypeError(f"device_assert: the message is a str, got {type(message).__name__}"))
    current_block("device_assert")  # (outside a kernel: named as the user wrote it)
    if checked():
        bind(P.device_assert, [c], "device_assert", message=message)


def device_print(prefix: str, *args, hex: bool = False) -> None:
    """Print the elements of tiles (or scalars) while the kernel runs, one line each::

        block (0, 0, 0) x idx (3): 1.5

    the block's ids, ``prefix``, the element's index and its value (floats with 9
    significant digits, 17 for float64; bool as 1 or 0; with ``hex=True`` the bits of its
    dtype, ``0x3fc00000``); with several ``args``, each is
    printed in turn, its ``prefix`` followed by ``(operand k)``; with none, one line per
    block. Every backend prints the same lines; the interpreter in order, the CPU backend
    and the GPU in the order their threads run (on the GPU they appear when the device next
    synchronizes, e.g. at a copy to the host). Example::

        tl.device_print("row max", tl.max(t, axis=1))
    """
    if not isinstance(prefix, str):
        raise located(TileTypeError(f"device_print: the prefix is a str, got {type(prefix).__name__}"))
    if not isinstance(hex, bool):
        raise located(TileTypeError(f"device_print: hex is True or False, got {hex!r}"))
    current_block("device_print")
    if not args:
        bind(P.device_print, [], "device_print", prefix=prefix)
    for k, x in enumerate(args):
        label = f"{prefix} (operand {k})" if len(args) > 1 else prefix
        bind(P.device_print, [as_tile(x)], "device_print", prefix=label, **({"hex": True} if hex else {}))


# --------------------------------------------------------------------- dot


def dot(a, b, acc=None, precision="ieee") -> Tile:
    """Matrix product of 2-d tiles ``(M,K) @ (K,N)``, plus ``acc`` if given (also ``a @ b``).

    16- and 8-bit float operands accumulate in float32, narrow ints in int32; the result has
    the accumulator's dtype. float16/bfloat16 tiles of at least 16 x 16 (``a``) and 16 x 8
    (``b``) run on tensor cores. float8 ones (either format, mixed too) run on Hopper's
    float8 tensor cores where ``b`` is given transposed (``x @ w.T``: both operands K-major,
    wgmma's rule for 8-bit operands), ``a`` is at least 64 x 32 and each operand holds four
    elements a thread or more; elsewhere on the float16 ones, as the float16 values they are
    exactly (``tl.explain``'s ``layouts`` stage says which).
    float32 operands multiply exactly (``precision="ieee"``), or with ``precision="tf32"``
    rounded to TF32 first (10 mantissa bits, to nearest, ties away from zero, as
    ``cvt.rna.tf32.f32``) and multiplied on tensor cores where the tiles are at least 16 x 8
    (``a``) and 8 x 8 (``b``), the products summed in float32. Example::

        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, tl.cdiv(K, BK)):
            acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    """
    if precision not in ("ieee", "tf32"):
        raise located(TileValueError(f'dot: precision is "ieee" or "tf32", got {precision!r}'))
    xa, xb = as_atom(a), as_atom(b)  # promote the dtypes, but do not broadcast the shapes
    d, weak = _dt.promote(xa.type.dtype, xa.type.weak, xb.type.dtype, xb.type.weak)
    if xa.type.dtype.is_float8 and xb.type.dtype.is_float8:  # (as they are: passes/widen_float8_dots.py)
        ta, tb = xa, xb
    else:
        ta, tb = converted(xa, d, weak), converted(xb, d, weak)
    if ta.type.weak:
        raise located(TileTypeError("dot needs tiles, not scalars"))
    out = P.dot_result_dtype(ta.type.dtype)
    if ta.type.ndim != 2 or tb.type.ndim != 2:
        raise located(TileShapeError(f"dot needs 2-d tiles, got {ta.type} and {tb.type}"))
    if precision == "tf32" and ta.type.dtype is not _dt.float32:
        raise located(TileTypeError(f'dot: precision="tf32" rounds float32 operands, got {ta.type.dtype.name} ones'))
    if acc is None:
        acc = zeros((ta.type.shape[0], tb.type.shape[1]), out)
    return bind1(P.dot, [ta, tb, as_tile(acc)], "dot", **({"precision": precision} if precision == "tf32" else {}))


# ------------------------------------------------------- calls a signature does not take


def _signature_checked(fn):
    """``fn``, with a call its signature does not take (``tl.sqrt(a, b)``, ``tl.load(x, idx=i)``)
    a TileTypeError at the user's line, showing the signature (Python's TypeError named ``fn``)."""
    signature = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as bad:
                raise located(TileTypeError(f"tl.{fn.__name__}{signature}: {bad}")) from None
            raise

    return call


for _name in set(__all__) - {"cdiv"}:  # (cdiv checks its own: it runs at every launch that computes a grid)
    if isinstance(globals()[_name], types.FunctionType):
        globals()[_name] = _signature_checked(globals()[_name])
del _name
