"""The lowering's builder: the registers, folded ops, coordinates, layout conversions and
shared scratch buffers every lowering rule emits the thread IR through (the rules are in
``_passes/lower_threads.py`` and ``_passes/lower_dot.py``).

A tile value is one operand: a register array with a slot per element of the thread's
layout (or one uniform value), and every statement applies to all the slots at once, so
the program does not grow with the tile. Coordinates of slot ``r`` are the thread's
coordinate (computed once per layout from the thread id) plus the slot's register bits (a
``slot`` op). Operands reach a rule in the layout it needs, up to the order of the register
slots (``Lowering.regs`` renames them with a ``pick``): the insert_conversions pass made
every other change of layout a ``convert_layout`` equation, which goes through shared
memory (``through_shared``, visible in the thread IR).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from .. import dtypes as D
from .._ir.core import PRIMITIVES, Block, Literal, Var
from ..errors import TileCompilerError
from .layout import Layout, log2, same_threads, scalar_layout, unbroadcast
from .ranges import decided, op_range
from .thread_ir import Barrier, Imm, LdMatrix, Op, ProxyFence, Reg, SharedLoad, SharedStore, SlotMap, slots

i32, i64, b1 = D.int32, D.int64, D.bool_


def smem_dtype(d: D.DType) -> D.DType:
    """Shared memory holds registers as they are in code: 16- and 8-bit floats as float32, bool as uint8."""
    if d.is_narrow_float:
        return D.float32
    return D.uint8 if d.is_bool else d


class InShared(NamedTuple):
    """A dot operand in shared memory: from element (32-bit word) ``base`` of ``buffer``, a
    ``tile`` (``SwizzledTile`` for wgmma, ``OperandTile`` for threads) holding it in its own
    orientation, or its transpose's where the dot reads it ``transposed``."""

    buffer: str
    base: object
    tile: object
    transposed: bool


