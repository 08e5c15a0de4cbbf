"""Shape operations of the tile language: reshape, permute and transpose, indexing (new
axes, static slices and integers: ``t[None, :]``, ``t[2:5]``, ``t[::-1]``), broadcasting,
flips, and pairs joined into (or split from) a last axis of size 2.

Reshapes, new axes and broadcasts of a value move no data where its layout allows;
slices and ``permute`` move elements between threads (through shared memory), flips of
power-of-two axes within a warp by shuffles;
``join`` and ``split`` keep a pair's two elements in one thread's registers, so
``tl.split(tl.join(a, b))`` and a join of two values computed alike move nothing.
"""

from __future__ import annotations

import builtins

import numpy as np

from .._ir import primitives as P
from .._ir.core import PRIMITIVES
from ..errors import TileShapeError, TileSyntaxError, TileTypeError, TileValueError
from .coercion import as_tile, axis_index, broadcast_atom, broadcast_shapes, full_shape, promoted, promoted_operands
from .tracing import Tile, bind, bind1, located, static_int, static_shape


def reshape(x, shape) -> Tile:
    """Row-major reshape to a static shape (one entry may be -1): ``tl.reshape(t, (16, -1))``."""
    t = as_tile(x)
    dims = [static_int(s, "reshape shape") for s in (shape if isinstance(shape, (tuple, list)) else (shape,))]
    if dims.count(-1) > 1:
        raise located(TileValueError(f"reshape: only one -1 is allowed, got {dims}"))
    if dims.count(-1) == 1:
        known = 1
        for d in dims:
            known *= d if d != -1 else 1
        dims[dims.index(-1)] = t.type.size // builtins.max(known, 1)
    shape = static_shape(dims, "reshape shape") if dims else ()
    if shape == t.shape:
        return t
    return bind1(P.reshape, [t], "reshape", shape=shape)


def permute(x, axes) -> Tile:
    """Reorder axes: ``tl.permute(t, (2, 0, 1))``; result axis ``i`` is input axis ``axes[i]``."""
    t = as_tile(x)
    if not isinstance(axes, (tuple, list)):
        raise located(TileTypeError(f"permute: axes must be a tuple of ints, got {type(axes).__name__}"))
    perm = tuple(axis_index(a, t.ndim, "permute") for a in axes)
    if len(perm) != t.ndim or sorted(perm) != list(builtins.range(t.ndim)):
        raise located(TileValueError(f"permute: {list(axes)} is not a permutation of {t.ndim} axes"))
    return t if perm == tuple(builtins.range(t.ndim)) else bind1(P.transpose, [t], "permute", perm=perm)


def transpose(x, *axes) -> Tile:
    """Reverse the axes (``t.T`` for 2-d tiles), or reorder them as :func:`permute` with ``axes``."""
    t = as_tile(x)
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = axes[0]
    return permute(t, axes or tuple(reversed(builtins.range(t.ndim))))


def expand_dims(x, axis) -> Tile:
    """Insert a size-1 axis at ``axis`` (also ``t[None, :]``): ``tl.expand_dims(t, 0)``."""
    t = as_tile(x)
    ax = axis_index(axis, t.ndim + 1, "expand_dims")
    return reshape(t, t.shape[:ax] + (1,) + t.shape[ax:])


def broadcast_to(x, shape) -> Tile:
    """Broadcast ``x`` to ``shape`` with NumPy's rules: ``tl.broadcast_to(row[None, :], (64, 128))``."""
    t = as_tile(x)
    shape = static_shape(shape, "broadcast_to shape")
    if broadcast_shapes(t.shape, shape) != shape:
        raise located(TileShapeError(f"cannot broadcast {t.type} to shape {list(shape)}"))
    if t.shape == ():
        return bind1(P.full, [t], "broadcast_to", shape=shape, dtype=t.dtype)
    return Tile(broadcast_atom(t.var, shape))


def _getitem(t: Tile, key):
    """``t[None, :]``, ``t[..., None]``, ``t[2:5]``, ``t[:, ::-1]``, ``t[0]``: new axes, static
    slices (any step) and integers, and one ellipsis. Python's rules (negative indices count
    from the end, slices clip to the axis); an integer drops its axis."""
    key = key if isinstance(key, tuple) else (key,)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise located(TileSyntaxError("only one ... is allowed in a tile index"))
    real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if real > t.ndim:
        raise located(TileShapeError(f"too many indices for a {t.ndim}-d tile"))
    full = []  # the key with the ellipsis (or the missing trailing axes) as full slices
    for k in key:
        full.extend([builtins.slice(None)] * (t.ndim - real) if k is Ellipsis else [k])
    if not any(k is Ellipsis for k in key):  # (not `in`: a tile compares elementwise)
        full.extend([builtins.slice(None)] * (t.ndim - real))
    picks, kept = [], []  # per input axis the range of its elements taken; the result's shape
    for k in full:
        if k is None:
            kept.append(1)
        elif isinstance(k, builtins.slice):
            picks.append(_slice_range(k, t.shape[len(picks)]))
            kept.append(len(picks[-1]))
        else:  # (an integer: its axis dropped)
            picks.append(_index_range(k, t.shape[len(picks)]))
    if any(p != builtins.range(n) for p, n in zip(picks, t.shape)):
        starts, steps = tuple(p.start for p in picks), tuple(p.step if len(p) > 1 else 1 for p in picks)
        t = bind1(PRIMITIVES["slice"], [t], "index", starts=starts, steps=steps, shape=tuple(map(len, picks)))
    return reshape(t, tuple(kept))


