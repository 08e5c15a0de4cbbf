"""``tl.reduce`` and ``tl.associative_scan``, reductions and scans by a combine function, and
``tl.sort``: operations along an axis of one tile or a tuple of tiles of one shape.

The combine function is traced once, on 0-d tiles of the inputs' dtypes, into a
:class:`~tilelang._ir.core.Combine` block; it may use elementwise operations only (no
memory, no reductions, no tiles made outside it), so every backend can apply it to pairs
of element groups, in registers on the GPU.
"""

from __future__ import annotations

import inspect

import numpy as np

from .._ir import primitives as P
from .._ir.core import PRIMITIVES, Block, Combine, TileType, Var
from ..errors import TileShapeError, TileTypeError, TileValueError
from .coercion import as_tile, axis_index, broadcast_shapes, full_shape, weak_as
from .tracing import Tile, TraceScope, as_atom, bind, bind1, located

_SCALAR_OPS = set(P.ELEMENTWISE) | {"full"}


def _inputs(input, op) -> list:
    """The tiles of ``input`` (one tile or a tuple), broadcast to one shape."""
    many = isinstance(input, (tuple, list))
    tiles = [as_tile(x) for x in (input if many else [input])]
    if not tiles:
        raise located(TileValueError(f"{op}: no input tiles"))
    shape = broadcast_shapes(*(t.shape for t in tiles))
    if shape == ():
        raise located(TileShapeError(f"{op} of a 0-d tile"))
    return [full_shape(t.var, shape) for t in tiles], many


def _result(out, dtype, i, op):
    """The combine function's ``i``-th result as an atom of ``dtype`` (a weak scalar converted,
    as a loop-carried value's: a float into an integer is refused, not truncated)."""
    atom = weak_as(as_atom(out, f"{op}: the combine function's result {i}"), dtype, op)
    if atom.type.shape != () or atom.type.dtype is not dtype:
        raise located(
            TileTypeError(
                f"{op}: the combine function's result {i} is {atom.type.strong()}, its input {i} is {dtype.short}[]; "
                f"a combine function returns one scalar of each input's dtype (convert with .astype(tl.{dtype.name}))"
            )
        )
    return atom


def _traced(fn, dtypes_, op) -> Combine:
    """``fn`` traced on two groups of 0-d tiles of ``dtypes_`` (left, then right)."""
    params = [Var(TileType((), d), hint=f"{side}{i}") for side in "ab" for i, d in enumerate(dtypes_)]
    try:
        inspect.signature(fn).bind(*params)
    except TypeError:
        raise located(
            TileValueError(
                f"{op}: the combine function must take {len(params)} scalars, the left operand's {len(dtypes_)} then "
                f"the right's (one per input tile), as f({', '.join(f'a{i}' for i in range(len(dtypes_)))}, "
                f"{', '.join(f'b{i}' for i in range(len(dtypes_)))})"
            )
        ) from None
    except ValueError:  # (no signature to read: a builtin; calling it says what is wrong)
        pass
    block = Block(params)
    with TraceScope(block):
        out = fn(*(Tile(p) for p in params))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        defined = set(params)
        for eqn in block.eqns:
            outside = [a for a in eqn.inputs if isinstance(a, Var) and a not in defined]
            if eqn.prim.name not in _SCALAR_OPS or outside:
                what = f"`{eqn.prim.name}`" if eqn.prim.name not in _SCALAR_OPS else "a tile made outside it"
                err = TileValueError(f"{op}: a combine function may use only elementwise operations on its arguments "
                                     f"and constants; it uses {what}")  # fmt: skip
                err.loc = eqn.loc
                raise err
            defined.update(eqn.outputs)
        if any(isinstance(o, Tile) and o.var not in defined for o in outs):
            raise located(TileValueError(f"{op}: the combine function returns a tile made outside it"))
        if len(outs) != len(dtypes_):
            raise located(
                TileValueError(f"{op}: the combine function returned {len(outs)} values for {len(dtypes_)} input tiles")
            )
        block.results = [_result(o, d, i, op) for i, (o, d) in enumerate(zip(outs, dtypes_))]
    return Combine(block, _commutes(block))


def reduce(input, axis, combine_fn, keepdims=False):
    """Reduce ``input`` (a tile, or a tuple of tiles broadcast to one shape) along ``axis`` (all
    axes if None) with ``combine_fn``, which takes two groups of scalars, the left
    operand's then the right's, and returns one (one scalar per input tile, of its dtype).
    It must be associative; it need not commute (elements combine in order). Returns a tile,
    or a tuple for a tuple input. Example, the maximum and its last index::

        def last_max(a, i, b, j):
            right = b >= a
            return tl.where(right, b, a), tl.where(right, j, i)

        m, at = tl.reduce((x, tl.arange(0, N)), 0, last_max)
    """
    xs, many = _inputs(input, "reduce")
    combine = _traced(combine_fn, [x.type.dtype for x in xs], "reduce")
    ndim = xs[0].type.ndim
    if axis is None:
        flat = [bind1(P.reshape, [x], "reduce", shape=(xs[0].type.size,)).var for x in xs]
        outs = bind(PRIMITIVES["reduce"], flat, "reduce", axis=0, combine=combine)
        shape = (1,) * ndim if keepdims else None
    else:
        ax = axis_index(axis, ndim, "reduce")
        outs = bind(PRIMITIVES["reduce"], xs, "reduce", axis=ax, combine=combine)
        shape = outs[0].shape[:ax] + (1,) + outs[0].shape[ax:] if keepdims else None
    if shape is not None:
        outs = [bind1(P.reshape, [o], "reduce", shape=shape) for o in outs]
    return tuple(outs) if many else outs[0]