class Lowering:
    def __init__(
        self, layouts: dict, num_threads: int, num_stages: int = 3, general: bool = False, copies_first: bool = False
    ):
        self.layouts = layouts
        self.t = num_threads
        self.num_stages = num_stages  # shared buffers of a software-pipelined load (lower_pipeline.py)
        self.copies_first = copies_first  # a pipelined loop's copies first in each iteration (lower_pipeline.py)
        # the program for any array, or one that copies wgmma operands by TMA (sm_90a) and moves
        # vectors of arrays it takes to be aligned (thread_ir.array_aligned), listed in ``aligned``
        self.tma = self.assume_aligned = not general
        self.aligned: set = set()
        self.multiples: dict = {}  # int register -> a number it is a multiple of (see ``multiple``)
        self.ranges: dict = {}  # int register -> the interval of values it holds (``range``)
        self.counts: dict = {}  # an iota's int32 register -> (the thread's part, a constant per slot): their sum
        self.saturated: dict = {}  # int64 select -> the same for its arms or an int64 end (``start_multiple``)
        self.tensor_maps: list = []  # the TensorMaps TMA copies read
        self.stmts: list = []
        self.values: dict = {}  # Var -> its operand: a register array in its layout (or one uniform value)
        self.packed: dict = {}  # 16-bit float Var -> its raw bits, slots 2w and 2w + 1 in uint32 word w, where made
        self.in_shared: dict = {}  # dot operand Var -> InShared: where it was copied (or staged) before the dot
        self.staged: dict = {}  # (Var, SwizzledTile, transposed) -> (buffer, statement list) it was stored in
        self.transposed: dict = {}  # Var -> the Var it is the transpose of (folded into a wgmma operand)
        self.overlapped: dict = {}  # id -> wgmma dot equation left in flight into the next iteration
        self.shared: dict = {}
        self.shared_sites: dict = {}  # buffer name -> the user's line of the op asking its largest size
        self.loc = None  # of the equation being lowered
        self.busy: set = set()  # scratch buffers holding data some thread has yet to read
        # the shared rings (uint32) of pipelined loops done for good (drained outside any loop), in
        # order: a staged store's scratch; no buffer() hands them out again (a later loop's ring() may
        # take one back: it grows, never shrinks)
        self.retired: list = []
        self.rings_read: set = set()  # retired rings a staged store has read back: a barrier before another writes one
        self.idle_rings: list = []  # rings of drained pipelined loops: a later loop's ring may be one (``ring``)
        self.written_by_threads: set = set()  # idle rings cp.async copies (not TMA) wrote last
        self.early: set = set()  # ids of equations lowered ahead of their place (skipped there)
        self.continued: dict = {}  # id of a loop -> (the pipeline running on into it, the loop's copies)
        self._at: tuple = ((), 0)  # the equations of the block being lowered, and where the next one is
        self.depth = 0  # loops open around the equation being lowered
        self.read: set = set()  # buffers read since the last barrier: free once all threads pass one
        self.names = itertools.count()
        self.cache: dict = {}
        self.scan_totals: dict = {}  # (x, axis, reduction, layout) -> (statement list, a scan's totals)
        self.array_names: dict = {}  # array Var -> parameter name
        self.used: set = set()  # the Vars some equation (or a block's results) reads
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
        folded = fold(op, dtype, args, attr)
        if folded is not None:
            return folded
        ranges = [self.range(a) for a in args]
        known = decided(op, dtype, args, ranges) if len(args) == 2 else None
        if known is not None:
            return known
        dst = self.reg(dtype, n, "v" if dtype.is_float else "i")
        self.stmts.append(Op(dst, op, tuple(args), attr))
        if (r := op_range(op, dtype, args, ranges, attr, self.t)) is not None:
            self.ranges[dst] = r
        if dtype.is_int and op in _MULTIPLES:
            m = _MULTIPLES[op](*map(self.multiple, args), *args[1:])
            if m != 1:
                self.multiples[dst] = m if op != "convert" else math.gcd(m, 1 << dtype.bits)
        if op == "select" and dtype is i64:
            self.saturated[dst] = math.gcd(*(self.start_multiple(a) for a in args[1:]))
        return dst

    def range(self, x):
        """The interval ``(lo, hi)`` the integer ``x`` lies in, or None (ranges.py)."""
        if isinstance(x, Imm):
            return (int(x.value), int(x.value)) if x.dtype.is_int else None
        return self.ranges.get(x)

    def multiple(self, x) -> int:
        """A number the integer ``x`` is known to be a multiple of (0: of every number). Its
        power-of-two part holds through wrap-around and truncation, odd factors may not: ask
        only whether ``x`` is a multiple of a power of two (as windows do, of their lanes)."""
        if isinstance(x, Imm):
            return abs(int(x.value)) if x.dtype.is_int else 1
        return self.multiples.get(x, 1)

    def start_multiple(self, x) -> int:
        """``multiple`` for a window's int64 corner, where an int64 end is a multiple of every
        number: language.py saturates offsets there (``select``), past every array, so any
        window at one is empty and its vector groups are trivially aligned (window.py)."""
        if isinstance(x, Imm) and x.value in _INT64_ENDS:
            return 0
        return self.saturated.get(x, self.multiple(x))

    def clamp(self, x, low: int, high: int):
        """The int64 ``x`` saturated to ``[low, high]`` (folded where its range is inside)."""
        return self.op(i64, "minimum", self.op(i64, "maximum", x, Imm(low, i64)), Imm(high, i64))

    def land(self, *conds):
        out = Imm(True, b1)
        for c in conds:
            out = self.op(b1, "land", out, c)
        return out

    def elementwise(self, name, dtype, operands, attr=None):
        """The elementwise primitive ``name``'s result (of ``dtype``) on ``operands``: one op
        (``where`` is ``select``), but float ``//`` and ``%`` as NumPy computes them
        (npy_divmod), from the exact remainder ``fmod``: ``a - floor(a/b)*b`` would round
        (``1.6e8 % 3.0`` must be 1). 16-bit floats compute in float32 and round once at the end."""
        if name not in ("floordiv", "mod") or not dtype.is_float:
            return self.op(dtype, "select" if name == "where" else name, *operands, attr=attr)
        a, b = operands
        t = D.float32 if dtype.is_narrow_float else dtype

        def c(v):
            return Imm(v, t)

        def f(op, *args):
            return self.op(b1 if op in ("lt", "gt", "ne", "eq") else t, op, *args)

        if dtype is not t:
            a, b = self.op(t, "convert", a, attr=t), self.op(t, "convert", b, attr=t)
        r = f("fmod", a, b)
        adjust = self.land(f("ne", r, c(0.0)), f("ne", f("lt", r, c(0.0)), f("lt", b, c(0.0))))
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
            # a zero quotient keeps its sign (0 // -1 is -0)
            zero = f("select", f("eq", quotient, c(0.0)), quotient, zero)
            out = f("select", f("eq", div, c(0.0)), zero, whole)
            out = f("select", f("eq", b, c(0.0)), quotient, out)
        return out if dtype is t else self.op(dtype, "convert", out, attr=dtype)

    def pick(self, x, pairs, n, const=0, flip=0):
        """``x`` with slot ``r`` taken from slot ``map(r)``, the map sending bit ``a`` of ``r``
        to bit ``b`` for each ``(a, b)`` in ``pairs`` (plus ``const``, then the bits of ``flip``
        complemented), over ``n`` slots."""
        if slots(x) == n and const == flip == 0 and all(a == b for a, b in pairs) and len(pairs) == log2(n):
            return x
        return self.op(x.dtype, "pick", x, attr=SlotMap.of_bits(pairs, const, flip), n=n)

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
        return self.op(i32, "add", *self.coord_parts(layout, d, lanes))

    def coord_parts(self, layout: Layout, d: int, lanes: int = 1):
        """``coord``'s two terms: the thread's coordinate (one slot) and each slot's offset
        from it (a constant per slot)."""
        bits, low = layout.dim_bits(d), log2(lanes)
        pairs = [(i - low, b - bits.start) for i, b in enumerate(layout.reg) if b in bits and i >= low]
        offset = self.op(i32, "slot", attr=SlotMap.of_bits(pairs), n=layout.num_regs // lanes)
        return self.thread_coord(layout, d), offset

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
        return self.leader(sum(1 << t for t in layout.replicated_bits()))

    def leader(self, mask: int):
        """True in the one thread of each group of threads whose ids differ in ``mask`` only."""
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
        """``atom``'s operand in ``layout`` (which may broadcast size-1 ``broadcast_axes``):
        the same threads hold the elements (insert_conversions made sure), so at most the
        register slots are renamed."""
        if isinstance(atom, Literal) or atom.type.shape == ():
            return self.scalar(atom)
        src = self.layout(atom)
        if src == layout:
            return self.values[atom]
        if not same_threads(src, unbroadcast(layout, atom.type.shape)):
            raise TileCompilerError(f"lowering: no conversion of a value from {src} to {layout} (insert_conversions)")
        return self.rename(atom, src, layout, broadcast_axes)

    def rename(self, atom, src: Layout, dst: Layout, axes):
        """Same threads, other register order: each destination slot picks its source slot."""
        pairs = []
        for i, b in enumerate(dst.reg):
            d = next(d for d in range(len(dst.shape)) if b in dst.dim_bits(d))
            if d not in axes:
                pairs.append((i, src.reg.index(src.dim_bits(d).start + b - dst.dim_bits(d).start)))
        return self.pick(self.values[atom], pairs, dst.num_regs)

    def through_shared(self, atom, layout: Layout, source_coords, shape=None, also=()):
        """Convert through shared memory: owners write, barrier, everyone reads the element at
        ``source_coords(coords)`` of ``atom`` (the buffer is free again after the next
        barrier, whoever places it). Rows are laid out an odd number of elements apart, so
        threads reading down a column (a transpose) hit distinct banks. With ``also`` (pairs
        ``(atom, shift)``) more tiles are written into the same tile of ``shape``, each at its
        coordinates shifted (a concatenation)."""
        dtype = atom.type.dtype
        *rows, last = shape or atom.type.shape or (1,)
        pitched = (*rows, last | 1 if rows else last)
        buf = self.buffer(dtype, math.prod(pitched))
        for part, shift in ((atom, None), *also):
            src = self.layout(part)
            coords = self.coords(src) if shift is None else shift(self.coords(src))
            writes = self.land(self.valid(src), self.owner(src))
            self.stmts.append(SharedStore(buf, self.flat(coords, pitched), self.values[part], writes))
        self.barrier()
        read = self.flat(source_coords(self.coords(layout)), pitched)
        at = self.op(i32, "select", self.valid(layout), read, Imm(0, i32))
        dst = self.reg(dtype, max(slots(at), layout.num_regs), "v")
        self.stmts.append(SharedLoad(dst, buf, at))
        self.release(buf)
        return dst

    def through_matrices(self, atom, layout: Layout):
        """A 16-bit float tile converted to ``layout`` through shared memory with ``ldmatrix``
        (its words, or None where ``layout`` is not one ldmatrix makes). ``layout``'s
        register bit 0 and lane bits 0-1 must span 8 consecutive elements of a row (or, with
        ``.trans``, of a column) and lanes 2-4 the 8 rows (columns) of a matrix, register bits
        1-2 the four matrices of a group: the fragments of mma operands. The address each lane
        gives is then itself a layout (``_matrix_rows``). Words are stored two elements at a
        time, rows 16 bytes more than a row apart (``matrix_tile``): the 8 rows of a matrix
        hit distinct banks."""
        src = self.layout(atom)
        if not (stored_as_matrices(atom.type, src) and _matrix_rows(layout)):
            return None
        pitched = matrix_tile(src)
        buf = self.buffer(D.uint32, pitched[0] * pitched[1] // 2)
        words = self.words(atom, src)
        at = self.op(i32, "shr", self.flat(self.coords(src, lanes=2), pitched), Imm(1, i32))
        self.stmts.append(SharedStore(buf, at, words, self.owner(src)))
        self.barrier()
        dst = self.read_matrices(layout, buf, Imm(0, i32), pitched)
        self.release(buf)
        return dst

    def read_matrices(self, layout: Layout, buf: str, base, pitched):
        """``layout``'s words read with ldmatrix from a tile stored at word ``base`` of ``buf``."""
        flat = self.flat(self.coords(_matrix_rows(layout)), pitched)
        index = self.op(i32, "add", self.op(i32, "shr", flat, Imm(1, i32)), base)
        dst = self.reg(D.uint32, layout.num_regs // 2, "i")
        self.stmts.append(LdMatrix(dst, buf, index, trans=layout.reg[0] == layout.dim_bits(0).start))
        return dst

    def set_words(self, var, words):
        """``var`` (a 16-bit float tile) is held as raw bits two to a uint32 word (slots 2w and
        2w + 1 in word w, the first low): kept for a dot, and its values cut out of them."""
        self.packed[var] = words
        n = self.layout(var).num_regs
        word = self.pick(words, [(a, a - 1) for a in range(1, log2(n))], n)  # slot r's word: r >> 1
        half = self.op(i32, "slot", attr=SlotMap.of_bits([(0, 4)]), n=n)  # its shift: 16 * (r & 1)
        shifted = self.op(D.uint32, "shr", word, self.op(D.uint32, "convert", half, attr=D.uint32))
        self.values[var] = self.op(var.type.dtype, "from_bits", self.op(D.uint16, "convert", shifted, attr=D.uint16))

    def words(self, atom, layout: Layout):
        """``atom``'s raw words in ``layout`` (two 16-bit values to each, as :meth:`set_words`
        says, or four 8-bit ones): those it was made with, else its values packed."""
        if self.layout(atom) == layout and atom in self.packed:
            return self.packed[atom]
        d, n = atom.type.dtype, layout.num_regs
        values, per = self._unrounded(self.regs(atom, layout), d), 32 // d.bits
        parts = word_parts(layout, per)  # word w: slots per * w onwards
        parts = [self.pick(values, parts, n // per, const=c) for c in range(per)]
        return self.op(D.uint32, "pack16" if per == 2 else "pack8", *parts, attr=d)

    def _unrounded(self, x, d):
        """The float32 register the 16-bit floats ``x`` (of dtype ``d``) were just rounded from,
        else ``x``: a pack rounds float32s itself (``cvt.rn.f16x2.f32``), to the same bits, so
        attention's ``p.astype(f16)`` costs no rounding of its own (64 of its loop's instructions)."""
        for s in reversed(self.stmts):
            if isinstance(s, Op) and s.dst == x:
                rounded = s.op == "convert" and s.attr == d and s.args[0].dtype == D.float32
                return s.args[0] if rounded else x
        return x

    def buffer(self, dtype, size, kind="smem") -> str:
        """A shared scratch buffer no live data is in, held until ``release``d and a barrier
        passed (no thread still reads it): uses one after another share a buffer (or take
        turns between two), and a use nested in another gets its own. ``kind`` "swizzled":
        for tiles wgmma reads (1024-byte aligned, ``thread_ir.shared_alignment``)."""
        d = smem_dtype(dtype)
        taken = self.busy.union(self.retired, self.idle_rings)
        name = next(n for k in itertools.count() if (n := f"{kind}_{d.name}_{k}") not in taken)
        self.busy.add(name)
        return self._hold(name, d, size)

    def ring(self, dtype, size, kind, tma=False) -> str:
        """The ring of a pipelined loop's stages, held to the kernel's end: one a loop before
        is done with where there is one of its kind (drained: every thread passed a barrier
        after its last read, and the loop runs again only after this one is drained too), so
        consecutive loops (attention's unmasked and masked ones) take the shared memory once.
        Where threads wrote it last (cp.async copies, a staged store) and ``tma`` copies come
        next, or a staged store read it back, a proxy fence and a barrier come first."""
        d = smem_dtype(dtype)
        idle = [n for n in self.idle_rings if n.startswith(f"{kind}_{d.name}_")]
        if not idle:
            return self.buffer(dtype, size, kind)
        name = next((n for n in idle if self.shared[n][1] >= size), idle[0])
        self.idle_rings.remove(name)
        if name in self.retired:
            self.retired.remove(name)
        fenced = [type(s) for s in self.stmts[-2:]] == [ProxyFence, Barrier]  # (by the ring taken before)
        if (name in self.rings_read or (tma and name in self.written_by_threads)) and not fenced:
            self.stmts.append(ProxyFence())
            self.barrier()
        self.rings_read.discard(name)
        self.written_by_threads.discard(name)
        self.read.discard(name)  # (read back by a staged store before: no later barrier frees the loop's ring)
        self.busy.add(name)
        return self._hold(name, d, size)

    def _hold(self, name, d, size) -> str:
        if size > self.shared.get(name, (d, 0))[1]:
            self.shared_sites[name] = self.loc  # the op asking most of it, for check_limits' error
        self.shared[name] = (d, max(size, self.shared.get(name, (d, 0))[1]))
        return name

    def tensor_map(self, m) -> int:
        """The index of TensorMap ``m`` among the kernel's (added if new)."""
        if m not in self.tensor_maps:
            self.tensor_maps.append(m)
        return self.tensor_maps.index(m)

    def release(self, *names):
        """Done with these buffers once every thread has read them: at the next barrier."""
        self.read.update(names)

    def barrier(self):
        self.stmts.append(Barrier())
        self.busy -= self.read
        self.read = set()

    # ---------------------------------------------------------------- program

    @property
    def following(self) -> list:
        """The equations after the one being lowered, in its block."""
        eqns, k = self._at
        return eqns[k:]

    def lower_block(self, block: Block, rules: dict | None = None):
        """Each equation by its primitive's lower rule (or the one ``rules`` gives for it, by id)."""
        outer = self.loc
        for k, eqn in enumerate(block.eqns):
            if id(eqn) in self.early:
                continue
            rule = (rules or {}).get(id(eqn)) or eqn.prim.rule("lower")
            self.loc, self._at = eqn.loc, (block.eqns, k + 1)
            rule(self, eqn, *eqn.inputs, **eqn.params)
        self.loc = outer


def zero_padding(lw: Lowering, words, layout: Layout, axis: int, per: int = 2):
    """``words`` (``per`` values each, as :meth:`Lowering.words` makes them) with the parts
    past the tile along ``axis`` zeroed: a dot would add whatever the registers hold."""
    if layout.shape[axis] == layout.padded[axis]:
        return words
    n, bits, parts = layout.num_regs, 32 // per, word_parts(layout, per)
    valid = lw.valid(layout, dims=(axis,))
    keep = None
    for c in range(per):
        ok = lw.pick(valid, parts, n // per, const=c)
        mask = lw.op(D.uint32, "select", ok, Imm(((1 << bits) - 1) << (bits * c), D.uint32), Imm(0, D.uint32))
        keep = mask if keep is None else lw.op(D.uint32, "or", keep, mask)
    return lw.op(D.uint32, "and", words, keep)


def word_parts(layout: Layout, per: int) -> list:
    """The slot map of the ``c``-th value (``const=c``) of each word of ``per`` values
    (``per`` a power of two): word ``w`` holds slots ``per * w`` to ``per * w + per - 1``."""
    shift = log2(per)
    return [(i, i + shift) for i in range(len(layout.reg) - shift)]


def all_slots(lw: Lowering, x, n: int):
    """``x`` as a register array of ``n`` slots (a uniform value copied to each)."""
    if slots(x) == n:
        return x
    dst = lw.reg(x.dtype, n, "v")
    lw.stmts.append(Op(dst, "pick", (x,), SlotMap()))
    return dst


def stored_as_matrices(ttype, layout: Layout) -> bool:
    """Whether a tile of ``ttype`` held in ``layout`` is stored in words of two 16-bit floats
    of a row (what ldmatrix reads)."""
    return ttype.dtype.bits == 16 and stored_as_words(ttype, layout)


def stored_as_words(ttype, layout: Layout) -> bool:
    """Whether a tile of ``ttype`` held in ``layout`` is stored in 32-bit words of elements of
    a row: two 16-bit floats, four 8-bit ones (what wgmma reads from shared memory)."""
    d = ttype.dtype
    if not (d.is_float and d.bits in (8, 16) and len(ttype.shape) == 2):
        return False
    first, per = layout.dim_bits(1).start, 32 // d.bits
    return layout.reg[: log2(per)] == tuple(range(first, first + log2(per)))


def matrix_tile(layout: Layout) -> tuple:
    """The shape (in elements) a 2-d tile takes in shared memory for ldmatrix: rows 16 bytes longer."""
    return (layout.padded[0], layout.padded[1] + 8)


def matrix_layout(layout: Layout) -> bool:
    """Whether ldmatrix makes ``layout`` (from a tile stored as :func:`matrix_tile` says)."""
    return _matrix_rows(layout) is not None


def _matrix_rows(layout: Layout) -> Layout | None:
    """Where each lane points ``ldmatrix`` to make ``layout`` (None: it cannot). For group
    ``g``, lane ``l`` gives the start of stored row ``l % 8`` of matrix ``l // 8``: the tile's
    row that lanes 2-4 of ``layout`` index or, with ``.trans``, the index along dimension 0
    that register bit 0 and lanes 0-1 do. That is a layout too: lane bits 0-2 the stored
    row's index bits, lane bits 3-4 the matrix's (register bits 1-2), registers the groups'."""
    if len(layout.shape) != 2 or len(layout.reg) < 3:
        return None
    r, c = layout.dim_bits(0).start, layout.dim_bits(1).start
    row_bits = (layout.reg[0], *layout.lane[:2])
    if row_bits == (c, c + 1, c + 2) and c + 2 in layout.dim_bits(1):  # rows of the tile
        lanes = layout.lane[2:5]
    elif row_bits == (r, r + 1, r + 2) and r + 2 in layout.dim_bits(0) and layout.lane[2:5] == (c, c + 1, c + 2):
        lanes = row_bits  # .trans
    else:
        return None
    return Layout(layout.shape, layout.reg[3:], (*lanes, *layout.reg[1:3]), layout.warp)


def fold(op, dtype, args, attr):
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
    return float(dtype.cast(value))


def _is_zero(x, negative):
    """An integer zero, or a float zero of the given sign (x + -0.0 and x - 0.0 are x; the other signs are not)."""
    if not isinstance(x, Imm) or x.value != 0:
        return False
    return not x.dtype.is_float or (math.copysign(1.0, x.value) < 0) == negative


# thread op -> the primitive whose interpreter rule computes it
_FOLDABLE = {op: op for op in ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "neg", "maximum", "minimum")}
_FOLDABLE |= {op: op for op in ("lt", "le", "gt", "ge", "eq", "ne")} | {"land": "and"}


_INT64_ENDS = (-(2**63), 2**63 - 1)
# how an op's result is a multiple of what its operands are (operand multiples first, then operands past the first)
_MULTIPLES = {
    "mul": lambda a, b, _: a * b,
    "add": lambda a, b, _: math.gcd(a, b),
    "sub": lambda a, b, _: math.gcd(a, b),
    "maximum": lambda a, b, _: math.gcd(a, b),
    "minimum": lambda a, b, _: math.gcd(a, b),
    "neg": lambda a: a,
    "convert": lambda a: a,
    "shl": lambda a, b, shift: a << shift.value if isinstance(shift, Imm) and 0 <= shift.value < 64 else 1,
    "select": lambda _, a, b, x, y: math.gcd(a, b),
}


def scalar_reg_name(name):
    return f"{name}__arg"


def rule(*names):
    def register(fn):
        for n in names:
            PRIMITIVES[n].rules["lower"] = fn
        return fn

    return register


def output(lw: Lowering, eqn, value):
    """``eqn``'s result is ``value`` (an operand)."""
    lw.values[eqn.outputs[0]] = value
