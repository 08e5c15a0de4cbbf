"""Tracing: tracer objects that record equations into the block being built.

While a kernel is traced, tiles are :class:`Tile` objects and array arguments are
:class:`Array` objects. Every operation goes through :func:`bind`, which checks the
primitive's type rule, records an equation with the user's source location and returns
tracers for the results.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import dtypes
from .._ir.core import ArrayType, Block, Eqn, Literal, TileType, Var
from ..errors import (
    TileAttributeError,
    TileError,
    TileOutsideKernelError,
    TileSyntaxError,
    TileTypeError,
    TileValueError,
    user_location,
)


class _State(threading.local):
    blocks: list | None = None
    defined: list | None = None  # per active block: the variables defined in it
    doubles: dict | None = None  # a runtime Python float's weak float32 view -> its float64 parameter
    checked: bool = False  # the kernel is traced for debug mode (runtime_checks.add_checks)


_state = _State()


class TraceScope:
    """Collects equations into ``block`` while active; scopes nest for loop bodies."""

    def __init__(self, block: Block, checked: bool = False):
        self.block, self.checked = block, checked

    def __enter__(self):
        if _state.blocks is None:
            _state.blocks, _state.defined, _state.doubles, _state.checked = [], [], {}, self.checked
        _state.blocks.append(self.block)
        _state.defined.append(set(self.block.params))
        return self.block

    def __exit__(self, *exc):
        _state.blocks.pop()
        _state.defined.pop()
        if not _state.blocks:
            _state.blocks = _state.defined = _state.doubles = None


def tracing() -> bool:
    """Whether a kernel is being traced (on this thread)."""
    return bool(_state.blocks)


def checked() -> bool:
    """Whether the kernel being traced is for debug mode, which checks its index arithmetic."""
    return bool(_state.blocks) and _state.checked


def current_block(op_name: str | None = None) -> Block:
    if not _state.blocks:
        what = f"tl.{op_name}" if op_name else "tile operations"
        raise TileOutsideKernelError(
            f"{what} can only be called while a kernel is traced; did you forget @tl.tile_kernel?",
            user_location(),
        )
    return _state.blocks[-1]


def check_in_scope(atom) -> None:
    """A tile made in a finished loop body (kept in a list or dict) cannot be used outside it."""
    if isinstance(atom, Var) and not any(atom in s for s in _state.defined or ()):
        raise located(
            TileSyntaxError(
                "this tile was made inside a tl.range loop body (or another trace) and escaped it, e.g. through "
                "a list or dict; to use a value after the loop, assign its name before the loop and rebind it"
            )
        )


def located(err: TileError) -> TileError:
    if err.loc is None:
        err.loc = user_location()
    return err


def bind(prim, inputs, op_name=None, **params):
    """Record ``prim`` applied to ``inputs`` (tracers or atoms); returns result tracers."""
    block = current_block(op_name or prim.name)
    atoms = [x.var if isinstance(x, (Tile, Array)) else x for x in inputs]
    for a in atoms:
        check_in_scope(a)
    try:
        out_types = prim.rule("type")(*(a.type for a in atoms), **params)
    except TileError as err:
        raise located(err) from None
    outs = [Var(t) for t in out_types]
    _state.defined[-1].update(outs)
    block.eqns.append(Eqn(prim, tuple(atoms), tuple(outs), params, user_location()))
    return [Tile(v) for v in outs]


def bind1(prim, inputs, op_name=None, **params):
    return bind(prim, inputs, op_name, **params)[0]


# ---------------------------------------------------------------------- atoms


def runtime_float(param: Var) -> Tile:
    """What the kernel sees of a runtime Python float: a weak float32 scalar (docs/dtypes.md),
    which its float64 parameter (``param``) keeps the double of: converted to the dtype it
    meets, it is rounded once from the double (``double_of``), as a Python float literal is."""
    from .._ir.primitives import convert

    view = bind1(convert, [param], "astype", dtype=dtypes.float32, weak=True)
    _state.doubles[view.var] = param
    return view


def double_of(atom) -> Var | None:
    """The float64 parameter behind a runtime Python float's view (``runtime_float``), or None."""
    return _state.doubles.get(atom) if _state.doubles and isinstance(atom, Var) else None