def _slice_range(k: builtins.slice, n: int) -> builtins.range:
    start, stop, step = (_static_index(v, "slice bound") for v in (k.start, k.stop, k.step))
    if step == 0:
        raise located(TileValueError("a tile slice's step cannot be 0"))
    taken = builtins.range(*builtins.slice(start, stop, step).indices(n))
    if not taken:
        bounds = ":".join("" if v is None else str(v) for v in (start, stop, *([step] if step is not None else [])))
        raise located(TileShapeError(f"the slice {bounds} of an axis of {n} is empty (tiles have no empty axes)"))
    return taken


def _index_range(k, n: int) -> builtins.range:
    i = _static_index(k, "index")
    if not -n <= i < n:
        raise located(TileShapeError(f"index {i} is out of range for an axis of {n}"))
    return builtins.range(i % n, i % n + 1)


def _static_index(value, what):
    if value is None or isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return None if value is None else int(value)
    if isinstance(value, Tile):
        raise located(
            TileSyntaxError(
                f"a tile's {what} must be a Python int (static): select elements with tl.where, or read them "
                "from memory with tl.load/tl.gather"
            )
        )
    raise located(TileTypeError(f"a tile's {what} must be an int, got {type(value).__name__}"))


def ravel(x) -> Tile:
    """``x`` as one row-major axis: ``tl.ravel(t)`` is ``tl.reshape(t, (-1,))``."""
    return reshape(x, (-1,))


def flip(x, axis=-1) -> Tile:
    """Reverse the order of the elements along ``axis`` (an int or a tuple of ints; None:
    every axis, as ``np.flip``). The default, the last axis, is Triton's. Any length (it is
    ``x[..., ::-1]``). A power-of-two axis held in registers and lanes flips by renaming
    slots and one shuffle; others go through shared memory. Example, each row of a (16, 64)
    tile read right to left::

        backwards = tl.flip(t, axis=1)
    """
    t = as_tile(x)
    if t.ndim == 0:
        raise located(TileShapeError("flip: a 0-d tile has no axis to flip"))
    if axis is None:
        axes = builtins.range(t.ndim)
    else:
        axes = [axis_index(a, t.ndim, "flip") for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    return _getitem(
        t, tuple(builtins.slice(None, None, -1) if d in axes else builtins.slice(None) for d in builtins.range(t.ndim))
    )


def join(a, b) -> Tile:
    """Pair ``a`` and ``b`` along a new last axis of size 2: ``join(a, b)[..., 0]`` is ``a``,
    ``[..., 1]`` is ``b`` (``np.stack([a, b], axis=-1)``). The operands are promoted and
    broadcast as in ``a + b``. Each thread keeps both elements of a pair, so joining moves no
    data. Example, complex numbers as (real, imaginary) pairs, and two bfloat16 tiles
    interleaved in memory (see :func:`interleave`)::

        z = tl.join(re, im)                  # (M, N, 2)
        tl.store(out, z.reshape((M, 2 * N)), index=(i, 0))
    """
    x, y = promoted_operands(a, b)
    shape = broadcast_shapes(x.type.shape, y.type.shape)
    x, y = (full_shape(v, shape or (1,)) for v in (x, y))  # (two scalars: a tile of 2)
    joined = bind1(PRIMITIVES["join"], [x, y], "join")
    return joined if shape else reshape(joined, (2,))


def split(x) -> tuple[Tile, Tile]:
    """The two halves of a last axis of size 2: ``a, b = tl.split(t)`` is ``t[..., 0]`` and
    ``t[..., 1]`` (the inverse of :func:`join`). Example, rotary embedding of interleaved
    pairs (even and odd columns of a (M, D) tile)::

        even, odd = tl.split(t.reshape((M, D // 2, 2)))
        rotated = tl.join(even * cos - odd * sin, even * sin + odd * cos).reshape((M, D))
    """
    t = as_tile(x)
    if t.ndim == 0 or t.shape[-1] != 2:
        raise located(TileShapeError(f"split: the last axis must have size 2, got a tile of shape {list(t.shape)}"))
    first, second = bind(PRIMITIVES["split"], [t], "split")
    return first, second


def cat(a, b, axis=0) -> Tile:
    """``a`` then ``b`` along ``axis`` (``np.concatenate([a, b], axis)``): the other axes
    agree; the dtypes are promoted as in ``a + b``. Unlike Triton's ``tl.cat`` the order is
    kept and any axis goes. The elements move through shared memory. Example, a query's
    rotated and pass-through features side by side::

        q = tl.cat(rotated, q_pass, axis=1)   # (M, R) and (M, D - R): (M, D)
    """
    x, y = promoted(a, b)
    if not x.type.shape or not y.type.shape:
        raise located(TileShapeError("cat: of two tiles with at least one axis (tl.join pairs scalars)"))
    if x.type.ndim != y.type.ndim:
        raise located(TileShapeError(f"cat: tiles of one rank, got {list(x.type.shape)} and {list(y.type.shape)}"))
    ax = axis_index(axis, x.type.ndim, "cat")
    return bind1(PRIMITIVES["cat"], [x, y], "cat", axis=ax)


def interleave(a, b) -> Tile:
    """``a`` and ``b`` alternating along their last axis: ``[a0, b0, a1, b1, ...]``, twice as
    long (``tl.join(a, b)`` with its last two axes merged). Example::

        tl.store(out, tl.interleave(evens, odds), index=(i,))  # evens, odds: (TILE,) each
    """
    j = join(a, b)
    return reshape(j, (*j.shape[:-2], 2 * j.shape[-2])) if j.ndim > 1 else j  # (of two scalars: their join)
