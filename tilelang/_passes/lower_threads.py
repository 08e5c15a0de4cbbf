"""Lowering: the tile IR with layouts → the thread IR (what one thread does).

Every tile value becomes one operand: a register array with a slot per element of the
thread's layout (or one uniform value), and every rule emits statements over all the
slots at once, so the program does not grow with the tile. Each primitive's lowering rule
is registered in ``Primitive.rules["lower"]`` below, grouped by kind. Coordinates of slot
``r`` are the thread's coordinate (computed once per layout from the thread id) plus the
slot's register bits (a ``slot`` op); phantom elements (beyond a non-power-of-two tile
edge) are masked out of memory accesses and reductions; replicated copies of a value store
only from one thread.

Layout changes go through ``Lowering.regs``: free when the same threads hold the same
elements (a ``pick`` of slots), a rematerialisation for constants, otherwise a round trip
through shared memory with barriers (visible in the thread IR).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes as D
from .._ir.core import PRIMITIVES, ArrayType, Block, Literal, Program, Var
from .._lower.layout import Layout, broadcast_source_ok, log2, reshaped
from .._lower.thread_ir import (
    ArrayParam,
    Atomic,
    Barrier,
    Imm,
    Load,
    Loop,
    Op,
    Reg,
    ScalarParam,
    SharedLoad,
    SharedStore,
    Shuffle,
    SlotMap,
    Store,
    ThreadProgram,
    array_reg,
    slots,
)
from .assign_layouts import scalar_layout

i32, i64, b1 = D.int32, D.int64, D.bool_


def smem_dtype(d: D.DType) -> D.DType:
    """Shared memory holds registers as they are in code: 16-bit floats as float32, bool as uint8."""
    if d.is_float and d.bits == 16:
        return D.float32
    return D.uint8 if d.is_bool else d


class Lowering:
    def __init__(self, layouts: dict, num_threads: int):
        self.layouts = layouts
        self.t = num_threads
        self.stmts: list = []
        self.values: dict = {}  # Var -> its operand: a register array in its layout (or one uniform value)
        self.remat: dict = {}  # Var -> how to recompute it in any layout (constants)
        self.shared: dict = {}
        self.shared_sites: dict = {}  # buffer name -> the user's line of the op asking its largest size
        self.loc = None  # of the equation being lowered
        self.busy: set = set()  # scratch buffers holding data some thread has yet to read
        self.names = itertools.count()
        self.cache: dict = {}
        self.array_names: dict = {}  # array Var -> parameter name
        self.prologue: list = []  # thread-invariant values, computed once at the start
        self.stmts = self.prologue
        self.tid = self.op(i32, "thread_id")

    # ------------------------------------------------------------ registers and ops

    def reg(self, dtype, n=1, hint="r") -> Reg:
        return Reg(f"{hint}{next(self.names)}", dtype, n)

    def op(self, dtype, op, *args, attr=None, n=None):
        """``op`` on each slot: the result has as many slots as the widest operand (or ``n``)."""
        n = n or max(map(slots, args), default=1)
        if op == "pick" and slots(args[0]) == 1:  # a uniform value is the same in every slot
            return args[0]
        if op == "slot" and (n == 1 or not attr.terms):  # the same number in every slot
            return Imm(attr(0), i32)
        folded = _fold(op, dtype, args, attr)
        if folded is not None:
            return folded
        dst = self.reg(dtype, n, "v" if dtype.is_float else "i")
        self.stmts.append(Op(dst, op, tuple(args), attr))
        return dst

    def land(self, *conds):
        out = Imm(True, b1)
        for c in conds:
            out = self.op(b1, "land", out, c)
        return out

    def pick(self, x, pairs, n, const=0):
        """``x`` with slot ``r`` taken from slot ``map(r)``, the map sending bit ``a`` of ``r``
        to bit ``b`` for each ``(a, b)`` in ``pairs`` (plus ``const``), over ``n`` slots."""
        if slots(x) == n and const == 0 and all(a == b for a, b in pairs) and len(pairs) == log2(n):
            return x
        return self.op(x.dtype, "pick", x, attr=SlotMap.of_bits(pairs, const), n=n)

    def cached(self, key, make):
        """Thread-invariant values (coordinates, masks) computed once per kernel, in the
        outermost statement list so every later statement may use them."""
        if key not in self.cache:
            saved, self.stmts = self.stmts, self.prologue
            try:
                self.cache[key] = make()
            finally:
                self.stmts = saved
        return self.cache[key]

    # -------------------------------------------------------------- coordinates

    def thread_coord(self, layout: Layout, d: int):
        def make():
            total = Imm(0, i32)
            for shift, mask, left in layout.thread_terms(d):
                bits = self.op(i32, "and", self.op(i32, "shr", self.tid, Imm(shift, i32)), Imm(mask, i32))
                total = self.op(i32, "or", total, self.op(i32, "shl", bits, Imm(left, i32)))
            return total

        return self.cached(("tc", layout.lane, layout.warp, tuple(layout.dim_bits(d)), d), make)

    def coord(self, layout: Layout, d: int, lanes: int = 1):
        """Coordinate along ``d`` of each slot (int32), or of the first slot of each group of
        ``lanes``: the thread's coordinate plus the slot's register bits of ``d``."""
        bits, low = layout.dim_bits(d), log2(lanes)
        pairs = [(i - low, b - bits.start) for i, b in enumerate(layout.reg) if b in bits and i >= low]
        offset = self.op(i32, "slot", attr=SlotMap.of_bits(pairs), n=layout.num_regs // lanes)
        return self.op(i32, "add", self.thread_coord(layout, d), offset)

    def coords(self, layout, lanes=1):
        return [self.coord(layout, d, lanes) for d in range(len(layout.shape))]

    def valid(self, layout: Layout, dims=None, lanes=1):
        """Whether each slot holds a real element (not padding up to a power of two), looking
        at ``dims`` (all by default)."""
        checks = [
            self.op(b1, "lt", self.coord(layout, d, lanes), Imm(s, i32))
            for d, (s, p) in enumerate(zip(layout.shape, layout.padded))
            if s != p and (dims is None or d in dims)
        ]
        return self.land(*checks)

    def owner(self, layout: Layout):
        """True in the one thread of each group that holds the same (replicated) elements."""
        mask = sum(1 << t for t in layout.replicated_bits())
        if not mask:
            return Imm(True, b1)
        return self.cached(
            ("owner", mask), lambda: self.op(b1, "eq", self.op(i32, "and", self.tid, Imm(mask, i32)), Imm(0, i32))
        )

    def flat(self, coords, shape):
        """Row-major offset of ``coords`` in a tile of ``shape`` (int32)."""
        out, stride = Imm(0, i32), 1
        for c, s in reversed(list(zip(coords, shape))):
            out = self.op(i32, "add", out, self.op(i32, "mul", c, Imm(stride, i32)))
            stride *= s
        return out

    # ------------------------------------------------------------------- values

    def layout(self, atom) -> Layout:
        if isinstance(atom, Var) and atom in self.layouts:
            return self.layouts[atom]
        return scalar_layout(self.t)

    def scalar(self, atom):
        """The operand of a 0-d value (held by every thread)."""
        if isinstance(atom, Literal):
            return Imm(atom.value.item() if hasattr(atom.value, "item") else atom.value, atom.type.dtype)
        return self.values[atom]

    def regs(self, atom, layout: Layout, broadcast_axes=()):
        """``atom``'s operand in ``layout`` (which may broadcast size-1 ``broadcast_axes``)."""
        if isinstance(atom, Literal) or atom.type.shape == ():
            return self.scalar(atom)
        src = self.layout(atom)
        if src == layout:
            return self.values[atom]
        if atom in self.remat and not broadcast_axes:  # remat rebuilds from the destination's coordinates
            return self.remat[atom](layout)
        if broadcast_source_ok(src, layout, broadcast_axes):
            return self.rename(atom, src, layout, broadcast_axes)

        def source_index(coords):
            kept = [Imm(0, i32) if d in broadcast_axes else c for d, c in enumerate(coords)]
            return self.flat(kept, atom.type.shape)

        return self.through_shared(atom, layout, source_index)

    def rename(self, atom, src: Layout, dst: Layout, axes):
        """Same threads, other register order: each destination slot picks its source slot."""
        pairs = []
        for i, b in enumerate(dst.reg):
            d = next(d for d in range(len(dst.shape)) if b in dst.dim_bits(d))
            if d not in axes:
                pairs.append((i, src.reg.index(src.dim_bits(d).start + b - dst.dim_bits(d).start)))
        return self.pick(self.values[atom], pairs, dst.num_regs)

    def through_shared(self, atom, layout: Layout, source_index):
        """Convert through shared memory: owners write, barrier, everyone reads, barrier."""
        src = self.layout(atom)
        dtype = atom.type.dtype
        buf = self.buffer(dtype, atom.type.size)
        index = self.flat(self.coords(src), atom.type.shape)
        self.stmts.append(SharedStore(buf, index, self.values[atom], self.land(self.valid(src), self.owner(src))))
        self.stmts.append(Barrier())
        at = self.op(i32, "select", self.valid(layout), source_index(self.coords(layout)), Imm(0, i32))
        dst = self.reg(dtype, max(slots(at), layout.num_regs), "v")
        self.stmts.append(SharedLoad(dst, buf, at))
        self.stmts.append(Barrier())
        self.release(buf)
        return dst

    def buffer(self, dtype, size) -> str:
        """A shared scratch buffer no live data is in, held until ``release`` (after the barrier
        that follows its last read): uses one after another share a buffer, and a use nested
        in another (a conversion between a store and its reads) gets its own."""
        d = smem_dtype(dtype)
        name = next(n for k in itertools.count() if (n := f"smem_{d.name}_{k}") not in self.busy)
        self.busy.add(name)
        if size > self.shared.get(name, (d, 0))[1]:
            self.shared_sites[name] = self.loc  # the op asking most of it, for check_limits' error
        self.shared[name] = (d, max(size, self.shared.get(name, (d, 0))[1]))
        return name

    def release(self, *names):
        self.busy.difference_update(names)

    # ---------------------------------------------------------------- program

    def lower_block(self, block: Block):
        outer = self.loc
        for eqn in block.eqns:
            rule = eqn.prim.rule("lower")
            self.loc = eqn.loc
            rule(self, eqn, *eqn.inputs, **eqn.params)
        self.loc = outer


