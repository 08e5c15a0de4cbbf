"""Random tile kernels, as Python source: a Hypothesis strategy for differential testing.

:func:`programs` draws whole kernels: 1-3 input arrays of rank 1-3 whose sizes are not
multiples of the tiles, loads through ``index=`` and ``offset=`` windows with padding, a
random DAG of ops (elementwise math and comparisons, ``where``, ``astype``, broadcasting
of rows and columns, reductions, arg-reductions and scans, also by combine functions,
sorts, shape ops, small dots, gathers, scatters and atomics), optionally a ``tl.range``
loop with loop-carried tiles, over every dtype, and stores into output arrays that sit
inside guard margins. A :class:`Program` is the kernel's source plus ``SPEC``, the
description of its arguments;
:mod:`tilelang.testing.fuzz` writes it to a file, runs it on several backends and
compares. Every value's numeric facts (:mod:`tilelang.testing.values`) keep the programs
to what every backend must compute alike, and say how far float results may differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from .. import dtypes as _dt
from .._ir.primitives import dot_result_dtype
from . import values as V
from .values import INF, Value

DTYPES = [d.name for d in _dt.ALL_DTYPES]
SIZES = [1, 2, 3, 4, 5, 7, 8, 13, 16, 32]
BINARY = ["+", "-", "*", "maximum", "minimum", "<", "==", ">=", "!=", "/", "//", "%", "&", "|", "^", "<<", ">>",
          "umulhi"]  # fmt: skip
UNARY = ["-", "abs", "~", "floor", "ceil"]
REDUCTIONS = ["sum", "max", "min", "argmax", "argmin", "prod"]
# combine functions of tl.reduce / tl.associative_scan whose results are elements of the input
# (the value facts carry over): the ends of the axis (order-sensitive) and the extremes
COMBINE_FUNCTIONS = ["lambda a, b: a", "lambda a, b: b", "tl.maximum", "tl.minimum"]
OPS = [
    "binary",
    "unary",
    "math",
    "where",
    "astype",
    "reduce",
    "scan",
    "combine",
    "shape",
    "dot",
    "load",
    "gather",
    "reload",
    "arange",
    "fma",
]
STATEMENTS = ["scatter", "atomic", "store"]


@dataclass(frozen=True)
class Program:
    """A kernel's source (a function named ``program``) and ``spec``: its grid and arguments."""

    source: str
    spec: dict

    def module_text(self) -> str:
        """A runnable reproducer: the kernel, its SPEC, and a main that compares the backends."""
        return (
            f'"""A random tile program (tilelang.testing.programs). Run: python THIS_FILE [backends]"""\n\n'
            f"import tilelang as tl\n\nSPEC = {self.spec!r}\n\n{self.source}\n\n"
            'if __name__ == "__main__":\n    import sys\n\n    from tilelang.testing.fuzz import main_for_file\n\n'
            "    main_for_file(__file__, sys.argv[1:])\n"
        )


def _padded(shape) -> int:
    return math.prod(1 << (s - 1).bit_length() for s in shape)


def _broadcast(a, b):
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def _reduced(shape, axis, keep):
    """The axes a reduction over ``axis`` (all if None) takes, and its result's shape."""
    axes = range(len(shape)) if axis is None else [axis % len(shape)]
    return axes, tuple(1 if k in axes else s for k, s in enumerate(shape) if keep or k not in axes)


def _tl(d) -> str:
    """Source text of dtype ``d``: ``tl.float16``, ``tl.bool_``."""
    return "tl.bool_" if d.is_bool else f"tl.{d.name}"


def _atomic_dtype(d) -> bool:
    """Whether arrays of ``d`` take atomics: not bool, not float8."""
    return not d.is_bool and not d.is_float8


def _literal(value, d):
    """Source text of a Python literal of value ``value`` for a tile of dtype ``d``."""
    if isinstance(value, float):
        return "float('nan')" if math.isnan(value) else (f"float('{value}')" if math.isinf(value) else repr(value))
    return repr(int(value)) if not d.is_bool else repr(bool(value))


