"""Operand coercion for the tile language: promotion, broadcasting and static arguments.

What every operation in ``tilelang.language`` does to its arguments before it records a
primitive: Python scalars become weak literals, operands promote to one dtype
(:mod:`tilelang.dtypes`) and broadcast to one shape (0-d operands stay scalars).
"""

from __future__ import annotations

import builtins

from .. import dtypes as _dt
from .._ir import primitives as P
from .._ir.core import PRIMITIVES, Literal, TileType
from ..dtypes import float32
from ..errors import TileError, TileShapeError, TileValueError
from .tracing import Tile, as_atom, bind1, double_of, literal, located, static_int


def broadcast_shapes(*shapes):
    ndim = builtins.max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (ndim - len(s)) + tuple(s) for s in shapes]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            text = " with ".join(f"[{','.join(map(str, s))}]" for s in shapes)
            raise located(TileShapeError(f"cannot broadcast shapes {text}"))
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def converted(atom, dtype, weak=False):
    """``atom`` as ``dtype``: literals are converted now, traced values by an equation."""
    if isinstance(atom, Literal):
        value = atom.value.item() if atom.type.weak else atom.value
        lit = literal(value, dtype)
        return Literal(lit.value, TileType((), dtype, weak))
    if atom.type.dtype is dtype:  # (a runtime Python float's float32 uses share its one view)
        return atom
    atom = double_of(atom) or atom  # (a runtime Python float meeting another dtype: rounded once, from its double)
    if atom.type.dtype is dtype:
        return atom
    return bind1(P.convert, [atom], "astype", dtype=dtype, **({"weak": True} if weak else {})).var


def broadcast_atom(atom, shape):
    """``atom`` broadcast to ``shape``; 0-d atoms stay scalars (elementwise ops take them)."""
    t = atom.type
    if t.shape == () or t.shape == shape:
        return atom
    if len(t.shape) < len(shape):
        padded = (1,) * (len(shape) - len(t.shape)) + t.shape
        atom = bind1(P.reshape, [atom], "broadcast", shape=padded).var
    return bind1(P.broadcast, [atom], "broadcast", shape=shape).var


def promoted(*xs, dtype=None, float_only=False):
    """Operands (atoms) promoted to one dtype, each keeping its shape."""
    atoms = [as_atom(x) for x in xs]
    d, weak = atoms[0].type.dtype, atoms[0].type.weak
    for a in atoms[1:]:
        d, weak = _dt.promote(d, weak, a.type.dtype, a.type.weak)
    if dtype is not None:
        d, weak = dtype, False
    if float_only and not d.is_float:
        d = float32
    return [converted(a, d, weak) for a in atoms]


def promoted_operands(*xs, dtype=None, float_only=False):
    """Promote and broadcast operands to one dtype and shape (0-d operands stay scalars)."""
    atoms = promoted(*xs, dtype=dtype, float_only=float_only)
    shape = broadcast_shapes(*(a.type.shape for a in atoms))
    return [broadcast_atom(a, shape) for a in atoms]


def elementwise_op(name, *xs, float_only=False):
    return bind1(PRIMITIVES[name], promoted_operands(*xs, float_only=float_only), name)


def as_tile(x) -> Tile:
    atom = as_atom(x)
    return (
        Tile(atom) if not isinstance(atom, Literal) else bind1(P.full, [atom], "full", shape=(), dtype=atom.type.dtype)
    )


def as_dtype(x):
    """``x`` as a DType; an unsupported one is reported at the kernel's line, not the launch's."""
    try:
        return _dt.dtype(x)
    except TileError as err:
        raise located(err) from None


def axis_index(axis, ndim, op):
    axis = static_int(axis, f"{op} axis")
    if not -ndim <= axis < ndim:
        raise located(TileValueError(f"{op}: axis {axis} is out of range for a {ndim}-d tile"))
    return axis % ndim


def full_shape(atom, shape):
    """Unlike elementwise operands, indices and masks are broadcast even from 0-d."""
    if atom.type.shape == shape:
        return atom
    if isinstance(atom, Literal) or atom.type.shape == ():
        return bind1(P.full, [atom], "broadcast", shape=shape, dtype=atom.type.dtype).var if shape else atom
    return broadcast_atom(atom, shape)


def weak_as(atom, dtype, op):
    """``atom`` as ``dtype`` where it is a weak scalar (a Python number, a runtime float) whose
    kind does not rise above the dtype's (0.5 does not become an int: the caller refuses it):
    a literal converted now, a runtime float from its double."""
    if not atom.type.weak or _dt.CATEGORY[atom.type.dtype.kind] > _dt.CATEGORY[dtype.kind]:
        return atom
    if isinstance(atom, Literal):
        return literal(atom.value.item(), dtype)
    if atom.type.dtype is dtype:
        return atom
    return bind1(P.convert, [double_of(atom) or atom], op, dtype=dtype).var