def _fold(op, dtype, args, attr):
    """Fold index arithmetic on immediates (keeps the thread IR readable), computing what
    running the op would: the interpreter's rule on values of the operands' dtypes."""
    if all(isinstance(a, Imm) for a in args) and (op in _FOLDABLE or op == "convert"):
        values = [np.asarray(_wrap(a.value, a.dtype), a.dtype.np) for a in args]
        rule = PRIMITIVES[_FOLDABLE.get(op, op)].rule("interpret")
        with np.errstate(all="ignore"):
            (out,) = rule(None, *values, **({"dtype": attr} if op == "convert" else {}))
        return Imm(_wrap(out[()], dtype), dtype)
    # identities, only where exact: x + 0.0 is +0.0 for x = -0.0, x * 0 is NaN for x = inf
    if len(args) == 2 and op in ("add", "or", "sub", "shl", "shr") and _is_zero(args[1], negative=op == "add"):
        return args[0]
    if len(args) == 2 and op in ("add", "or") and _is_zero(args[0], negative=op == "add"):
        return args[1]
    if op == "mul" and any(isinstance(a, Imm) and a.value == 1 for a in args):
        return args[1] if isinstance(args[0], Imm) and args[0].value == 1 else args[0]
    if op == "mul" and any(isinstance(a, Imm) and a.value == 0 for a in args) and dtype.is_int:
        return Imm(0, dtype)
    if op == "land" and isinstance(args[0], Imm):
        return args[1] if args[0].value else Imm(False, b1)
    if op == "land" and isinstance(args[1], Imm):
        return args[0] if args[1].value else Imm(False, b1)
    if op == "select" and isinstance(args[0], Imm):
        return args[1] if args[0].value else args[2]
    return None