def associative_scan(input, axis, combine_fn, reverse=False):
    """Inclusive scan of ``input`` (a tile, or a tuple of tiles broadcast to one shape) along
    ``axis`` with ``combine_fn`` (as :func:`reduce`'s: associative, not necessarily
    commutative): element ``i`` is ``x[0] . x[1] . ... . x[i]``; with ``reverse`` the scan of
    the flipped axis, flipped back: ``x[n-1] . ... . x[i]`` (as ``jax.lax.associative_scan``).
    Example, the linear recurrence ``h[t] = a[t] * h[t-1] + b[t]`` (``reverse``: ``h[t] =
    a[t] * h[t+1] + b[t]``)::

        def step(a1, b1, a2, b2):  # b1 applied first, then (a2, b2)
            return a1 * a2, b1 * a2 + b2

        _, h = tl.associative_scan((a, b), 0, step)
    """
    xs, many = _inputs(input, "associative_scan")
    combine = _traced(combine_fn, [x.type.dtype for x in xs], "associative_scan")
    ax = axis_index(axis, xs[0].type.ndim, "associative_scan")
    outs = bind(PRIMITIVES["associative_scan"], xs, "associative_scan", axis=ax, combine=combine, reverse=bool(reverse))
    return tuple(outs) if many else outs[0]


def sort(input, axis=-1, descending=False):
    """Sort ``input`` along ``axis``: a tile, or a tuple of tiles broadcast to one shape, sorted
    by the first (the others move with it). Stable: equal keys keep their order (so the
    result is one permutation on every backend); NaN sorts as the largest value (last, or
    first when ``descending``). Returns a tile, or a tuple for a tuple input. Example, the
    top 8 scores of each row of a (16, 64) tile and where they were::

        scores, at = tl.sort((x, tl.arange(0, 64)), axis=1, descending=True)
        best = tl.where(tl.arange(0, 64)[None, :] < 8, scores, 0.0)
    """
    xs, many = _inputs(input, "sort")
    ax = axis_index(axis, xs[0].type.ndim, "sort")
    outs = bind(PRIMITIVES["sort"], xs, "sort", axis=ax, descending=bool(descending))
    return tuple(outs) if many else outs[0]


def topk(input, k, axis=-1, largest=True):
    """The ``k`` largest elements along ``axis`` (``largest=False``: the smallest), the largest
    (smallest) first, as ``torch.topk``: :func:`sort` cut to its first ``k``
    (``tl.sort(input, axis, descending=largest)[..., :k]`` on the last axis). Ties keep their
    order (the earlier element first); NaN counts as the largest. A tuple input is ranked by
    its first tile, the others moving along: with an ``arange`` they give the indices.
    Example, each token's 2 best of 64 experts and their ids::

        weights, experts = tl.topk((probs, tl.arange(0, 64)[None, :]), 2, axis=1)
    """
    xs, many = _inputs(input, "topk")
    ax = axis_index(axis, xs[0].type.ndim, "topk")
    n = xs[0].type.shape[ax]
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise located(TileTypeError(f"topk: k must be an int (a constant), got {k!r}"))
    if not 1 <= k <= n:
        raise located(TileValueError(f"topk: k must be an int from 1 to the axis's {n}, got {k}"))
    k = int(k)
    ranked = sort(tuple(xs), ax, descending=largest)
    cut = tuple(slice(None, k) if d == ax else slice(None) for d in range(xs[0].type.ndim))
    tops = tuple(t[cut] for t in ranked)
    return tops if many else tops[0]


_COMMUTING = {"add", "mul", "maximum", "minimum", "and", "or", "xor", "eq", "ne"}


def _commutes(block: Block) -> bool:
    """Whether ``block``'s results are the same expressions with its two groups of parameters
    swapped, up to the order of the operands of commuting operations (``a + b``,
    ``tl.maximum(a, b)``, an online softmax's ``(max, s1*exp(m1-m) + s2*exp(m2-m))``).
    Expressions are numbered as they are first seen (hash-consing), in one table for both
    orders, so equal expressions get equal numbers and the check stays linear."""
    n, numbers = len(block.params) // 2, {}

    def number(key):
        return numbers.setdefault(key, len(numbers))

    def forms(swapped):
        form = {p: number(("arg", (i + n) % (2 * n) if swapped else i)) for i, p in enumerate(block.params)}

        def of(a):
            return form[a] if isinstance(a, Var) else number(("literal", repr(a.value), str(a.type)))

        for eqn in block.eqns:
            args = [of(a) for a in eqn.inputs]
            args = sorted(args) if eqn.prim.name in _COMMUTING else args
            form[eqn.outputs[0]] = number((eqn.prim.name, repr(sorted(eqn.params.items())), tuple(args)))
        return [of(r) for r in block.results]

    return forms(False) == forms(True)