def literal(value, dtype=None) -> Literal:
    """A scalar constant; without ``dtype`` it is weakly typed (a Python scalar)."""
    weak = dtype is None and not isinstance(value, np.generic)
    try:
        d = dtypes.scalar_dtype(value) if dtype is None else dtypes.dtype(dtype)
    except TileTypeError as err:  # (2**64: at the user's line)
        raise located(err) from None
    if d.is_int and not isinstance(value, (np.generic, bool)) and isinstance(value, int):
        info = np.iinfo(d.np)
        if not info.min <= value <= info.max:
            raise located(TileTypeError(f"Python int {value} does not fit in {d.name}"))
    # A weak Python float keeps double precision until it is converted to the dtype it meets,
    # so that ``x_f64 * 0.1`` multiplies by 0.1 (not by float32(0.1)) and ``x_f64 * 1e300`` is finite.
    stored = dtypes.float64 if weak and d.is_float else d
    with np.errstate(all="ignore"):
        array = np.asarray(value)
        if d.is_int and array.dtype.kind not in "biu":  # a float: as at run time (truncated; NaN, out of range: 0)
            from .._ir.primitives import convert

            return Literal(convert.rule("interpret")(None, array, dtype=d)[0][()], TileType((), d, weak))
        return Literal(stored.cast(array)[()], TileType((), d, weak))


def as_atom(x, what="operand"):
    """A tracer's var, or a literal for a Python/NumPy scalar."""
    if isinstance(x, Tile):
        return x.var
    if isinstance(x, (Var, Literal)):
        return x
    if isinstance(x, (bool, int, float, np.generic)):
        return literal(x)
    if isinstance(x, Unbound):
        raise located(TileSyntaxError(x.message))
    current_block()  # outside a kernel, the mistake is the missing @tl.tile_kernel, not the operand
    if isinstance(x, Array):
        raise located(TileTypeError(f"{what}: an array argument is not a tile; load a tile from it with tl.load"))
    raise located(TileTypeError(f"{what} of type {type(x).__name__} is not a tile or a scalar"))