def _wrap(value, dtype):
    """``value`` as a register of ``dtype`` holds it: integers modulo 2**bits (two's
    complement when signed), floats rounded to the dtype (16-bit ones held as floats)."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        value = int(value) & ((1 << dtype.bits) - 1)
        return value - (1 << dtype.bits) if dtype.kind == "i" and value >> (dtype.bits - 1) else value
    return float(np.asarray(value).astype(dtype.np))


def _is_zero(x, negative):
    """An integer zero, or a float zero of the given sign (x + -0.0 and x - 0.0 are x; the other signs are not)."""
    if not isinstance(x, Imm) or x.value != 0:
        return False
    return not x.dtype.is_float or (math.copysign(1.0, x.value) < 0) == negative


# thread op -> the primitive whose interpreter rule computes it
_FOLDABLE = {op: op for op in ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "neg", "maximum", "minimum")}
_FOLDABLE |= {op: op for op in ("lt", "le", "gt", "ge", "eq", "ne")} | {"land": "and"}


def scalar_reg_name(name):
    return f"{name}__arg"


def rule(*names):
    def register(fn):
        for n in names:
            PRIMITIVES[n].rules["lower"] = fn
        return fn

    return register


def _out(lw: Lowering, eqn, values):
    lw.values[eqn.outputs[0]] = values


# ------------------------------------------------------------------ elementwise

_ELEMENTWISE = [
    "neg", "invert", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf",
    "sigmoid", "floor", "ceil", "add", "sub", "mul", "div", "floordiv", "mod", "pow", "maximum", "minimum",
    "and", "or", "xor", "shl", "shr", "eq", "ne", "lt", "le", "gt", "ge", "where", "convert",
]  # fmt: skip


@rule(*_ELEMENTWISE)
def _lower_elementwise(lw, eqn, *inputs, **params):
    out = eqn.outputs[0]
    layout = lw.layout(out)
    operands = [lw.regs(a, layout) for a in inputs]
    name = "select" if eqn.prim.name == "where" else eqn.prim.name
    attr = params.get("dtype")
    if name in ("floordiv", "mod") and out.type.dtype.is_float:
        return _out(lw, eqn, _float_divmod(lw, name, out.type.dtype, *operands))
    _out(lw, eqn, lw.op(out.type.dtype, name, *operands, attr=attr))


def _float_divmod(lw, name, dtype, a, b):
    """Float ``//`` and ``%`` as NumPy computes them (npy_divmod), from the exact remainder
    ``fmod``: ``a - floor(a/b)*b`` would round (``1.6e8 % 3.0`` must be 1). 16-bit floats
    compute in float32 and round once at the end."""
    t = D.float32 if dtype.bits == 16 else dtype

    def c(v):
        return Imm(v, t)

    def f(op, *args):
        return lw.op(b1 if op in ("lt", "gt", "ne", "eq") else t, op, *args)

    if dtype is not t:
        a, b = lw.op(t, "convert", a, attr=t), lw.op(t, "convert", b, attr=t)
    r = f("fmod", a, b)
    adjust = lw.land(f("ne", r, c(0.0)), f("ne", f("lt", r, c(0.0)), f("lt", b, c(0.0))))
    if name == "mod":
        signed_zero = f("select", f("lt", b, c(0.0)), c(-0.0), c(0.0))  # a zero remainder takes b's sign
        out = f("select", adjust, f("add", r, b), f("select", f("eq", r, c(0.0)), signed_zero, r))
    else:
        div = f("div", f("sub", a, r), b)
        div = f("select", adjust, f("sub", div, c(1.0)), div)
        whole = f("sub", div, f("fmod", div, c(1.0)))  # trunc(div)
        whole = f("select", f("gt", whole, div), f("sub", whole, c(1.0)), whole)  # floor
        integral = float(2 ** (23 if t.bits == 32 else 52))  # from here on (and inf) div is whole
        whole = f("select", f("lt", f("abs", div), c(integral)), whole, div)
        whole = f("select", f("gt", f("sub", div, whole), c(0.5)), f("add", whole, c(1.0)), whole)
        quotient = f("div", a, b)
        zero = f("select", f("lt", quotient, c(0.0)), c(-0.0), c(0.0))
        zero = f("select", f("eq", quotient, c(0.0)), quotient, zero)  # a zero quotient keeps its sign (0 // -1 is -0)
        out = f("select", f("eq", div, c(0.0)), zero, whole)
        out = f("select", f("eq", b, c(0.0)), quotient, out)
    return out if dtype is t else lw.op(dtype, "convert", out, attr=dtype)


@rule("full")
def _lower_full(lw, eqn, value, *, shape, dtype):
    v = lw.scalar(value)
    lw.remat[eqn.outputs[0]] = lambda layout: v
    _out(lw, eqn, v)  # one value, the same in every slot of every thread


@rule("iota")
def _lower_iota(lw, eqn, *, start, stop):
    out = eqn.outputs[0]

    def make(layout):
        return lw.op(i32, "add", lw.coord(layout, 0), Imm(start, i32))

    lw.remat[out] = make
    _out(lw, eqn, make(lw.layout(out)))


@rule("block_id", "num_blocks")
def _lower_grid(lw, eqn, *, axis):
    _out(lw, eqn, lw.cached((eqn.prim.name, axis), lambda: lw.op(i32, eqn.prim.name, attr=axis)))


@rule("array_dim")
def _lower_array_dim(lw, eqn, array, *, axis):
    _out(lw, eqn, array_reg(lw.array_names[array], "shape", axis))


# ------------------------------------------------------------------- shape ops


@rule("reshape")
def _lower_reshape(lw, eqn, x, *, shape):
    out = eqn.outputs[0]
    layout = lw.layout(out)
    if x.type.shape == () or isinstance(x, Literal):
        return _out(lw, eqn, lw.regs(x, layout))
    if reshaped(lw.layout(x), shape) == layout:  # the same padded numbering on the same bits: nothing moves
        return _out(lw, eqn, lw.values[x])
    _out(lw, eqn, lw.through_shared(x, layout, lambda coords: lw.flat(coords, shape)))


@rule("transpose")
def _lower_transpose(lw, eqn, x, *, perm):
    layout = lw.layout(eqn.outputs[0])

    def source_index(coords):
        src = [None] * len(perm)
        for i, p in enumerate(perm):
            src[p] = coords[i]
        return lw.flat(src, x.type.shape)

    _out(lw, eqn, lw.through_shared(x, layout, source_index))


@rule("broadcast")
def _lower_broadcast(lw, eqn, x, *, shape):
    axes = tuple(d for d, (a, b) in enumerate(zip(x.type.shape, shape)) if a != b)
    _out(lw, eqn, lw.regs(x, lw.layout(eqn.outputs[0]), axes))


# ---------------------------------------------------------------------- memory


def _element_offsets(lw, array, coords):
    """Element offset and in-bounds test of the element at ``coords`` (int64 values)."""
    name, last = lw.array_names[array], array.type.ndim - 1
    offset, inside = Imm(0, i64), Imm(True, b1)
    for d, c in enumerate(coords):
        inside = lw.land(inside, lw.op(b1, "ge", c, Imm(0, i64)), lw.op(b1, "lt", c, array_reg(name, "shape", d)))
        step = c if d == last and array.type.unit_stride else lw.op(i64, "mul", c, array_reg(name, "stride", d))
        offset = lw.op(i64, "add", offset, step)
    return offset, inside


class _Window:
    """A tile-shaped window of an array at element offsets ``starts``.

    Once per window: the base offset (int64) and, per dimension, the range of tile
    coordinates in bounds, clamped to int32 (exact for coordinates in [0, 2**31-2], so
    masks are int32 compares whatever the array's size). Slots go in groups of ``lanes``
    consecutive elements of a unit-stride last dimension (up to 16 bytes): per group the
    element offset, the mask of the other dimensions and the range of lanes inside the last
    one; the backend moves a whole group in one access when it is in and aligned."""

    def __init__(self, lw, array, layout, starts):
        self.lw, self.array, self.layout = lw, array, layout
        self.name = lw.array_names[array]
        self.unit_last = array.type.unit_stride
        base = Imm(0, i64)
        self.low, self.high = [], []
        for d, start in enumerate(starts):
            base = lw.op(i64, "add", base, self.scaled(start, d))
            self.low.append(_clamp32(lw, lw.op(i64, "neg", start)))
            self.high.append(_clamp32(lw, lw.op(i64, "sub", array_reg(self.name, "shape", d), start)))
        self.base = base
        itemsize = array.type.dtype.itemsize
        self.lanes = min(layout.vector_width(), max(16 // itemsize, 1)) if self.unit_last and starts else 1

    def scaled(self, coord, d):
        if d == self.array.type.ndim - 1 and self.unit_last:
            return coord
        return self.lw.op(i64, "mul", coord, array_reg(self.name, "stride", d))

    def access(self):
        """(offset, mask, first, last) of each group of slots."""
        lw, lanes, last = self.lw, self.lanes, len(self.low) - 1
        coords = lw.coords(self.layout, lanes)
        offset = self.base
        for d, c in enumerate(coords):
            offset = lw.op(i64, "add", offset, self.scaled(lw.op(i64, "convert", c, attr=i64), d))
        inner = range(len(coords)) if lanes == 1 else range(last)  # dimensions the mask checks
        checks = [
            lw.op(b1, op, coords[d], bound) for d in inner for op, bound in (("ge", self.low[d]), ("lt", self.high[d]))
        ]
        mask = lw.land(*checks, lw.valid(self.layout, inner, lanes))
        if lanes == 1:
            return offset, mask, None, None
        size, padded = self.layout.shape[last], self.layout.padded[last]
        high = self.high[last] if size == padded else lw.op(i32, "minimum", self.high[last], Imm(size, i32))
        return offset, mask, lw.op(i32, "sub", self.low[last], coords[last]), lw.op(i32, "sub", high, coords[last])


def _clamp32(lw, x):
    low = lw.op(i64, "maximum", x, Imm(-1, i64))
    return lw.op(i32, "convert", lw.op(i64, "minimum", low, Imm(2**31 - 1, i64)), attr=i32)


@rule("load")
def _lower_load(lw, eqn, array, *rest, shape):
    *starts, padding = rest
    out = eqn.outputs[0]
    layout = lw.layout(out)
    window = _Window(lw, array, layout, [lw.scalar(s) for s in starts])
    offset, mask, first, last = window.access()
    dst = lw.reg(out.type.dtype, layout.num_regs, "v")
    lw.stmts.append(Load(dst, window.name, offset, mask, lw.scalar(padding), window.lanes, first, last))
    _out(lw, eqn, dst)


@rule("store")
def _lower_store(lw, eqn, array, tile, *starts):
    layout = lw.layout(tile)
    values = lw.regs(tile, layout)
    window = _Window(lw, array, layout, [lw.scalar(s) for s in starts])
    offset, mask, first, last = window.access()
    lw.stmts.append(Store(window.name, offset, values, lw.land(mask, lw.owner(layout)), window.lanes, first, last))


def _indexed(lw, eqn, array, rest, masked, has_values, layout):
    """(offset, in-bounds-and-masked, values) of each slot of a gather, scatter or atomic."""
    rest = list(rest)
    mask = rest.pop() if masked else None
    values = rest.pop() if has_values else None
    coords = [lw.op(i64, "convert", lw.regs(a, layout), attr=i64) for a in rest[: array.type.ndim]]
    offset, inside = _element_offsets(lw, array, coords)
    ok = lw.land(inside, lw.regs(mask, layout) if masked else Imm(True, b1), lw.valid(layout))
    return offset, ok, lw.regs(values, layout) if has_values else None


@rule("gather")
def _lower_gather(lw, eqn, array, *rest, masked):
    *rest, padding = rest
    out = eqn.outputs[0]
    layout = lw.layout(out)
    offset, ok, _ = _indexed(lw, eqn, array, rest, masked, False, layout)
    dst = lw.reg(out.type.dtype, layout.num_regs, "v")
    lw.stmts.append(Load(dst, lw.array_names[array], offset, ok, lw.scalar(padding)))
    _out(lw, eqn, dst)


def _effect_layout(lw, atoms):
    tiled = [a for a in atoms if isinstance(a, Var) and a.type.shape != ()]
    return lw.layout(tiled[0]) if tiled else scalar_layout(lw.t)


@rule("scatter")
def _lower_scatter(lw, eqn, array, *rest, masked):
    layout = _effect_layout(lw, rest)
    offset, ok, value = _indexed(lw, eqn, array, rest, masked, True, layout)
    lw.stmts.append(Store(lw.array_names[array], offset, value, lw.land(ok, lw.owner(layout))))


@rule("atomic")
def _lower_atomic(lw, eqn, array, *rest, op, masked):
    layout = _effect_layout(lw, rest)
    offset, ok, value = _indexed(lw, eqn, array, rest, masked, True, layout)
    lw.stmts.append(Atomic(lw.array_names[array], offset, value, op, lw.land(ok, lw.owner(layout))))


# ------------------------------------------------------------------ reductions

_COMBINE = {"reduce_sum": "add", "reduce_prod": "mul", "reduce_max": "maximum", "reduce_min": "minimum"}


def _identity(name, dtype):
    if name in ("reduce_sum",):
        return 0
    if name == "reduce_prod":
        return 1
    high = name in ("reduce_min", "argmin")
    if dtype.is_bool:
        return high
    if dtype.is_float:
        return float("inf") if high else float("-inf")
    info = np.iinfo(dtype.np)
    return int(info.max if high else info.min)


class _Reducer:
    """Combines (value) or (value, index) pairs; argmax/argmin keep the first index on
    ties and treat NaN as the extreme, as NumPy does."""

    def __init__(self, lw, name, dtype):
        self.lw, self.name, self.dtype = lw, name, dtype
        self.arg = name in ("argmax", "argmin")

    def identity(self):
        value = Imm(_identity(self.name, self.dtype), self.dtype)
        return (value, Imm(2**31 - 1, i32)) if self.arg else (value,)

    def combine(self, a, b):
        lw = self.lw
        if not self.arg:
            return (lw.op(self.dtype, _COMBINE[self.name], a[0], b[0]),)
        (va, ia), (vb, ib) = a, b
        better = lw.op(b1, "gt" if self.name == "argmax" else "lt", vb, va)
        tie = lw.land(lw.op(b1, "eq", vb, va), lw.op(b1, "lt", ib, ia))
        take = lw.op(b1, "lor", better, tie)
        if self.dtype.is_float:
            nan_a, nan_b = lw.op(b1, "ne", va, va), lw.op(b1, "ne", vb, vb)
            both = lw.land(nan_a, nan_b)
            take = lw.op(
                b1,
                "select",
                both,
                lw.op(b1, "lt", ib, ia),
                lw.op(b1, "lor", nan_b, lw.land(lw.op(b1, "eq", nan_a, Imm(False, b1)), take)),
            )
        return (lw.op(self.dtype, "select", take, vb, va), lw.op(i32, "select", take, ib, ia))


@rule("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin")
def _lower_reduce(lw, eqn, x, *, axis):
    src = lw.layout(x)
    out_layout = lw.layout(eqn.outputs[0])
    red = _Reducer(lw, eqn.prim.name, x.type.dtype)
    bits = src.dim_bits(axis)
    item = (lw.regs(x, src), lw.coord(src, axis)) if red.arg else (lw.regs(x, src),)
    valid = lw.valid(src)
    partial = tuple(lw.op(a.dtype, "select", valid, a, ident) for a, ident in zip(item, red.identity()))

    # 1. inside each thread: halve the slots along each register bit of the axis, a tree (a
    # loop folding them one by one compiles smaller, but its chain of dependent adds made a
    # sum 13% slower on the H200)
    reg = list(src.reg)
    while any(b in bits for b in reg):
        i = next(i for i, b in enumerate(reg) if b in bits)  # the lowest first: neighbours combine
        n = 1 << (len(reg) - 1)
        pairs = [(k, k) for k in range(i)] + [(k, k + 1) for k in range(i, len(reg) - 1)]
        partial = red.combine(*([lw.pick(a, pairs, n, const) for a in partial] for const in (0, 1 << i)))
        del reg[i]

    # 2. across lanes: butterfly shuffles over the lane bits of the axis
    lane_bits = [t for t, b in src.hardware() if b is not None and b in bits and t < 5]
    for t in lane_bits:
        others = tuple(lw.reg(a.dtype, slots(a), "s") for a in partial)
        lw.stmts.extend(Shuffle(dst, a, 1 << t) for dst, a in zip(others, partial))
        partial = red.combine(partial, others)

    # 3. across warps: through shared memory, every thread combining all partials
    warp_bits = [t for t, b in src.hardware() if b is not None and b in bits and t >= 5]
    if warp_bits:
        groups, size = 1 << len(warp_bits), _padded_size(out_layout)
        bufs = [lw.buffer(a.dtype, groups * size) for a in red.identity()]
        group = Imm(0, i32)
        for j, t in enumerate(warp_bits):
            bit = lw.op(i32, "and", lw.op(i32, "shr", lw.tid, Imm(t, i32)), Imm(1, i32))
            group = lw.op(i32, "or", group, lw.op(i32, "shl", bit, Imm(j, i32)))
        writer_mask = sum(1 << t for t in src.replicated_bits() + lane_bits)
        writer = lw.op(b1, "eq", lw.op(i32, "and", lw.tid, Imm(writer_mask, i32)), Imm(0, i32))
        index = _padded_flat(lw, out_layout)
        at = lw.op(i32, "add", lw.op(i32, "mul", group, Imm(size, i32)), index)
        for buf, a in zip(bufs, partial):
            lw.stmts.append(SharedStore(buf, at, a, writer))
        lw.stmts.append(Barrier())

        n = max(slots(index), out_layout.num_regs)

        def gather(at):
            out = []
            for buf, a in zip(bufs, red.identity()):
                out.append(lw.reg(a.dtype, n, "w"))
                lw.stmts.append(SharedLoad(out[-1], buf, at))
            return tuple(out)

        def step(acc, g):
            return red.combine(acc, gather(lw.op(i32, "add", index, lw.op(i32, "mul", g, Imm(size, i32)))))

        partial = _folded(lw, gather(index), groups, n, step)
        lw.stmts.append(Barrier())
        lw.release(*bufs)
    _out(lw, eqn, partial[-1 if red.arg else 0])


def _folded(lw, first, count, n, step):
    """``first`` combined by ``step(acc, j)`` for ``j`` in ``1..count-1``, over ``n`` slots: a
    loop of constant trip count, so the program does not grow with it (NVVM unrolls it)."""
    if count == 1:
        return tuple(first)
    j = lw.reg(i32, 1, "j")
    params = [lw.reg(a.dtype, n, "f") for a in first]
    outer, lw.stmts = lw.stmts, []
    results = step(tuple(params), j)
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(j, Imm(1, i32), Imm(count, i32), Imm(1, i32), params, list(first), body, list(results)))
    return tuple(params)


def _padded_size(layout):
    return int(np.prod(layout.padded)) if layout.shape else 1


def _padded_flat(lw, layout):
    """The padded row-major index of each slot (distinct for distinct elements)."""
    out, stride = Imm(0, i32), 1
    for d in reversed(range(len(layout.shape))):
        out = lw.op(i32, "add", out, lw.op(i32, "mul", lw.coord(layout, d), Imm(stride, i32)))
        stride *= layout.padded[d]
    return out


@rule("cumsum", "cumprod")
def _lower_scan(lw, eqn, x, *, axis):
    """Hillis-Steele over shared memory: log2(n) steps, each reading the element ``s``
    back along the axis, double-buffered with a barrier per step."""
    layout = lw.layout(eqn.outputs[0])
    combine = "add" if eqn.prim.name == "cumsum" else "mul"
    shape, dtype = x.type.shape, x.type.dtype
    value = lw.regs(x, layout)
    stride = int(np.prod(shape[axis + 1 :]))
    bufs = [lw.buffer(dtype, x.type.size) for _ in (0, 1)]
    valid = lw.valid(layout)
    write = lw.land(valid, lw.owner(layout))
    index = lw.op(i32, "select", valid, lw.flat(lw.coords(layout), shape), Imm(0, i32))
    n = layout.num_regs
    lw.stmts.append(SharedStore(bufs[0], index, value, write))
    lw.stmts.append(Barrier())
    step, k = 1, 0
    while step < shape[axis]:
        src, dst = bufs[k % 2], bufs[(k + 1) % 2]
        has = lw.land(valid, lw.op(b1, "ge", lw.coord(layout, axis), Imm(step, i32)))
        at = lw.op(i32, "select", has, lw.op(i32, "sub", index, Imm(step * stride, i32)), Imm(0, i32))
        prev = lw.reg(dtype, max(n, slots(at)), "v")
        lw.stmts.append(SharedLoad(prev, src, at))
        value = lw.op(dtype, "select", has, lw.op(dtype, combine, prev, value), value)
        lw.stmts.append(SharedStore(dst, index, value, write))
        lw.stmts.append(Barrier())
        step, k = step * 2, k + 1
    lw.release(*bufs)
    _out(lw, eqn, value)


@rule("barrier")
def _lower_barrier(lw, eqn):
    lw.stmts.append(Barrier())


# --------------------------------------------------------------------------- dot


@rule("dot")
def _lower_dot(lw, eqn, a, b, acc):
    """Operands staged in shared memory; each thread accumulates its register block of
    the result over k, reading each operand value once per row or column it owns."""
    out = eqn.outputs[0]
    layout = lw.layout(out)
    (m, k), (_, n) = a.type.shape, b.type.shape
    init = lw.regs(acc, layout)  # before the operands are staged (a conversion would need its own buffer)
    buf = lw.buffer(a.type.dtype, m * k + k * n)
    for atom, shape, base in ((a, (m, k), 0), (b, (k, n), m * k)):
        src = lw.layout(atom)
        at = lw.op(i32, "add", lw.flat(lw.coords(src), shape), Imm(base, i32))
        lw.stmts.append(SharedStore(buf, at, lw.regs(atom, src), lw.land(lw.valid(src), lw.owner(src))))
    lw.stmts.append(Barrier())

    # each thread's rows (and columns): the register bits of that dimension, as their own slots
    bases, picks = [], []
    for d, size, scale, base in ((0, m, k, 0), (1, n, 1, m * k)):
        bits = layout.dim_bits(d)
        own = [(i, b - bits.start) for i, b in enumerate(layout.reg) if b in bits]
        c = lw.op(i32, "add", lw.thread_coord(layout, d), lw.op(i32, "slot", attr=SlotMap.of_bits(
            [(j, pos) for j, (_, pos) in enumerate(own)]), n=1 << len(own)))  # fmt: skip
        c = lw.op(i32, "select", lw.op(b1, "lt", c, Imm(size, i32)), c, Imm(0, i32))
        bases.append(lw.op(i32, "add", lw.op(i32, "mul", c, Imm(scale, i32)), Imm(base, i32)))
        picks.append([(i, j) for j, (i, _) in enumerate(own)])
    dtype = out.type.dtype
    param = lw.reg(dtype, layout.num_regs, "acc")
    kk = lw.reg(i32, 1, "k")
    outer, lw.stmts = lw.stmts, []
    a_vals = _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", bases[0], kk))
    b_vals = _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", bases[1], lw.op(i32, "mul", kk, Imm(n, i32))))
    products = lw.op(dtype, "mul", *(lw.pick(v, p, layout.num_regs) for v, p in zip((a_vals, b_vals), picks)))
    result = lw.op(dtype, "add", param, products)
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(kk, Imm(0, i32), Imm(k, i32), Imm(1, i32), [param], [init], body, [result]))
    lw.stmts.append(Barrier())
    lw.release(buf)
    _out(lw, eqn, param)


def _shared_at(lw, buf, dtype, acc_dtype, index):
    dst = lw.reg(dtype, slots(index), "v")
    lw.stmts.append(SharedLoad(dst, buf, index))
    return dst if dtype is acc_dtype else lw.op(acc_dtype, "convert", dst, attr=acc_dtype)


# ------------------------------------------------------------------------ loops


@rule("range_loop")
def _lower_loop(lw, eqn, start, stop, step, *inits, body):
    index, *carried = body.params
    index_reg = lw.reg(index.type.dtype, 1, "k")
    lw.values[index] = index_reg
    params, init_regs = [], []
    for p, init in zip(carried, inits):
        layout = lw.layout(p)
        lw.values[p] = lw.reg(p.type.dtype, layout.num_regs, "c")
        params.append(lw.values[p])
        init_regs.append(lw.regs(init, layout))
    outer, lw.stmts = lw.stmts, []
    lw.lower_block(body)
    results = [lw.regs(res, lw.layout(p)) for p, res in zip(carried, body.results)]
    loop_body, lw.stmts = lw.stmts, outer
    bounds = [lw.scalar(x) for x in (start, stop, step)]
    lw.stmts.append(Loop(index_reg, *bounds, params, init_regs, loop_body, results, eqn.loc))
    for out, p in zip(eqn.outputs, carried):
        lw.values[out] = lw.values[p]


# ---------------------------------------------------------------------- entry


def lower_to_threads(program: Program, layouts: dict, num_threads: int) -> ThreadProgram:
    """The thread program of ``program`` under ``layouts``."""
    lw = Lowering(layouts, num_threads)
    params = []
    for var, name in zip(program.body.params, program.arg_names):
        if isinstance(var.type, ArrayType):
            lw.array_names[var] = name
            params.append(ArrayParam(name, var.type.dtype, var.type.ndim))
        else:
            reg = Reg(scalar_reg_name(name), var.type.dtype)
            lw.values[var] = reg
            params.append(ScalarParam(reg))
    main = []
    lw.stmts = main
    lw.lower_block(program.body)
    return ThreadProgram(program.name, params, num_threads, lw.shared, lw.prologue + main, lw.shared_sites)
