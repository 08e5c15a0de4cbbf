"""Python's operators and NumPy's protocols on tiles (and arrays), in terms of the ops of
:mod:`tilelang.language`: ``a + b`` is ``add``, ``t.T`` a transpose, ``np.float32(2) * t``
NumPy handing the tile to its ufunc, and ``np.exp(t)`` refused where the user wrote it.
Imported by the package."""

from __future__ import annotations

import numpy as np

from ._frontend.coercion import elementwise_op
from ._frontend.shapes import _getitem
from ._frontend.tracing import Array, Tile, located
from .errors import TileTypeError
from .language import __all__, abs, astype, dot, reshape, transpose

# ------------------------------------------------------- Tile operators


def _binop(name, reflected=False):
    if reflected:
        return lambda self, other: elementwise_op(name, other, self, float_only=name in ("div", "pow"))
    return lambda self, other: elementwise_op(name, self, other, float_only=name in ("div", "pow"))


_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "floordiv": "floordiv",
    "mod": "mod", "pow": "pow", "and": "and", "or": "or", "xor": "xor",
    "lshift": "shl", "rshift": "shr",
}  # fmt: skip
for _py, _prim in _OPERATORS.items():
    setattr(Tile, f"__{_py}__", _binop(_prim))
    setattr(Tile, f"__r{_py}__", _binop(_prim, reflected=True))
for _py in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Tile, f"__{_py}__", _binop(_py))


def _neg(self):
    if self.dtype.is_bool:
        raise located(TileTypeError("unary - is not defined for bool tiles; use ~"))
    return elementwise_op("neg", self)


Tile.__neg__ = _neg
Tile.__pos__ = lambda self: self
Tile.__invert__ = lambda self: elementwise_op("invert", self)
Tile.__abs__ = abs
Tile.__matmul__ = lambda self, other: dot(self, other)
Tile.__rmatmul__ = lambda self, other: dot(other, self)
Tile.__getitem__ = _getitem
Tile.astype = astype
Tile.T = property(lambda self: transpose(self))
Tile.reshape = lambda self, *shape: reshape(self, shape[0] if len(shape) == 1 else shape)


# ------------------------------------------------------- NumPy's protocols

# NumPy's scalar operators (`np.float32(2) * t`) hand the tile to these ufuncs: they are the tile's operators.
_UFUNC_OPERATORS = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "floor_divide": "floordiv",
    "remainder": "mod", "power": "pow", "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
    "left_shift": "shl", "right_shift": "shr", "equal": "eq", "not_equal": "ne", "less": "lt",
    "less_equal": "le", "greater": "gt", "greater_equal": "ge",
}  # fmt: skip
# What to write instead of a NumPy function whose tl equivalent has another name (same-named ones: tl.<name>).
_NUMPY_EQUIVALENTS = {
    "absolute": "tl.abs", "fabs": "tl.abs", "amax": "tl.max", "amin": "tl.min", "matmul": "tl.dot",
    "permute_dims": "tl.permute", "isnan": "`x != x` for np.isnan", "square": "`x * x` for np.square",
    "round": "tl.floor(x + 0.5) for np.round", "around": "tl.floor(x + 0.5) for np.around",
}  # fmt: skip


def _numpy_error(x, name=None) -> TileTypeError:
    """The refusal of NumPy function ``name`` (None: NumPy itself wants the values) on a tile or array argument."""
    hint = _NUMPY_EQUIVALENTS.get(name) or (f"tl.{name}" if name in __all__ else None)
    if isinstance(x, Array):
        return TileTypeError(
            f"NumPy functions do not take kernel array arguments; load a tile with tl.load and use {hint or 'tl ops'}"
        )
    if hint:
        return TileTypeError(f"NumPy functions do not take tiles; use {hint}")
    return TileTypeError("NumPy functions do not take tiles: their values exist only when the kernel runs; use tl ops")


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    prim = _UFUNC_OPERATORS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
    if prim is None:
        raise located(_numpy_error(self, ufunc.__name__ if method == "__call__" else None))
    inputs = [x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x for x in inputs]  # a comparison's scalar
    return elementwise_op(prim, *inputs, float_only=prim in ("div", "pow"))


def _array_function(self, func, types, args, kwargs):
    raise located(_numpy_error(self, func.__name__))


def _array(self, dtype=None, copy=None):
    raise located(_numpy_error(self))


for _cls in (Tile, Array):  # np.exp(t), np.sum(t), np.asarray(t) are refused where the user wrote them
    _cls.__array_ufunc__, _cls.__array_function__, _cls.__array__ = _array_ufunc, _array_function, _array