def static_int(x, what: str) -> int:
    """A compile-time integer (shapes, axes); a traced value here is a user error."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, Tile):
        raise located(
            TileValueError(f"{what} must be a compile-time constant, got a runtime value; declare it tl.Constant")
        )
    raise located(TileTypeError(f"{what} must be an int, got {type(x).__name__}"))


def static_shape(shape, what="shape") -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer, Tile)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise located(TileTypeError(f"{what} must be a tuple of ints, got {type(shape).__name__}"))
    out = tuple(static_int(s, what) for s in shape)
    if any(s <= 0 for s in out):
        raise located(TileValueError(f"{what} {list(out)}: tile dimensions must be positive"))
    return out


class Unbound:
    """Stands for a variable that has no value at this point of a tl.range loop."""

    def __init__(self, message):
        self.message = message

    def __getattr__(self, name):
        raise located(TileSyntaxError(self.message))

    def _fail(self, *args, **kwargs):
        raise located(TileSyntaxError(self.message))

    __hash__ = object.__hash__


# Operators are looked up on the type, not through __getattr__: `t = t + 1.0` with `t` unbound.
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul"):
    setattr(Unbound, f"__{_op}__", Unbound._fail)
    setattr(Unbound, f"__r{_op}__", Unbound._fail)
for _op in ("eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "invert", "abs", "bool", "iter", "len", "getitem",
            "setitem", "call", "index", "int", "float"):  # fmt: skip
    setattr(Unbound, f"__{_op}__", Unbound._fail)


# --------------------------------------------------------------------- tracers


class Tile:
    """A tile while a kernel is traced: a static shape, a dtype and a recorded value.

    Supports Python operators (with NumPy broadcasting and tilelang's promotion rules),
    ``.shape``, ``.dtype``, ``.astype(dtype)``, ``.T`` and ``t[None, :]`` to add axes.
    """

    __slots__ = ("var",)
    __hash__ = object.__hash__

    def __init__(self, var: Var):
        self.var = var

    @property
    def type(self) -> TileType:
        return self.var.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.var.type.shape

    @property
    def dtype(self):
        return self.var.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"Tile({self.type})"

    def __bool__(self):
        raise located(
            TileSyntaxError(
                "a tile has no Python truth value while tracing: `if`, `while`, `and`, `or` and `not` "
                "on tiles cannot be traced; select elementwise with tl.where(cond, a, b) (or, to decide "
                "while tracing, make the value a tl.Constant parameter)"
            )
        )

    def __iter__(self):
        raise located(TileSyntaxError("cannot iterate over a tile; use tl.range for loops"))

    def _not_static(self, *args):
        raise located(
            TileValueError(
                "a traced value is used where a Python value is needed (a shape, a range(), an int(), a math "
                "function: tl has its own, tl.sqrt); make it a tl.Constant parameter, or use tl.range for a "
                "runtime loop"
            )
        )

    __index__ = __int__ = __float__ = __complex__ = _not_static

    def __len__(self):
        if not self.shape:
            raise located(TileTypeError("len() of a 0-d tile"))
        return self.shape[0]

    def __setitem__(self, key, value):
        raise located(TileSyntaxError("tiles are immutable values; build a new tile with tl.where"))

    def __getattr__(self, name):  # (only for what a tile does not have)
        if name.startswith("__"):
            raise AttributeError(name)
        import tilelang

        if name in _TILE_INSTEAD:
            hint = _TILE_INSTEAD[name]
        elif name in tilelang.__all__:
            hint = f"use tl.{name}(t, ...)"
        else:
            hint = "a tile has .shape, .dtype, .ndim, .astype(), .reshape() and .T; operations are tl functions"
        raise located(TileAttributeError(f"a tile has no attribute `{name}`; {hint}"))

    def __divmod__(self, other):
        raise located(TileTypeError("divmod() does not take tiles; write `a // b, a % b`"))

    __rdivmod__ = __divmod__

    def __round__(self, ndigits=None):
        raise located(TileTypeError("round() does not take tiles; use tl.floor(x + 0.5) (halves round up)"))

    # Operators and methods are attached by tilelang.language, next to the ops they call.


_TILE_INSTEAD = {
    "mean": "use tl.sum(t, axis) / n", "size": "use math.prod(t.shape)", "to": "use .astype(dtype)",
    "flatten": "use t.reshape((math.prod(t.shape),))", "item": "a tile's value exists only when the kernel runs",
    "numpy": "a tile's value exists only when the kernel runs", "any": "use tl.max(t.astype(tl.int32)) != 0",
    "all": "use tl.min(t.astype(tl.int32)) != 0", "clamp": "use tl.clip(t, lo, hi)", "view": "use .reshape()",
}  # fmt: skip


class Array:
    """An array argument while a kernel is traced. ``x.shape[d]`` is a runtime int64 scalar."""

    __slots__ = ("var",)

    def __init__(self, var: Var):
        self.var = var

    @property
    def type(self) -> ArrayType:
        return self.var.type

    @property
    def dtype(self):
        return self.var.type.dtype

    @property
    def ndim(self) -> int:
        return self.var.type.ndim

    @property
    def shape(self) -> tuple:
        from .._ir import primitives as P

        return tuple(bind1(P.array_dim, [self], "shape", axis=d) for d in range(self.ndim))

    def __repr__(self):
        return f"Array({self.type})"

    def __getitem__(self, key):
        raise located(TileSyntaxError("arrays are not indexed directly; read them with tl.load or tl.gather"))

    def __setitem__(self, key, value):
        raise located(TileSyntaxError("arrays are not assigned directly; write them with tl.store or tl.scatter"))

    def __bool__(self):
        raise located(
            TileSyntaxError(
                "an array argument has no truth value while tracing (`if x:` tests neither its size nor its "
                "contents); decide with a tl.Constant, or select elementwise with tl.where"
            )
        )

    def __len__(self):
        raise located(TileTypeError("len() of an array argument: its size is a runtime value; use x.shape[0]"))

    def __setattr__(self, name, value):
        if name != "var":
            raise located(
                TileAttributeError(f"an array argument's attributes cannot be set (`{name}`); write it with tl.store")
            )
        object.__setattr__(self, name, value)

    def __getattr__(self, name):  # (only for what an array argument does not have)
        if name.startswith("__"):
            raise AttributeError(name)
        raise located(
            TileAttributeError(
                f"an array argument has no attribute `{name}` (it has .shape, .dtype and .ndim); "
                "load a tile with tl.load to compute on it"
            )
        )


def _array_operator(symbol):
    def fail(self, *other):
        raise located(TileTypeError(f"`{symbol}` on an array argument: arrays are not tiles; load a tile with tl.load"))

    return fail


# `x + 1` on an array would be Python's TypeError from deep inside the trace.
_BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**", "and": "&",
           "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>", "matmul": "@"}  # fmt: skip
_ONE_WAY = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "neg": "-", "pos": "+", "invert": "~", "abs": "abs()"}
for _op, _symbol in _BINARY.items():
    setattr(Array, f"__{_op}__", _array_operator(_symbol))
    setattr(Array, f"__r{_op}__", _array_operator(_symbol))
for _op, _symbol in _ONE_WAY.items():  # (comparisons reflect into each other)
    setattr(Array, f"__{_op}__", _array_operator(_symbol))


def _array_equality(symbol):
    """``x == 0.0`` on an array is a forgotten tl.load (Python's answer, False, would pass
    silently); arrays compare with each other, and with anything else, by identity."""
    fail = _array_operator(symbol)

    def compare(self, other):
        if isinstance(other, (bool, int, float, complex, np.generic, np.ndarray, Tile)):
            fail(self)
        return NotImplemented

    return compare


Array.__eq__, Array.__ne__, Array.__hash__ = _array_equality("=="), _array_equality("!="), object.__hash__
