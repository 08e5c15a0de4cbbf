"""Lowering: the tile IR with layouts → the thread IR (what one thread does).

Every tile value becomes one operand per register slot of its layout. Each primitive's
lowering rule is registered in ``Primitive.rules["lower"]`` below, grouped by kind.
Coordinates of register slot ``r`` are the thread's coordinate (computed once per layout
from the thread id) plus a compile-time offset; phantom elements (beyond a
non-power-of-two tile edge) are masked out of memory accesses and reductions; replicated
copies of a value store only from one thread.

Layout changes go through ``Lowering.convert``: free when the same threads hold the same
elements, a rematerialisation for constants, otherwise a round trip through shared
memory with barriers (visible in the thread IR).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes as D
from .._ir.core import PRIMITIVES, ArrayType, Block, Literal, Program, Var
from .._lower.layout import Layout, broadcast_source_ok, reshaped
from .._lower.thread_ir import (
    ArrayParam,
    Atomic,
    Barrier,
    If,
    Imm,
    Load,
    Loop,
    Op,
    Reg,
    ScalarParam,
    SharedLoad,
    SharedStore,
    Shuffle,
    Store,
    ThreadProgram,
    array_reg,
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
        self.values: dict = {}  # Var -> operands, one per register slot
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

    def reg(self, dtype, hint="r") -> Reg:
        return Reg(f"{hint}{next(self.names)}", dtype)

    def op(self, dtype, op, *args, attr=None):
        folded = _fold(op, dtype, args, attr)
        if folded is not None:
            return folded
        dst = self.reg(dtype, "v" if dtype.is_float else "i")
        self.stmts.append(Op(dst, op, tuple(args), attr))
        return dst

    def land(self, *conds):
        out = Imm(True, b1)
        for c in conds:
            out = self.op(b1, "land", out, c)
        return out

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

    def coord(self, layout: Layout, d: int, r: int):
        """Coordinate along ``d`` of register slot ``r`` (int32)."""
        return self.op(i32, "add", self.thread_coord(layout, d), Imm(layout.reg_coords(r)[d], i32))

    def coords(self, layout, r):
        return [self.coord(layout, d, r) for d in range(len(layout.shape))]

    def valid(self, layout: Layout, r: int):
        """Whether slot ``r`` holds a real element (not padding up to a power of two)."""
        checks = [
            self.op(b1, "lt", self.coord(layout, d, r), Imm(s, i32))
            for d, (s, p) in enumerate(zip(layout.shape, layout.padded))
            if s != p
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
        return self.values[atom][0]

    def regs(self, atom, layout: Layout, broadcast_axes=()):
        """``atom``'s operands in ``layout`` (which may broadcast size-1 ``broadcast_axes``)."""
        if isinstance(atom, Literal) or atom.type.shape == ():
            return [self.scalar(atom)] * layout.num_regs
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
        """Same threads, other register order: pick each destination slot's source slot."""
        out = []
        for r in range(dst.num_regs):
            coords = [0 if d in axes else c for d, c in enumerate(dst.reg_coords(r))]
            flat = sum(c << src.dim_bits(d).start for d, c in enumerate(coords))
            slot = sum(1 << i for i, b in enumerate(src.reg) if flat >> b & 1)
            out.append(self.values[atom][slot])
        return out

    def through_shared(self, atom, layout: Layout, source_index):
        """Convert through shared memory: owners write, barrier, everyone reads, barrier."""
        src = self.layout(atom)
        dtype = atom.type.dtype
        buf = self.buffer(dtype, atom.type.size)
        for r, v in enumerate(self.values[atom]):
            index = self.flat(self.coords(src, r), atom.type.shape)
            self.stmts.append(SharedStore(buf, index, v, self.land(self.valid(src, r), self.owner(src))))
        self.stmts.append(Barrier())
        out = []
        for r in range(layout.num_regs):
            index = self.op(i32, "select", self.valid(layout, r), source_index(self.coords(layout, r)), Imm(0, i32))
            dst = self.reg(dtype, "v")
            self.stmts.append(SharedLoad(dst, buf, index))
            out.append(dst)
        self.stmts.append(Barrier())
        self.release(buf)
        return out

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
_FOLDABLE = {op: op for op in ("add", "sub", "mul", "and", "or", "shl", "shr", "lt", "eq")} | {"land": "and"}


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
        return _out(lw, eqn, [_float_divmod(lw, name, out.type.dtype, *args) for args in zip(*operands)])
    _out(lw, eqn, [lw.op(out.type.dtype, name, *args, attr=attr) for args in zip(*operands)])


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
    out = eqn.outputs[0]
    lw.remat[out] = lambda layout: [v] * layout.num_regs
    _out(lw, eqn, [v] * lw.layout(out).num_regs)