class _Builder:
    """Draws one kernel, line by line, keeping a Value for every tile it has made."""

    def __init__(self, draw, *, grid, threads, ops, cap, max_ops, aligned=False, fast_math=False):
        self.draw, self.grid, self.threads, self.ops, self.cap, self.max_ops = draw, grid, threads, ops, cap, max_ops
        self.fast_math = fast_math  # the kernel's option: its float32 exp, log, sigmoid and `/` are approximate
        # ``aligned``: arrays as aligned as kernels take them (thread_ir.array_aligned) and windows whose last-axis
        # corners are multiples of 16 elements, wide enough for vectors: the kernel with whole groups runs
        self.aligned = aligned
        self.lines, self.indent, self.count = [], 1, 0
        self.pool: list[Value] = []
        self.used = set()
        self.params, self.arrays, self.scalars = [], [], []
        self.stores = []  # {"spec": output array, "shifts": window offsets, "value": what it holds}

    # ------------------------------------------------------------------ plumbing

    def pick(self, items):
        return items[self.draw(st.integers(0, len(items) - 1))]

    def recent(self, pred=lambda v: True):
        """A pool value satisfying ``pred``, the most recent first (so shrinking keeps chains
        short), one no op has used yet if there is one (so little of the program is dead)."""
        found = [v for v in self.pool if pred(v)]
        fresh = [v for v in found if v.name not in self.used]
        found = fresh if fresh and self.draw(st.integers(0, 3)) else found
        if not found:
            return None
        v = found[-1 - self.draw(st.integers(0, len(found) - 1))]
        self.used.add(v.name)
        return v

    def name(self, prefix="v"):
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, text):
        self.lines.append("    " * self.indent + text)

    def define(self, value: Value | None, expr: str) -> Value | None:
        if value is None or _padded(value.shape) > self.cap:
            return None
        self.emit(f"{value.name} = {expr}")
        self.pool.append(value)
        return value

    def array(self, role, dtype, shape, data=None, fill=None):
        name = f"{'x' if role == 'in' else 'out'}{len(self.arrays)}"
        margin = [self.draw(st.integers(0, 2)) for _ in shape]
        view = self.pick(["plain", "plain", "reversed", "strided"])  # of the last axis
        if self.aligned:  # rows of 16-byte multiples, 16 bytes or none before the view's first
            unit = max(16 // dtype.itemsize, 1)
            shape = [*shape[:-1], -(-shape[-1] // unit) * unit]
            margin[-1], view = self.pick([0, unit]), "plain"
        spec = {"name": name, "role": role, "dtype": dtype.name, "shape": list(shape), "data": data, "margin": margin,
                "fill": fill, "err": 0.0, "view": view}  # fmt: skip
        self.arrays.append(spec)
        self.params.append(name)
        return spec

    # ------------------------------------------------------------------ inputs

    def tile_shape(self, rank):
        while True:
            last = self.pick([8, 16, 32] if self.aligned else SIZES)  # (wide: vectors)
            shape = (*(self.pick(SIZES) for _ in range(rank - 1)), last)
            if _padded(shape) <= self.cap:
                return shape

    def input_array(self):
        d = _dt.dtype(self.pick(DTYPES))
        rank = self.draw(st.integers(1, 3))
        tile = self.tile_shape(rank)
        shape = [max(1, self.grid * tile[0] + self.draw(st.integers(-2, 2)))]
        shape += [max(1, t + self.draw(st.integers(-2, 2))) for t in tile[1:]]
        kinds = ["small"] + (["wide"] if d.is_int else ["unit", "special"] if d.is_float else [])
        spec = self.array("in", d, shape, data=self.pick(kinds) if not d.is_bool else "bool")
        return spec, tile

    def data_value(self, spec, shape, name):
        """What a load of ``spec``'s array may hold (padding aside)."""
        d = _dt.dtype(spec["dtype"])
        kind = spec["data"]
        if kind == "bool":
            return Value(name, shape, d, 0, 1)
        if kind == "wide":
            return Value(name, shape, d, *V.int_range(d))
        if kind == "special":
            return Value(name, shape, d, -INF, INF, nan=True)
        if kind == "unit":
            return Value(name, shape, d, -4.0, 4.0)
        lo, hi = (0, 16) if d.kind == "u" else (-8, 8)
        return (
            Value(name, shape, d, float(lo), float(hi), integral=True) if d.is_float else Value(name, shape, d, lo, hi)
        )

    def padding(self, d):
        choices = [0, 1, 7] + ([-1] if d.kind in "if" else []) + ([-INF, math.nan] if d.is_float else [])
        return self.pick(choices) if not d.is_bool else self.pick([0, 1])

    def shift(self):
        """A window's offset from its block's place: a little either way, or now and then far
        outside the array (past int32's range too), where every element is padding."""
        return self.pick([0, -1, 1, -2, 2, 2**31 + 5, -(2**31) - 3, 2**40])

    def load(self, spec=None, tile=None, loop_index=None):
        if spec is None:
            inputs = [a for a in self.arrays if a["role"] == "in"]
            spec = self.pick(inputs)
            tile = self.tile_shape(len(spec["shape"]))
        d = _dt.dtype(spec["dtype"])
        pad = self.padding(d)
        name = self.name()
        value = V.padded(self.data_value(spec, tile, name), pad)
        step = f" + {loop_index} * {tile[0]}" if loop_index else ""
        if loop_index is None and self.draw(st.booleans()):
            where = f"index=(i, {', '.join('0' for _ in tile[1:])})" if len(tile) > 1 else "index=(i,)"
        else:
            shifts = [self.shift() for _ in tile[:-1]] + [self.pick([0, 16, -16]) if self.aligned else self.shift()]
            far = abs(shifts[0]) > 2**20  # a Python int that size does not fit the int32 block index: on its own
            coords = [str(shifts[0]) if far else f"i * {tile[0]}{step} + {shifts[0]}"] + [str(s) for s in shifts[1:]]
            where = f"offset=({', '.join(coords)},)"
        pad_text = f", padding={_literal(pad, d)}" if pad != 0 else ""
        return self.define(value, f"tl.load({spec['name']}, {where}, shape={tile}{pad_text})")

    # ------------------------------------------------------------------ ops

    def operand_for(self, a: Value):
        """A second operand for ``a``: a pool value it broadcasts with (a vector turned into a
        column if that is what fits), or a Python literal (weak: it takes ``a``'s dtype, or
        float32 for a float literal and an integer ``a``). Returns (value, is_literal)."""
        choice = self.draw(st.integers(0, 7))
        if choice <= 1:
            d = a.dtype
            lit = True if d.is_bool else self.pick([0.5, 2.0, -1.5, 3.0, 0.0] if d.is_float else [0, 1, 2, 3, 100, 0.5])
            weak, _ = _dt.promote(d, False, _dt.scalar_dtype(lit), True)
            text = _literal(lit, weak) if choice == 0 else self.scalar(lit)  # a literal or a runtime argument
            return V.constant(text, lit, weak), True
        if choice == 2:  # a NumPy scalar argument: strongly typed
            d = _dt.dtype(self.pick(DTYPES[1:]))
            value = self.pick([1, 3, 7]) if not d.is_float else self.pick([1.5, -0.25, 3.0])
            return V.constant(self.scalar(value, d), value, d), True
        b = self.recent(lambda v: _broadcast(a.shape, v.shape) is not None or
                        (len(v.shape) == 1 and _broadcast(a.shape, v.shape + (1,)) is not None))  # fmt: skip
        if b is None:
            return None, False
        column = len(b.shape) == 1 and _broadcast(a.shape, b.shape + (1,)) is not None
        if column and (_broadcast(a.shape, b.shape) is None or self.draw(st.booleans())):
            b = replace(b, name=f"{b.name}[:, None]", shape=b.shape + (1,))
        return b, False

    def scalar(self, value, d=None) -> str:
        """A new runtime scalar argument: a Python number (weak), or a NumPy scalar of dtype ``d``."""
        name = f"s{len(self.scalars)}"
        self.scalars.append({"name": name, "value": value, "dtype": d.name if d else None})
        self.params.append(name)
        return name

    def op_binary(self):
        a = self.recent()
        b, literal = self.operand_for(a)
        if b is None:
            return None
        if not literal and self.draw(st.booleans()):
            a, b = b, a
        op = self.pick(BINARY)
        d = _dt.promote_strong(a.dtype, b.dtype)
        if d.is_bool and op in ("+", "-", "*", "/", "//", "%"):
            return None
        if op in ("&", "|", "^", "<<", ">>") and d.is_float or op in ("<<", ">>") and d.is_bool:
            return None
        if op == "umulhi" and not d.is_int:
            return None
        if op == "/" and not d.is_float:
            d = _dt.float32
        shape = _broadcast(a.shape, b.shape)
        named = op in ("maximum", "minimum", "umulhi")
        text = f"tl.{op}({a.name}, {b.name})" if named else f"({a.name} {op} {b.name})"
        return self.define(V.binary(op, a, b, d, shape, self.name(), self.fast_math), text)

    def op_fma(self):
        """``tl.fma`` of a float value and two operands for it: bounded as ``a * b + c`` (every
        backend rounds the fused result once, alike)."""
        a = self.recent(lambda v: v.dtype.is_float)
        if a is None:
            return None
        (b, _), (c, _) = self.operand_for(a), self.operand_for(a)
        shape = _broadcast(a.shape, b.shape) if b is not None and c is not None else None
        shape = _broadcast(shape, c.shape) if shape is not None else None
        if shape is None:
            return None
        d, name = _dt.promote_strong(_dt.promote_strong(a.dtype, b.dtype), c.dtype), self.name()
        product = V.binary("*", a, b, d, shape, name)
        out = V.binary("+", product, c, d, shape, name) if product is not None else None
        return self.define(out, f"tl.fma({a.name}, {b.name}, {c.name})") if out is not None else None

    def op_unary(self):
        x = self.recent()
        op = self.pick(UNARY)
        text = {"-": f"(-{x.name})", "~": f"(~{x.name})"}.get(
            op, f"tl.{op}({x.name})" if op != "abs" else f"abs({x.name})"
        )
        return self.define(V.unary(op, x, self.name()), text)

    def op_math(self):
        x = self.recent(lambda v: not v.dtype.is_bool)
        if x is None:
            return None
        fn = self.pick(list(V.MATH))
        arg, text = x, x.name
        if fn in V.SHIFTED:  # keep to the domain: f(abs(x) + 1)
            if not x.dtype.is_float:
                arg, text = V.convert(x, _dt.float32), f"{x.name}.astype(tl.float32)"
            if arg is None or not arg.finite or arg.err:
                return None
            arg = V.binary("+", V.unary("abs", arg, ""), V.constant("1.0", 1.0, arg.dtype), arg.dtype, arg.shape, "")
            text = f"(abs({text}) + 1.0)"
            if arg is None:
                return None
        return self.define(V.math_fn(fn, arg, self.name(), self.fast_math), f"tl.{fn}({text})")

    def op_where(self):
        c = self.recent(lambda v: v.dtype.is_bool)
        x = self.recent(lambda v: _broadcast(v.shape, c.shape) is not None) if c is not None else None
        if x is None:
            return None
        y, _ = self.operand_for(x)
        shape = _broadcast(_broadcast(c.shape, x.shape), y.shape) if y is not None else None
        if shape is None:
            return None
        d = _dt.promote_strong(x.dtype, y.dtype)
        return self.define(V.where(c, x, y, d, shape, self.name()), f"tl.where({c.name}, {x.name}, {y.name})")

    def op_astype(self):
        x = self.recent()
        d = _dt.dtype(self.pick(DTYPES))
        return self.define(V.convert(x, d, self.name()), f"{x.name}.astype({_tl(d)})")

    def _axis(self, x):
        if self.draw(st.integers(0, 3)) == 0 or not x.shape:
            return None
        axis = self.draw(st.integers(0, len(x.shape) - 1))
        return axis - len(x.shape) if self.draw(st.integers(0, 4)) == 0 else axis

    def op_reduce(self):
        x = self.recent(lambda v: v.shape != ())
        if x is None:
            return None
        op, axis, keep = self.pick(REDUCTIONS), self._axis(x), self.draw(st.booleans())
        axes, shape = _reduced(x.shape, axis, keep)
        n = math.prod(x.shape[k] for k in axes)
        args = (f", axis={axis}" if axis is not None else "") + (", keepdims=True" if keep else "")
        return self.define(V.reduce(op, x, n, shape, self.name()), f"tl.{op}({x.name}{args})")

    def op_scan(self):
        x = self.recent(lambda v: v.shape != ())
        if x is None:
            return None
        op, axis = self.pick(["cumsum", "cumprod"]), self.draw(st.integers(0, len(x.shape) - 1))
        return self.define(V.reduce(op, x, x.shape[axis], x.shape, self.name()), f"tl.{op}({x.name}, axis={axis})")

    def op_combine(self):
        x = self.recent(lambda v: v.shape != ())
        if x is None:
            return None
        fn, name, kind = self.pick(COMBINE_FUNCTIONS), self.name(), self.pick(["reduce", "scan", "sort"])
        if kind == "sort":  # (a permutation of the elements: the value facts hold)
            axis, descending = self.draw(st.integers(0, len(x.shape) - 1)), self.draw(st.booleans())
            return self.define(
                replace(x, name=name), f"tl.sort({x.name}, {axis}{', descending=True' if descending else ''})"
            )
        if kind == "reduce":
            axis, keep = self._axis(x), self.draw(st.booleans())
            shape = _reduced(x.shape, axis, keep)[1]
            expr = f"tl.reduce({x.name}, {axis}, {fn}{', keepdims=True' if keep else ''})"
        else:
            axis, reverse, shape = self.draw(st.integers(0, len(x.shape) - 1)), self.draw(st.booleans()), x.shape
            expr = f"tl.associative_scan({x.name}, {axis}, {fn}{', reverse=True' if reverse else ''})"
        return self.define(replace(x, name=name, shape=shape), expr)

    def op_shape(self):
        x = self.recent()
        kind = self.pick(["reshape", "transpose", "expand", "broadcast", "flip", "join", "split", "index"])
        name = self.name()
        if kind == "index" and x.shape:  # (a static slice or integer per axis: a crop, a stride, a flip)
            parts, shape = [], []
            for n in x.shape:
                step = self.pick([1, 1, 2, 3, -1, -2])
                start = self.draw(st.integers(0, n - 1))
                taken = range(start, n if step > 0 else -1, step)
                if self.draw(st.integers(0, 3)) == 0:
                    parts.append(str(start))
                    continue
                parts.append(f"{start}::{step}")
                shape.append(len(taken))
            return self.define(replace(x, name=name, shape=tuple(shape)), f"{x.name}[{', '.join(parts)}]")
        if kind == "flip" and x.shape:
            axis = self.pick([None, -1, *range(len(x.shape))])
            return self.define(replace(x, name=name), f"tl.flip({x.name}, {axis})")
        if kind == "join" and 0 < len(x.shape) < 3:
            y = self.recent(lambda v: v.shape == x.shape and v.dtype is x.dtype) or x
            pair = replace(x, name=name, lo=min(x.lo, y.lo), hi=max(x.hi, y.hi), nan=x.nan or y.nan,
                           integral=x.integral and y.integral, err=max(x.err, y.err))  # fmt: skip
            if self.draw(st.booleans()):
                return self.define(replace(pair, shape=(*x.shape, 2)), f"tl.join({x.name}, {y.name})")
            if self.draw(st.booleans()):  # (along any axis: twice as long)
                axis = self.draw(st.integers(0, len(x.shape) - 1))
                shape = tuple(2 * n if k == axis else n for k, n in enumerate(x.shape))
                return self.define(replace(pair, shape=shape), f"tl.cat({x.name}, {y.name}, axis={axis})")
            shape = (*x.shape[:-1], 2 * x.shape[-1])
            return self.define(replace(pair, shape=shape), f"tl.interleave({x.name}, {y.name})")
        if kind == "split" and x.shape and x.shape[-1] % 2 == 0:
            pairs, half = (*x.shape[:-1], x.shape[-1] // 2, 2), self.draw(st.integers(0, 1))
            return self.define(replace(x, name=name, shape=pairs[:-1]), f"tl.split({x.name}.reshape({pairs}))[{half}]")
        if kind == "transpose" and len(x.shape) >= 2:
            axes = list(range(len(x.shape)))
            if len(axes) == 2 or self.draw(st.booleans()):
                return self.define(replace(x, name=name, shape=x.shape[::-1]), f"{x.name}.T")
            axes = self.draw(st.permutations(axes))
            return self.define(
                replace(x, name=name, shape=tuple(x.shape[k] for k in axes)), f"tl.permute({x.name}, {tuple(axes)})"
            )
        if kind == "expand" and len(x.shape) < 3:
            axis = self.draw(st.integers(0, len(x.shape)))
            shape = x.shape[:axis] + (1,) + x.shape[axis:]
            return self.define(replace(x, name=name, shape=shape), f"tl.expand_dims({x.name}, {axis})")
        if kind == "broadcast" and 1 in x.shape:
            shape = tuple(self.pick(SIZES[1:7]) if s == 1 else s for s in x.shape)
            return self.define(replace(x, name=name, shape=shape), f"tl.broadcast_to({x.name}, {shape})")
        size, rank = x.size, self.draw(st.integers(1, 3))
        shape = []
        for _ in range(rank - 1):
            shape.append(self.pick([f for f in range(1, size + 1) if size % f == 0]))
            size //= shape[-1]
        shape = tuple(shape) + (size,)
        text = shape if not self.draw(st.booleans()) else tuple(shape[:-1]) + (-1,)
        return self.define(replace(x, name=name, shape=shape), f"{x.name}.reshape({text})")

    def op_dot(self):
        a = self.recent(lambda v: len(v.shape) == 2 and not v.dtype.is_bool and max(v.shape) <= 64)
        if a is None:
            return None
        m, k = a.shape
        b = self.recent(lambda v: len(v.shape) == 2 and not v.dtype.is_bool and (v.shape[0] == k or v.shape[1] == k))
        if b is None or self.draw(st.integers(0, 3)) == 0:
            b = a
        b = replace(b, name=f"{b.name}.T", shape=b.shape[::-1]) if b.shape[0] != k else b
        n = b.shape[1]
        dt = _dt.promote_strong(a.dtype, b.dtype)
        out = dot_result_dtype(dt)
        acc = self.recent(lambda v: v.shape == (m, n) and v.dtype is out) if self.draw(st.booleans()) else None
        name = self.name()
        text = (
            f"tl.dot({a.name}, {b.name}{', ' + acc.name if acc else ''})"
            if acc or self.draw(st.booleans())
            else f"({a.name} @ {b.name})"
        )
        return self.define(V.dot(a, b, acc, k, dt, out, (m, n), name), text)

    def op_load(self):
        return self.load()

    def op_arange(self):
        """``tl.arange(start, start + n)``, or it compared with one integer, a runtime argument
        (weak, or a NumPy int32/int64/uint32) or the block index (``cols < N``: the lowering
        compares each slot's constant with the bound less the thread's part)."""
        n, start = self.pick(SIZES), self.draw(st.integers(-40, 40))
        count, text = V.Value(self.name(), (n,), _dt.int32, start, start + n - 1), f"tl.arange({start}, {start + n})"
        if self.draw(st.booleans()):
            return self.define(count, text)
        bound = self.draw(st.integers(start - 3, start + n + 3))
        kind = self.draw(st.integers(0, 2))
        if kind == 2:
            bound_text, d = "i", _dt.int32
            bound = V.Value("i", (), d, 0, self.grid - 1)
        else:
            d = self.pick([_dt.int32, _dt.int64, _dt.uint32]) if kind else _dt.int32
            value = max(bound, 0) if d.kind == "u" else bound
            bound_text = self.scalar(value, d if kind else None)
            bound = V.constant(bound_text, value, d)
        op = self.pick(["<", "<=", ">", ">=", "==", "!="])
        left, right = (count, bound) if self.draw(st.booleans()) else (bound, count)
        names = {id(count): text, id(bound): bound_text}
        value = V.binary(op, left, right, _dt.promote_strong(left.dtype, right.dtype), (n,), self.name())
        return self.define(value, f"({names[id(left)]} {op} {names[id(right)]})")

    def op_gather(self):
        """``tl.gather`` from an input: indices from an int tile of the pool (taken modulo the
        extent, or raw, so some fall outside), an ``arange``, or the block index; maybe a mask."""
        spec = self.pick([a for a in self.arrays if a["role"] == "in"])
        d = _dt.dtype(spec["dtype"])
        driver = self.recent(lambda v: v.dtype.is_int and 0 < len(v.shape)) if self.draw(st.booleans()) else None
        shape = driver.shape if driver else (self.pick(SIZES[1:8]),)
        idx, used = [], ()  # the index terms and their broadcast shape
        for extent in spec["shape"]:
            kind = self.draw(st.integers(0, 2))
            if kind == 0 and driver:
                idx.append(
                    f"({driver.name} % {extent + self.draw(st.integers(0, 2))})"
                    if self.draw(st.booleans())
                    else driver.name
                )
                used = _broadcast(used, driver.shape)
            elif kind == 1:
                idx.append(f"(i + {self.draw(st.integers(-1, 2))})")
            else:
                idx.append(
                    f"(tl.arange(0, {shape[-1]}) * {self.draw(st.integers(1, 3))} + {self.draw(st.integers(-1, 2))})"
                )
                used = _broadcast(used, shape[-1:])
        shape = used
        m = (
            self.recent(lambda v: v.dtype.is_bool and _broadcast(v.shape, shape) == shape)
            if self.draw(st.booleans())
            else None
        )
        pad = self.padding(d)
        name = self.name()
        value = V.padded(self.data_value(spec, shape, name), pad)
        extra = (f", mask={m.name}" if m else "") + (f", padding={_literal(pad, d)}" if pad != 0 else "")
        return self.define(value, f"tl.gather({spec['name']}, {', '.join(idx)}{extra})")

    # ------------------------------------------------------------------ statements

    def st_scatter(self):
        """``tl.scatter`` of a 1- or 2-d tile, each block to its own rows, columns permuted
        (indices never repeat, so which write lands is never in question)."""
        v = self.recent(lambda v: 1 <= len(v.shape) <= 2)
        if v is None:
            return None
        out, where, data = self.own_elements(v, fill="sentinel")
        self.emit(f"tl.scatter({out['name']}, {where}, {data})")
        return v

    def own_elements(self, v: Value, fill):
        """A new 2-d output (filled with ``fill``) for the elements of ``v`` and the source of
        (array, row and column indices, ``v``'s data, maybe a mask): each block its own rows,
        columns permuted, so no element is written twice; some rows fall outside."""
        rows, cols = (v.shape + (1,))[:2] if len(v.shape) == 1 else v.shape
        mul = self.pick([k for k in (1, 3, 5, 7) if math.gcd(k, cols) == 1])
        shift = self.draw(st.integers(-1, 1))
        out = self.array("out", v.dtype, [max(1, self.grid * rows + shift), cols], fill=fill)
        out["err"] = v.err
        r = f"i * {rows} + tl.arange(0, {rows})[:, None] + {shift}"
        c = f"(tl.arange(0, {cols})[None, :] * {mul} + {self.draw(st.integers(0, cols))}) % {cols}"
        data = v.name if len(v.shape) == 2 else f"{v.name}[:, None]"
        m = self.recent(lambda u: u.dtype.is_bool and _broadcast(u.shape, (rows, cols)) == (rows, cols))
        mask = f", mask={m.name}" if m is not None and self.draw(st.booleans()) else ""
        return out, f"{r}, {c}", data + mask

    def st_atomic(self):
        """An atomic add/max/min of a tile into a small 1-d array: indices repeat, within the
        block and across blocks. A float add is kept to integers that sum exactly. Or (outside
        loops) one whose old values join the pool."""
        if self.indent == 1 and not self.draw(st.integers(0, 2)):
            return self.atomic_old_values()
        v = self.recent(lambda v: _atomic_dtype(v.dtype) and v.shape != ())
        idx = self.recent(lambda u: u.dtype.is_int and v is not None and _broadcast(u.shape, v.shape) == v.shape)
        if v is None or idx is None:
            return None
        op = self.pick(["add", "max", "min"])
        size = self.draw(st.integers(1, 17))
        d = v.dtype
        init = 3
        if op == "add" and d.is_float:
            total = self.grid * v.size * v.bound + init
            if not (v.exact and v.integral and v.finite and total < V.exact_integers(d)):
                return None
        if op != "add" and v.err:
            out_err = v.err
        elif v.err:
            return None
        else:
            out_err = 0.0
        out = self.array("out", d, [size], fill=init)
        out["err"] = out_err
        modulo = f"({idx.name} % {size + self.draw(st.integers(0, 2))})" if self.draw(st.integers(0, 3)) else idx.name
        self.emit(f"tl.atomic_{op}({out['name']}, {modulo}, {v.name})")
        return v

    def atomic_old_values(self):
        """An atomic of a 1- or 2-d tile at indices that never repeat (each block its own rows,
        columns permuted, as ``st_scatter``) into an array of 3s, maybe with a ``sem``: its old
        values, 3 where the element is in bounds and not masked off, else 0, are a new value."""
        v = self.recent(lambda v: 1 <= len(v.shape) <= 2 and _atomic_dtype(v.dtype))
        if v is None:
            return None
        d = v.dtype
        op = self.pick(["add", "max", "min", "xchg"] + (["and", "or", "xor", "cas"] if d.is_int else []))
        if op == "add" and v.err:
            return None
        out, where, data = self.own_elements(v, fill=3)
        sem = self.pick(["relaxed", "relaxed", "release", "acquire", "acq_rel"])
        extra = f", sem={sem!r}" if sem != "relaxed" else ""
        operands = f"3, {data}" if op == "cas" else data
        old = V.Value(self.name(), (*v.shape, 1)[:2], d, 0, 3, integral=True)  # (data's shape: 2-d)
        return self.define(old, f"tl.atomic_{op}({out['name']}, {where}, {operands}{extra})")

    def store(self, v: Value, over=None):
        """Store ``v`` into a new output array, or ``over`` an earlier store of the same dtype and
        shape (its window again). Each block has its own window along axis 0 (``index=``, or
        ``offset=`` shifted the same for every block), so blocks never write the same element."""
        if v.shape == ():
            v = replace(v, name=f"{v.name}[None]", shape=(1,))
        if over is None:
            shape = [max(1, self.grid * v.shape[0] + self.draw(st.integers(-2, 1)))]
            shape += [max(1, s + self.draw(st.integers(-2, 1))) for s in v.shape[1:]]
            out = self.array("out", v.dtype, shape, fill="sentinel")
            shifts = [self.draw(st.integers(-2, 2)) for _ in v.shape]
            shifts[-1] = self.pick([0, 16]) if self.aligned and len(shifts) > 1 else shifts[-1]
            over = {"spec": out, "shifts": shifts, "value": v}
            self.stores.append(over)
        else:  # what the window holds afterwards: this value, or (in a loop that ran no iteration) the last
            old = over["value"]
            v = replace(v, lo=min(v.lo, old.lo), hi=max(v.hi, old.hi), nan=v.nan or old.nan,
                        integral=v.integral and old.integral, err=max(v.err, old.err))  # fmt: skip
            over["value"] = replace(v, name=old.name)
        held = over["value"]
        over["spec"].update(err=held.err, lo=held.lo if held.lo > -INF else None, hi=held.hi if held.hi < INF else None)
        shifts = over["shifts"]
        if not any(shifts) and self.draw(st.booleans()):
            where = f"index=({', '.join(['i'] + ['0'] * (len(v.shape) - 1))},)"
        else:
            where = f"offset=({', '.join([f'i * {v.shape[0]} + {shifts[0]}'] + [str(s) for s in shifts[1:]])},)"
        self.emit(f"tl.store({over['spec']['name']}, {v.name}, {where})")

    def st_store(self):
        """A store in the middle of the program (inside a loop only over an earlier store), so
        later loads of the same window and later stores over it test the ordering of memory."""
        v = self.recent(lambda v: v.name != "k")
        same = [r for r in self.stores if r["value"].dtype is v.dtype and r["value"].shape == (v.shape or (1,))]
        if self.indent > 1 and not same:
            return None
        self.store(v, self.pick(same) if same and (self.indent > 1 or self.draw(st.booleans())) else None)
        return v

    def op_reload(self):
        """A load of part of a window this block stored earlier: it must see the stored values."""
        if not self.stores:
            return None
        rec = self.pick(self.stores)
        held, shifts = rec["value"], rec["shifts"]
        sub = tuple(self.draw(st.integers(1, s)) for s in held.shape)
        at = [shift + self.draw(st.integers(0, s - t)) for shift, s, t in zip(shifts, held.shape, sub)]
        d = held.dtype
        pad = self.padding(d)
        value = V.padded(replace(held, name=self.name(), shape=sub), pad)
        coords = ", ".join([f"i * {held.shape[0]} + {at[0]}"] + [str(a) for a in at[1:]])
        pad_text = f", padding={_literal(pad, d)}" if pad != 0 else ""
        return self.define(value, f"tl.load({rec['spec']['name']}, offset=({coords},), shape={sub}{pad_text})")

    # ------------------------------------------------------------------ a loop

    def loop_header(self):
        """A runtime trip count (a new scalar argument) and a ``tl.range`` over it, counting up
        or down: (range text, trips, the loop index's Value)."""
        trips = self.draw(st.integers(0, 3))
        n = f"n{len(self.scalars)}"
        self.scalars.append({"name": n, "value": trips, "dtype": None})
        self.params.append(n)
        forms = [(f"tl.range(0, {n})", 0, trips - 1), (f"tl.range({n} - 1, -1, -1)", 0, trips - 1),
                 (f"tl.range(2, {n} + 2)", 2, trips + 1)]  # fmt: skip
        rng, klo, khi = self.pick(forms)
        return rng, trips, Value("k", (), _dt.int32, klo, max(klo, khi))

    def loop(self):
        """``for k in tl.range(...)`` carrying 1-2 tiles: each iteration combines a value made in
        the body (from loads that move with ``k``) into each carried tile; after the loop the
        carried tiles join the pool, the body's values do not."""
        rng, trips, k = self.loop_header()
        carried = []
        for _ in range(self.draw(st.integers(1, 2))):
            init = self.recent(lambda v: v.shape != () and not v.dtype.is_bool)
            if init is None or init in carried:
                break
            acc = replace(init, name=self.name("acc"))
            self.emit(f"{acc.name} = {init.name}")
            carried.append(acc)
        if not carried:
            return None
        outer = list(self.pool)
        self.emit(f"for k in {rng}:")
        self.indent += 1
        self.pool.append(k)
        inputs = [a for a in self.arrays if a["role"] == "in"]
        spec = self.pick(inputs)
        self.load(spec, self.tile_shape(len(spec["shape"])), loop_index="k")
        for _ in range(self.draw(st.integers(0, 3))):
            self.op()
        final = []
        for acc in carried:
            final.append(self.update(acc, trips))
        self.indent -= 1
        self.pool = outer + [a for a in final if a is not None]
        return final[-1]

    def loop_dot(self):
        """The matmul loop: ``acc = tl.dot(a_k, b_k, acc)`` over tiles of two 2-d inputs that move
        along K with the loop index (16-bit operands at tensor-core shapes take the mma.sync
        path and, loaded with nothing in between, the cp.async pipeline; with 128 threads or
        more, tiles of 64 rows and more now and then: warpgroup tensor cores, sm_90a)."""
        two_d = [a for a in self.arrays if a["role"] == "in" and len(a["shape"]) == 2 and a["dtype"] != "bool"]
        if not two_d:
            return None
        sa, sb = self.pick(two_d), self.pick(two_d)
        m, kk, n = self.pick([16, 32, 8, 5]), self.pick([16, 32, 8, 13]), self.pick([8, 16, 32, 7])
        casts = [_dt.float16, _dt.bfloat16, _dt.float8_e4m3fn, _dt.float8_e5m2]
        if self.threads >= 128 and self.draw(st.integers(0, 2)) == 0:  # (wgmma: a 64-row block a warpgroup)
            m, kk, n = self.pick([64, 100]), self.pick([32, 64, 16, 24]), self.pick([32, 16, 40])
            cast = self.pick(casts)  # (float8 with b transposed and k >= 32: its own instructions)
        else:
            cast = self.pick([None, *casts])
        a = self.data_value(sa, (m, kk), "a")
        b = self.data_value(sb, (kk, n), "b")
        dt = cast or _dt.promote_strong(a.dtype, b.dtype)
        out = dot_result_dtype(dt)
        rng, trips, _ = self.loop_header()
        acc = Value(self.name("acc"), (m, n), out, 0, 0, integral=True)
        state = acc
        for _ in range(trips):
            state = V.dot(a, b, state, kk, dt, out, (m, n), acc.name) if state is not None else None
        if state is None:
            return None
        s0, s1 = self.draw(st.integers(-1, 1)), self.draw(st.integers(-1, 1))
        conv = f".astype({_tl(cast)})" if cast else ""
        self.emit(f"{acc.name} = tl.zeros(({m}, {n}), {_tl(out)})")
        self.emit(f"for k in {rng}:")
        self.emit(f"    a = tl.load({sa['name']}, offset=(i * {m} + {s0}, k * {kk}), shape=({m}, {kk}))")
        if self.draw(st.booleans()):  # b as the transpose of an (N, K) tile: a Linear layer's weight
            self.emit(f"    b = tl.load({sb['name']}, offset=({s1}, k * {kk}), shape=({n}, {kk})).T")
        else:
            self.emit(f"    b = tl.load({sb['name']}, offset=(k * {kk}, {s1}), shape=({kk}, {n}))")
        self.emit(f"    {acc.name} = tl.dot(a{conv}, b{conv}, {acc.name})")
        self.pool.append(state)
        return state

    def update(self, acc: Value, trips: int) -> Value | None:
        """``acc = combine(acc, t)``, ``t`` a body value that broadcasts to ``acc`` (converted to
        its dtype); the Value after ``trips`` iterations, or None if no update could be made."""
        for _ in range(4):
            t = self.recent(lambda v: _broadcast(v.shape, acc.shape) == acc.shape)
            tc = V.convert(t, acc.dtype) if t is not None else None
            if tc is None:
                continue
            op = self.pick(["+", "maximum", "minimum"])
            state = acc
            for _ in range(trips):
                state = V.binary(op, state, tc, acc.dtype, acc.shape, acc.name) if state is not None else None
            if state is None:
                continue
            cast = f".astype({_tl(acc.dtype)})" if t.dtype is not acc.dtype else ""
            rhs = f"{acc.name} + {t.name}{cast}" if op == "+" else f"tl.{op}({acc.name}, {t.name}{cast})"
            self.emit(f"{acc.name} = {rhs}")
            return state
        return None

    # ------------------------------------------------------------------ one op

    def op(self):
        for _ in range(8):
            kind = self.pick(self.ops)
            made = getattr(self, f"op_{kind}", None) or getattr(self, f"st_{kind}")
            if made() is not None:
                return


@st.composite
def programs(draw, *, max_ops: int = 8, ops=tuple(OPS + STATEMENTS), loops: bool = True, cap: int = 512,
             threads=(32, 64, 128, 256)) -> Program:  # fmt: skip
    """A Hypothesis strategy of random tile kernels (:class:`Program`), for differential testing.

    ``max_ops`` bounds the ops drawn, ``ops`` names the kinds (see ``OPS`` and ``STATEMENTS``),
    ``loops`` allows a ``tl.range`` loop, ``cap`` bounds every tile's padded size and
    ``threads`` lists the block sizes drawn. Example::

        from hypothesis import given
        from tilelang.testing import fuzz, programs

        @given(programs.programs())
        def test_backends_agree(program):
            fuzz.check(program, backends=("interpret", "cpu"))
    """
    # some programs (1 in 3 drawn, about half as Hypothesis draws) take aligned arrays: few threads, so
    # each holds vectors; the others mostly run the kernel for any array
    aligned = draw(st.integers(0, 2)) == 0
    narrow = [t for t in threads if t <= 64] if aligned else []
    grid, threads = draw(st.integers(1, 3)), draw(st.sampled_from(narrow or threads))
    fast = draw(st.integers(0, 3)) == 0  # (1 in 4: tile_kernel(fast_math=True))
    b = _Builder(
        draw, grid=grid, threads=threads, ops=list(ops), cap=cap, max_ops=max_ops, aligned=aligned, fast_math=fast
    )
    for _ in range(draw(st.integers(1, 3))):
        spec, tile = b.input_array()
        b.load(spec, tile)
    n_ops = draw(st.integers(1, max_ops))
    at = draw(st.integers(0, n_ops)) if loops and draw(st.booleans()) else None
    for step in range(n_ops):
        if step == at:
            b.loop_dot() if "dot" in ops and draw(st.integers(0, 2)) == 0 else b.loop()
        b.op()
    sinks = [v for v in b.pool if v.name not in b.used][::-1]  # what nothing used, the latest first
    for v in sinks[: draw(st.integers(1, 4))] or b.pool[-1:]:
        b.store(v)
    params = ", ".join(b.params)
    options = f"num_threads={threads}" + (", fast_math=True" if fast else "")
    source = f"@tl.tile_kernel({options})\ndef program({params}):\n    i = tl.block_id(0)\n" + "\n".join(b.lines)
    spec = {
        "grid": grid,
        "seed": draw(st.integers(0, 2**32 - 1)),
        "arrays": b.arrays,
        "scalars": b.scalars,
        "params": b.params,
    }
    return Program(source, spec)