@rule("iota")
def _lower_iota(lw, eqn, *, start, stop):
    out = eqn.outputs[0]

    def make(layout):
        return [lw.op(i32, "add", lw.coord(layout, 0, r), Imm(start, i32)) for r in range(layout.num_regs)]

    lw.remat[out] = make
    _out(lw, eqn, make(lw.layout(out)))


@rule("block_id", "num_blocks")
def _lower_grid(lw, eqn, *, axis):
    _out(lw, eqn, [lw.cached((eqn.prim.name, axis), lambda: lw.op(i32, eqn.prim.name, attr=axis))])


@rule("array_dim")
def _lower_array_dim(lw, eqn, array, *, axis):
    _out(lw, eqn, [array_reg(lw.array_names[array], "shape", axis)])


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
    masks are int32 compares whatever the array's size). Per register slot: the element
    offset and the mask. A run of slots is one wide access when the window's base address
    is aligned to the run's bytes and the other dimensions' strides keep it so."""

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

    def scaled(self, coord, d):
        if d == self.array.type.ndim - 1 and self.unit_last:
            return coord
        return self.lw.op(i64, "mul", coord, array_reg(self.name, "stride", d))

    def offset(self, r):
        lw, out = self.lw, self.base
        for d, c in enumerate(lw.coords(self.layout, r)):
            out = lw.op(i64, "add", out, self.scaled(lw.op(i64, "convert", c, attr=i64), d))
        return out

    def mask(self, r):
        lw = self.lw
        checks = []
        for c, low, high in zip(lw.coords(self.layout, r), self.low, self.high):
            checks += [lw.op(b1, "ge", c, low), lw.op(b1, "lt", c, high)]
        return lw.land(*checks, lw.valid(self.layout, r))

    def groups(self):
        """Register slots in runs that one access of up to 16 bytes can move."""
        itemsize = self.array.type.dtype.itemsize
        width = min(self.layout.vector_width(), max(16 // itemsize, 1)) if self.unit_last else 1
        return [list(range(r, r + width)) for r in range(0, self.layout.num_regs, width)]

    def wide_ok(self, group):
        lw, width = self.lw, len(group)
        aligned = lw.op(b1, "aligned", self.base, attr=(self.name, width * self.array.type.dtype.itemsize))
        strides = [
            lw.op(b1, "eq", lw.op(i64, "mod", array_reg(self.name, "stride", d), Imm(width, i64)), Imm(0, i64))
            for d in range(self.array.type.ndim - 1)
        ]
        return lw.land(aligned, *strides, self.mask(group[0]), self.mask(group[-1]))

    def access(self, group, wide, scalar):
        """Emit ``wide(offset)`` for the run when allowed, else ``scalar(i, offset, mask)`` for
        each slot ``group[i]``."""
        lw = self.lw
        if len(group) == 1:
            lw.stmts.append(scalar(0, self.offset(group[0]), self.mask(group[0])))
            return
        cond = self.wide_ok(group)
        outer = lw.stmts
        lw.stmts = []
        lw.stmts.append(wide(self.offset(group[0])))  # the offset's ops land first, inside the branch
        fast, lw.stmts = lw.stmts, []
        for i, r in enumerate(group):
            lw.stmts.append(scalar(i, self.offset(r), self.mask(r)))
        slow, lw.stmts = lw.stmts, outer
        lw.stmts.append(If(cond, fast, slow))


def _clamp32(lw, x):
    low = lw.op(i64, "select", lw.op(b1, "lt", x, Imm(-1, i64)), Imm(-1, i64), x)
    high = lw.op(i64, "select", lw.op(b1, "gt", low, Imm(2**31 - 1, i64)), Imm(2**31 - 1, i64), low)
    return lw.op(i32, "convert", high, attr=i32)


@rule("load")
def _lower_load(lw, eqn, array, *rest, shape):
    *starts, padding = rest
    out = eqn.outputs[0]
    window = _Window(lw, array, lw.layout(out), [lw.scalar(s) for s in starts])
    pad = lw.scalar(padding)
    values = []
    for group in window.groups():
        dsts = tuple(lw.reg(out.type.dtype, "v") for _ in group)
        window.access(
            group,
            lambda offset, dsts=dsts: Load(dsts, window.name, offset, None, pad),
            lambda i, offset, mask, dsts=dsts: Load((dsts[i],), window.name, offset, mask, pad),
        )
        values.extend(dsts)
    _out(lw, eqn, values)


@rule("store")
def _lower_store(lw, eqn, array, tile, *starts):
    layout = lw.layout(tile)
    values = lw.regs(tile, layout)
    window = _Window(lw, array, layout, [lw.scalar(s) for s in starts])
    owner = lw.owner(layout)
    for group in window.groups():
        window.access(
            group,
            lambda offset, group=group: Store(window.name, offset, tuple(values[r] for r in group), owner),
            lambda i, offset, mask, group=group: Store(window.name, offset, (values[group[i]],), lw.land(mask, owner)),
        )


def _branch(lw, cond, then, orelse):
    if isinstance(cond, Imm):
        lw.stmts.extend(then if cond.value else orelse)
    else:
        lw.stmts.append(If(cond, then, orelse))


def _indexed(lw, eqn, array, rest, masked, has_values, layout):
    rest = list(rest)
    mask = rest.pop() if masked else None
    values = rest.pop() if has_values else None
    indices = [lw.regs(a, layout) for a in rest[: array.type.ndim]]
    mask_regs = lw.regs(mask, layout) if masked else [Imm(True, b1)] * layout.num_regs
    value_regs = lw.regs(values, layout) if has_values else None
    out = []
    for r in range(layout.num_regs):
        coords = [lw.op(i64, "convert", idx[r], attr=i64) for idx in indices]
        offset, inside = _element_offsets(lw, array, coords)
        ok = lw.land(inside, mask_regs[r], lw.valid(layout, r))
        out.append((offset, ok, value_regs[r] if has_values else None))
    return out


@rule("gather")
def _lower_gather(lw, eqn, array, *rest, masked):
    *rest, padding = rest
    out = eqn.outputs[0]
    layout = lw.layout(out)
    pad = lw.scalar(padding)
    values = []
    for offset, ok, _ in _indexed(lw, eqn, array, rest, masked, False, layout):
        dst = lw.reg(out.type.dtype, "v")
        lw.stmts.append(Load((dst,), lw.array_names[array], offset, ok, pad))
        values.append(dst)
    _out(lw, eqn, values)


def _effect_layout(lw, atoms):
    tiled = [a for a in atoms if isinstance(a, Var) and a.type.shape != ()]
    return lw.layout(tiled[0]) if tiled else scalar_layout(lw.t)


@rule("scatter")
def _lower_scatter(lw, eqn, array, *rest, masked):
    layout = _effect_layout(lw, rest)
    owner = lw.owner(layout)
    for offset, ok, value in _indexed(lw, eqn, array, rest, masked, True, layout):
        lw.stmts.append(Store(lw.array_names[array], offset, (value,), lw.land(ok, owner)))


@rule("atomic")
def _lower_atomic(lw, eqn, array, *rest, op, masked):
    layout = _effect_layout(lw, rest)
    owner = lw.owner(layout)
    for offset, ok, value in _indexed(lw, eqn, array, rest, masked, True, layout):
        lw.stmts.append(Atomic(lw.array_names[array], offset, value, op, lw.land(ok, owner)))


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
    values = lw.regs(x, src)

    # 1. inside each thread: register slots that differ only in the axis's bits
    keep = [i for i, b in enumerate(src.reg) if b not in bits]
    partial = {}
    for r, v in enumerate(values):
        item = (v, lw.coord(src, axis, r)) if red.arg else (v,)
        masked = tuple(lw.op(a.dtype, "select", lw.valid(src, r), a, ident) for a, ident in zip(item, red.identity()))
        slot = sum(((r >> i) & 1) << k for k, i in enumerate(keep))
        partial[slot] = red.combine(partial[slot], masked) if slot in partial else masked

    # 2. across lanes: butterfly shuffles over the lane bits of the axis
    lane_bits = [t for t, b in src.hardware() if b is not None and b in bits and t < 5]
    for t in lane_bits:  # all of a step's shuffles first: one exchange for the CPU backend
        others = {}
        for slot, item in partial.items():
            others[slot] = tuple(lw.reg(a.dtype, "s") for a in item)
            lw.stmts.extend(Shuffle(dst, a, 1 << t) for dst, a in zip(others[slot], item))
        partial = {slot: red.combine(item, others[slot]) for slot, item in partial.items()}

    # 3. across warps: through shared memory, every thread combining all partials
    warp_bits = [t for t, b in src.hardware() if b is not None and b in bits and t >= 5]
    if warp_bits:
        groups = 1 << len(warp_bits)
        size = groups * _padded_size(out_layout)
        bufs = [lw.buffer(a.dtype, size) for a in red.identity()]
        group = Imm(0, i32)
        for j, t in enumerate(warp_bits):
            bit = lw.op(i32, "and", lw.op(i32, "shr", lw.tid, Imm(t, i32)), Imm(1, i32))
            group = lw.op(i32, "or", group, lw.op(i32, "shl", bit, Imm(j, i32)))
        writer_mask = sum(1 << t for t in src.replicated_bits() + lane_bits)
        writer = lw.op(b1, "eq", lw.op(i32, "and", lw.tid, Imm(writer_mask, i32)), Imm(0, i32))
        index = {slot: _padded_flat(lw, out_layout, slot) for slot in partial}
        for slot, item in partial.items():
            at = lw.op(i32, "add", lw.op(i32, "mul", group, Imm(_padded_size(out_layout), i32)), index[slot])
            for buf, a in zip(bufs, item):
                lw.stmts.append(SharedStore(buf, at, a, writer))
        lw.stmts.append(Barrier())
        for slot in partial:
            acc = None
            for g in range(groups):
                at = lw.op(i32, "add", index[slot], Imm(g * _padded_size(out_layout), i32))
                item = []
                for buf, a in zip(bufs, red.identity()):
                    dst = lw.reg(a.dtype, "w")
                    lw.stmts.append(SharedLoad(dst, buf, at))
                    item.append(dst)
                acc = tuple(item) if acc is None else red.combine(acc, tuple(item))
            partial[slot] = acc
        lw.stmts.append(Barrier())
        lw.release(*bufs)
    _out(lw, eqn, [partial[s][-1 if red.arg else 0] for s in range(out_layout.num_regs)])


def _padded_size(layout):
    return int(np.prod(layout.padded)) if layout.shape else 1


def _padded_flat(lw, layout, r):
    """The padded row-major index of slot ``r`` (distinct for distinct elements)."""
    out, stride = Imm(0, i32), 1
    for d in reversed(range(len(layout.shape))):
        out = lw.op(i32, "add", out, lw.op(i32, "mul", lw.coord(layout, d, r), Imm(stride, i32)))
        stride *= layout.padded[d]
    return out


@rule("cumsum", "cumprod")
def _lower_scan(lw, eqn, x, *, axis):
    """Hillis-Steele over shared memory: log2(n) steps, each reading the element ``s``
    back along the axis, double-buffered with a barrier per step."""
    layout = lw.layout(eqn.outputs[0])
    combine = "add" if eqn.prim.name == "cumsum" else "mul"
    shape, dtype = x.type.shape, x.type.dtype
    values = list(lw.regs(x, layout))
    stride = int(np.prod(shape[axis + 1 :]))
    bufs = [lw.buffer(dtype, x.type.size) for _ in (0, 1)]
    write = [lw.land(lw.valid(layout, r), lw.owner(layout)) for r in range(layout.num_regs)]
    index = [lw.op(i32, "select", lw.valid(layout, r), lw.flat(lw.coords(layout, r), shape), Imm(0, i32))
             for r in range(layout.num_regs)]  # fmt: skip
    for r, v in enumerate(values):
        lw.stmts.append(SharedStore(bufs[0], index[r], v, write[r]))
    lw.stmts.append(Barrier())
    step, k = 1, 0
    while step < shape[axis]:
        src, dst = bufs[k % 2], bufs[(k + 1) % 2]
        for r in range(layout.num_regs):
            has = lw.land(lw.valid(layout, r), lw.op(b1, "ge", lw.coord(layout, axis, r), Imm(step, i32)))
            at = lw.op(i32, "select", has, lw.op(i32, "sub", index[r], Imm(step * stride, i32)), Imm(0, i32))
            prev = lw.reg(dtype, "v")
            lw.stmts.append(SharedLoad(prev, src, at))
            values[r] = lw.op(dtype, "select", has, lw.op(dtype, combine, prev, values[r]), values[r])
            lw.stmts.append(SharedStore(dst, index[r], values[r], write[r]))
        lw.stmts.append(Barrier())
        step, k = step * 2, k + 1
    lw.release(*bufs)
    _out(lw, eqn, values)


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
        for r, v in enumerate(lw.regs(atom, src)):
            at = lw.op(i32, "add", lw.flat(lw.coords(src, r), shape), Imm(base, i32))
            lw.stmts.append(SharedStore(buf, at, v, lw.land(lw.valid(src, r), lw.owner(src))))
    lw.stmts.append(Barrier())

    rows, cols = {}, {}
    for r in range(layout.num_regs):
        rc = layout.reg_coords(r)
        for cache, d, size, scale, base in ((rows, 0, m, k, 0), (cols, 1, n, 1, m * k)):
            if rc[d] not in cache:
                c = lw.coord(layout, d, r)
                c = lw.op(i32, "select", lw.op(b1, "lt", c, Imm(size, i32)), c, Imm(0, i32))
                cache[rc[d]] = lw.op(i32, "add", lw.op(i32, "mul", c, Imm(scale, i32)), Imm(base, i32))
    dtype = out.type.dtype
    params = [lw.reg(dtype, "acc") for _ in init]
    kk = lw.reg(i32, "k")
    outer, lw.stmts = lw.stmts, []
    a_vals = {key: _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", base, kk)) for key, base in rows.items()}
    kn = lw.op(i32, "mul", kk, Imm(n, i32))
    b_vals = {key: _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", base, kn)) for key, base in cols.items()}
    results = []
    for r, p in enumerate(params):
        rc = layout.reg_coords(r)
        results.append(lw.op(dtype, "add", p, lw.op(dtype, "mul", a_vals[rc[0]], b_vals[rc[1]])))
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(kk, Imm(0, i32), Imm(k, i32), Imm(1, i32), params, list(init), body, results))
    lw.stmts.append(Barrier())
    lw.release(buf)
    _out(lw, eqn, params)


def _shared_at(lw, buf, dtype, acc_dtype, index):
    dst = lw.reg(dtype, "v")
    lw.stmts.append(SharedLoad(dst, buf, index))
    return dst if dtype is acc_dtype else lw.op(acc_dtype, "convert", dst, attr=acc_dtype)


# ------------------------------------------------------------------------ loops


@rule("range_loop")
def _lower_loop(lw, eqn, start, stop, step, *inits, body):
    index, *carried = body.params
    index_reg = lw.reg(index.type.dtype, "k")
    lw.values[index] = [index_reg]
    params, init_regs = [], []
    for p, init in zip(carried, inits):
        layout = lw.layout(p)
        lw.values[p] = [lw.reg(p.type.dtype, "c") for _ in range(layout.num_regs)]
        params.extend(lw.values[p])
        init_regs.extend(lw.regs(init, layout))
    outer, lw.stmts = lw.stmts, []
    lw.lower_block(body)
    results = []
    for p, res in zip(carried, body.results):
        results.extend(lw.regs(res, lw.layout(p)))
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
            lw.values[var] = [reg]
            params.append(ScalarParam(reg))
    main = []
    lw.stmts = main
    lw.lower_block(program.body)
    return ThreadProgram(program.name, params, num_threads, lw.shared, lw.prologue + main, lw.shared_sites)
