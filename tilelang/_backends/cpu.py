"""The CPU backend: the thread program the GPU runs, built as LLVM IR for the host and compiled
with llvmlite's MCJIT.

A block's threads run as loops: the statements between two barriers (or around a warp
shuffle or collective) become one ``for t in range(THREADS)`` loop, a *phase*. A register
read only in the phase defining it is a value of that loop's body, one per slot (as on the
GPU, ``llvm_emit.ThreadEmitter``); one living across phases, or read by a shuffle or a warp
collective, lives in a per-thread table (a row per slot, one table per register type).
Shuffles read the source's row of the partner thread (``t ^ b`` for a butterfly); shared
memory is a per-block buffer; loops whose bodies synchronise run at block level with their
phases inside. Tensor-core collectives (mma, ldmatrix, wgmma) are numba-compiled helpers
the kernel calls by address (``cpu_intrinsics.py``, computing from the PTX ISA's fragment
tables); each asynchronous copy is held aside and lands at the wait covering it, so a
missing wait reads stale data; a TMA box lands as it is issued. The kernel runs blocks
``[begin, end)``: blocks run in parallel (threads over chunks of blocks) unless the kernel
has atomics. So the CPU executes exactly what the GPU would, barriers and shuffles
included, and hypothesis can test the lowering.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import sys

import numpy as np
from llvmlite import ir

from .._lower.thread_ir import (
    ArrayParam,
    AsyncCopy,
    AsyncWait,
    Atomic,
    Barrier,
    Imm,
    LdMatrix,
    Loop,
    Mbarriers,
    MbarrierWait,
    Mma,
    Print,
    Reg,
    Shuffle,
    ThreadProgram,
    TmaLoad,
    Wgmma,
    array_reg,
    box_coords,
    extent,
    k_step,
    registers,
    takes_arrays,
    walk_statements,
)
from ..dtypes import bool_ as BOOL
from ..dtypes import int32 as INT32
from ..dtypes import int64 as INT64
from ..dtypes import unsigned
from ..errors import TileCompilerError, TileValueError
from . import cuda_intrinsics as memory
from .host_llvm import HostTarget, host_module, jit, unique_name
from .llvm_emit import ThreadEmitter, param_regs, stored_type
from .llvm_values import convert

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
WGMMA_KINDS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")  # cpu_intrinsics._element's kinds
INVALID = 1 << 62  # an mbarrier's word while it is not valid (between Mbarriers statements)
# what a kernel returns: 0, a loop's ZeroStep number + 1, or a broken promise of the lowering
MISALIGNED_COPY, DEAD_WAIT, MISALIGNED_GROUP = -1, -2, -3
_ERRORS = {
    MISALIGNED_COPY: "an AsyncCopy claimed aligned moves a partial or misaligned group",
    MISALIGNED_GROUP: "a load or store of groups claimed whole and aligned moves a misaligned one",
    DEAD_WAIT: "an mbarrier wait on a phase no TMA copy completes",
}


def _synchronises(s) -> bool:
    if isinstance(s, (Barrier, Shuffle, Mma, LdMatrix, Wgmma, TmaLoad)):
        return True
    return isinstance(s, Loop) and any(map(_synchronises, s.body))


def _split(stmts):
    """Phases: ("threads", [stmts]) runs, ("shuffle", [shuffles]), ("warp", s) for the other
    warp collectives, ("loop", s); barriers just split."""
    out, run = [], []
    for s in stmts:
        if _synchronises(s):
            if run:
                out.append(("threads", run))
                run = []
            if isinstance(s, Shuffle) and out and out[-1][0] == "shuffle" and all(p.dst != s.src for p in out[-1][1]):
                out[-1][1].append(s)  # independent consecutive shuffles exchange in one pass over the threads
            elif isinstance(s, Shuffle):
                out.append(("shuffle", [s]))
            elif isinstance(s, Loop):
                out.append(("loop", s))
            elif isinstance(s, (Mma, LdMatrix, Wgmma)):
                out.append(("warp", s))
            elif isinstance(s, TmaLoad):  # (thread 0's issue, in a phase of its own: before any thread waits)
                out.append(("threads", [s]))
        else:
            run.append(s)
    if run:
        out.append(("threads", run))
    return out


def _registers(stmts):
    """Every register a statement list mentions (what each statement defines and reads)."""
    for s in stmts:
        yield from registers(s, s.DEFS + s.USES)
        if isinstance(s, Loop):
            yield from _registers(s.body)


class CpuEmitter(ThreadEmitter):
    TARGET = "CPU"
    SHARED_SPACE = 0

    def print_line(self, text, args):
        """The C library's printf (flushed after the launch: ``CpuKernel``)."""
        printf = self.module.globals.get("printf") or ir.Function(
            self.module, ir.FunctionType(I32, [I8.as_pointer()], var_arg=True), "printf"
        )
        self.builder.call(printf, [self.text_constant(text), *args])

    def __init__(self, program: ThreadProgram):
        super().__init__(program)
        self.module = host_module(program.name)
        regs = param_regs(program)
        scratch_type = I8.as_pointer().as_pointer()
        types = [I64] * 5 + [scratch_type] + [stored_type(r.dtype) for r in regs]
        self.function = fn = ir.Function(self.module, ir.FunctionType(I32, types), unique_name(program.name))
        entry = fn.append_basic_block("entry")
        self.builder = b = ir.IRBuilder(fn.append_basic_block("body"))
        body = b.block
        self.target = self.host = HostTarget(b)
        self.bind_params(regs, fn.args[6:])
        self.t = None  # the thread a phase is at (an i32)
        self.reversed = bool(os.environ.get("TILELANG_CPU_REVERSED"))  # each phase's threads last to first
        self.loops: list = []  # loops with a runtime step, in ZeroStep numbering
        self._tables(program.body, set(regs))
        self.async_buffers = sorted({s.buffer for s in walk_statements(program.body) if isinstance(s, AsyncCopy)})
        self.scratch = self._scratch_layout()
        pointers = {}
        for i, (name, t, _) in enumerate(self.scratch):
            raw = b.load(b.gep(fn.args[5], [ir.Constant(I32, i)]))
            pointers[name] = b.bitcast(raw, t.as_pointer())
        self.pointers = pointers
        self.shared = {name: pointers[name] for name in program.shared}
        self._blocks(fn.args[:5])
        b.ret(ir.Constant(I32, 0))
        b.position_at_end(entry)
        b.branch(body)

    # ------------------------------------------------------------------ layout

    def _tables(self, stmts, params):
        """Registers living across phases or read by shuffles, collectives and block-level loops:
        rows of a (threads, rows) table per register type; the rest are values of one phase."""
        seen, tabled, uniform = {}, set(), set()
        counter = iter(range(10**9))

        def visit(stmts):
            for kind, item in _split(stmts):
                if kind == "threads":
                    phase = next(counter)
                    for r in _registers(item):
                        if isinstance(r, Reg):
                            seen.setdefault(r, set()).add(phase)
                elif kind == "shuffle":
                    tabled.update(r for s in item for r in (s.dst, s.src) if isinstance(r, Reg))
                elif kind == "warp":
                    tabled.update(x for x in registers(item, item.DEFS + item.USES) if isinstance(x, Reg))
                else:
                    uniform.add(item.index)
                    tabled.update(r for r in (item.start, item.stop, item.step) if isinstance(r, Reg))
                    tabled.update(item.params)
                    tabled.update(r for r in (*item.inits, *item.results) if isinstance(r, Reg))
                    visit(item.body)

        visit(stmts)
        tabled.update(r for r, phases in seen.items() if len(phases) > 1)
        tabled -= params | uniform
        self.rows: dict = {}  # table type name -> rows
        self.tables: dict = {}  # register -> (table type name, first row)
        self.table_types: dict = {}  # table type name -> the LLVM type
        for r in sorted(tabled, key=lambda r: r.name):
            t = stored_type(r.dtype)
            name = str(t)
            self.tables[r], self.table_types[name] = (name, self.rows.get(name, 0)), t
            self.rows[name] = self.rows.get(name, 0) + r.slots

    def _scratch_layout(self) -> list:
        """``(name, LLVM element type, shape)`` of each block's shared buffers, register tables
        and copies in flight: the caller passes one set per worker thread."""
        threads = self.program.num_threads
        out = [(name, stored_type(d), (size,)) for name, (d, size) in self.program.shared.items()]
        out += [(f"regs_{name}", self.table_types[name], (threads, rows)) for name, rows in self.rows.items()]
        for name in self.async_buffers:  # the words in flight, their group and the thread copying
            d, size = self.program.shared[name]
            out += [(f"{name}__pending", stored_type(d), (size,))]
            out += [(f"{name}__group", I64, (size,)), (f"{name}__owner", I64, (size,))]
        if self.async_buffers:
            out.append(("async_groups", I64, (threads,)))
        return out

    # ------------------------------------------------------------------ registers

    def row(self, x: Reg, r: int, t):
        """A pointer to slot ``r`` of table register ``x`` of thread ``t`` (an i32)."""
        name, first = self.tables[x]
        b = self.builder
        at = b.add(b.mul(b.zext(t, I64), ir.Constant(I64, self.rows[name])), ir.Constant(I64, first + r))
        return b.gep(self.pointers[f"regs_{name}"], [at])

    def load_row(self, x: Reg, r: int, t):
        v = self.builder.load(self.row(x, r, t))
        return self.builder.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if x.dtype.is_bool else v

    def store_row(self, x: Reg, r: int, t, value):
        value = self.builder.zext(value, I8) if x.dtype.is_bool else value
        self.builder.store(value, self.row(x, r, t))

    def get(self, x, r: int = 0, dtype=None):
        if isinstance(x, Reg) and x not in self.values and x in self.tables:
            v = self.load_row(x, r if x.slots > 1 else 0, self.t)
            return v if dtype is None or dtype == x.dtype else convert(self.target, v, x.dtype, dtype)
        return super().get(x, r, dtype)

    def define(self, x, values: list):
        self.values[x] = values
        if x in self.tables:
            for r, v in enumerate(values):
                self.store_row(x, r, self.t, v)

    def of_thread(self, x, t: int, dtype=None):
        """``x`` as thread ``t`` holds it, where every thread of a group holds the same (a
        block-level loop's bounds, a warpgroup's wgmma operand index)."""
        current, self.t = self.t, ir.Constant(I32, t)
        try:
            return self.get(x, 0, dtype)
        finally:
            self.t = current

    def special(self, s):
        if s.op == "thread_id":
            return self.t
        if s.op == "block_id":
            return self.block_ids[s.attr]
        return self.builder.trunc(self.grid[s.attr], I32)

    # ------------------------------------------------------------------ control

    def counted(self, n, body, name="i"):
        """``for i in range(n): body(i)`` (``n`` an i64 or i32 value or int), ``i`` of n's type."""
        n = n if isinstance(n, ir.Value) else ir.Constant(I64, n)
        with self.loop(ir.Constant(n.type, 0), ir.Constant(n.type, 1), n, name) as state:
            body(state.index)

    def fail(self, condition, code: int):
        """Return ``code`` from the kernel where ``condition`` holds."""
        with self.builder.if_then(condition, likely=False):
            self.builder.ret(ir.Constant(I32, code))

    def group(self, s, g: int) -> tuple:
        """A group of a vector access; one claimed whole or empty must be aligned where it moves
        (the CUDA kernel moves it in one access, without looking: a failure is the lowering's)."""
        group = super().group(s, g)
        if group[2] is None:
            b, offset, ok = self.builder, *group[:2]
            odd = b.icmp_unsigned("!=", b.and_(offset, ir.Constant(I64, s.lanes - 1)), ir.Constant(I64, 0))
            self.fail(b.and_(ok, odd), MISALIGNED_GROUP)
        return group

    def _blocks(self, args):
        begin, end, *grid = args
        self.grid = grid
        b = self.builder
        gx, gy = grid[0], grid[1]

        def block(i):
            bx = b.srem(i, gx)
            by = b.srem(b.sdiv(i, gx), gy)
            bz = b.sdiv(i, b.mul(gx, gy))
            self.block_ids = [b.trunc(v, I32) for v in (bx, by, bz)]
            for name in self.async_buffers:  # no copy in flight yet
                size = self.program.shared[name][1]
                group = self.pointers[f"{name}__group"]
                self.counted(size, lambda w, group=group: b.store(ir.Constant(I64, -1), b.gep(group, [w])))
            if self.async_buffers:
                groups = self.pointers["async_groups"]
                self.counted(self.program.num_threads, lambda t: b.store(ir.Constant(I64, 0), b.gep(groups, [t])))
            self.block_values = dict(self.values)
            self.phases(self.program.body)

        with self.loop(begin, ir.Constant(I64, 1), b.sub(end, begin), "block") as state:
            block(state.index)

    def threads(self, body):
        """One phase: ``body()`` for each thread ``self.t``, its own values dropped after it;
        in reverse order of threads with ``TILELANG_CPU_REVERSED`` set (a program missing a
        barrier gives another answer one way or the other: run the tests both ways)."""

        def each(t):
            self.t, self.values = t, dict(self.block_values)
            body()

        n = self.program.num_threads
        if self.reversed:
            self.counted(ir.Constant(I32, n), lambda t: each(self.builder.sub(ir.Constant(I32, n - 1), t)), "t")
        else:
            self.counted(ir.Constant(I32, n), each, "t")
        self.t, self.values = None, dict(self.block_values)

    def phases(self, stmts):
        for kind, item in _split(stmts):
            if kind == "threads":
                self.threads(lambda item=item: self.statements(item))
            elif kind == "shuffle":
                self.threads(lambda item=item: self.shuffles(item))
            elif kind == "warp":
                self.collective(item)
            else:
                self.block_loop(item)

    def shuffles(self, group):
        for s in group:
            partner = self.partner(s)
            for r in range(s.dst.slots):
                slot = r if s.src.slots > 1 else 0
                # (not in a table: a parameter or a block-level value, the same in every thread)
                value = self.load_row(s.src, slot, partner) if s.src in self.tables else self.get(s.src, slot)
                self.store_row(s.dst, r, self.t, value)

    def partner(self, s: Shuffle):
        """The thread whose ``s.src`` this thread reads (``Shuffle``'s modes)."""
        b, t, lanes = self.builder, self.t, lambda v: ir.Constant(I32, v)
        lane = b.and_(t, lanes(31))
        if s.mode == "bfly":
            return b.xor(t, lanes(s.b))
        if s.mode == "idx":
            return b.or_(b.and_(t, lanes(~31 | s.keep)), lanes(s.b & 31 & ~s.keep))
        if s.mode == "up":  # (a lane whose partner is outside the warp reads its own)
            return b.select(b.icmp_signed(">=", lane, lanes(s.b)), b.sub(t, lanes(s.b)), t)
        return b.select(b.icmp_signed("<=", lane, lanes(31 - s.b)), b.add(t, lanes(s.b)), t)

    def block_loop(self, s: Loop):
        """A loop whose body synchronises: its index the same in every thread, its carried
        registers in the tables (copied from the inits before, from the results each time round)."""
        if s.params:
            self.threads(lambda: self.copy(s.params, s.inits))
        start, stop, step = (self.of_thread(x, 0, s.index.dtype) for x in (s.start, s.stop, s.step))
        self.check_step(s, step)
        with self.loop(start, step, self.trip_count(start, stop, step, s.index.dtype), s.index.name) as state:
            outer = self.block_values
            self.block_values = {**outer, s.index: [state.index]}
            self.values = dict(self.block_values)
            self.phases(s.body)
            if s.params:
                self.threads(lambda: self.copy(s.params, s.results))
            self.block_values = outer
            self.values = dict(outer)

    def copy(self, targets, sources):
        """``targets = sources`` at once (a source may be another target)."""
        values = [self.slots(v, t.slots) for t, v in zip(targets, sources)]
        for t, v in zip(targets, values):
            self.define(t, v)

    def check_step(self, s: Loop, step):
        if isinstance(s.step, Imm) and s.step.value != 0:
            return
        self.loops.append(s)  # (a step folded to 0, `s * 0`: it fails at run time as the interpreter's)
        self.fail(self.builder.icmp_unsigned("==", step, ir.Constant(step.type, 0)), len(self.loops))

    # ------------------------------------------------------------------ collectives

    def _table_args(self, name):
        """(pointer as i8*, rows) of a register table, or a null pointer and 0."""
        b = self.builder
        if name not in self.rows:
            return list(_NO_ARRAY)
        return [b.bitcast(self.pointers[f"regs_{name}"], I8.as_pointer()), ir.Constant(I64, self.rows[name])]

    def _row_of(self, x):
        return ir.Constant(I64, self.tables[x][1])

    def call(self, name: str, args):
        """Call the numba-compiled helper ``name`` (``cpu_intrinsics``: imported, so numba is,
        only by kernels with tensor-core collectives) by its address."""
        from .cpu_intrinsics import callback

        fn_type = ir.FunctionType(ir.VoidType(), [a.type for a in args])
        address = ir.Constant(I64, callback(name).address)
        self.builder.call(self.builder.inttoptr(address, fn_type.as_pointer()), args)

    def buffer_args(self, buffer):
        b = self.builder
        if buffer is None:
            return list(_NO_ARRAY)
        return [b.bitcast(self.shared[buffer], I8.as_pointer()), ir.Constant(I64, self.program.shared[buffer][1])]

    def collective(self, s):
        threads = ir.Constant(I64, self.program.num_threads)
        if isinstance(s, Mma):
            kind = ("float16", "bfloat16", "float32").index(s.dtype.name)  # (float32: TF32 words)
            rows = [self._row_of(x) for x in (s.a, s.b)]
            c = self._row_of(s.c) if isinstance(s.c, Reg) else None
            if c is None:
                raise TileCompilerError("the CPU backend needs the accumulator of an Mma in registers")
            args = [*self._table_args("i32"), *rows, *self._table_args("float"), c, self._row_of(s.dst), threads]
            self.call("mma", args + [_i64(v) for v in (*s.shape, kind)])
        elif isinstance(s, LdMatrix):
            groups = s.dst.slots // 4
            args = [*self._table_args("i32"), self._row_of(s.dst), *self.buffer_args(s.buffer)]
            args += [*self._table_args("i32"), self._row_of(s.index), _i64(groups), threads, _i64(s.trans)]
            self.call("ldmatrix", args)
        else:
            self.wgmma(s)

    def wgmma(self, s: Wgmma):
        """Each warpgroup's instructions from its descriptors' fields (cpu_intrinsics.wgmma_m64)."""
        mb, nb, n, ks = s.shape
        for g in range(self.program.num_threads // 128):
            operands = []
            for buffer, index, tile, k_major, blocks, size in (
                (s.a_buffer, s.a_index, s.a_tile, s.a_k_major, mb, 64),
                (s.b_buffer, s.b_index, s.b_tile, s.b_k_major, nb, n),
            ):
                in_registers = buffer is None  # the words of a's fragments: its row of the uint32 table
                steps = [
                    tile.word(i, kk) if in_registers else tile.start(size * i, k_step(s.dtypes[0]) * kk, k_major)
                    for i in range(blocks)
                    for kk in range(ks)
                ]
                steps_array = self.constant_array(steps)
                if in_registers:
                    operands += [*self.buffer_args(None), self._row_of(s.a_regs), steps_array]
                    operands += [_i64(v) for v in (0, 0, 16, 1)]
                else:
                    index = self.of_thread(index, 128 * g, INT64)
                    start = self.builder.mul(index, ir.Constant(I64, 4))
                    lbo, sbo = tile.strides(k_major)
                    operands += [*self.buffer_args(buffer), start, steps_array]
                    operands += [_i64(v) for v in (lbo, sbo, tile.width, k_major)]
            c = ir.Constant(I64, -1) if s.c is None else self._row_of(s.c)
            words = self._table_args("i32") if s.a_regs is not None else list(_NO_ARRAY)
            kinds = [WGMMA_KINDS.index(d.name) for d in s.dtypes]
            flags = [_i64(v) for v in (mb, nb, n, ks, *kinds)]
            args = [*self._table_args("float"), c, self._row_of(s.dst), _i64(128 * g), *operands, *flags, *words]
            self.call("wgmma", args + [ir.Constant(I64, self.program.num_threads)])

    def constant_array(self, values):
        """A pointer (i8*) to a constant array of int64s in the module."""
        array_type = ir.ArrayType(I64, len(values))
        g = ir.GlobalVariable(self.module, array_type, f"steps_{len(self.module.global_values)}")
        g.global_constant, g.initializer, g.linkage = True, ir.Constant(array_type, list(values)), "internal"
        return self.builder.bitcast(g, I8.as_pointer())

    # ------------------------------------------------------------------ copies, TMA

    def _AsyncCopy(self, s: AsyncCopy):
        """Into the words in flight, tagged with the thread and its group: moved to the buffer
        at the wait covering them. Where the window is ``aligned`` each group must be aligned and
        whole or empty (the CUDA kernel copies it so, without looking: a failure is the lowering's)."""
        b = self.builder
        d = self.arrays[s.array].dtype
        lanes = 16 // d.itemsize
        ptr = self.get(array_reg(s.array, "ptr"))
        pending, group = self.pointers[f"{s.buffer}__pending"], self.pointers[f"{s.buffer}__group"]
        owner = self.pointers[f"{s.buffer}__owner"]
        tag = b.load(b.gep(self.pointers["async_groups"], [self.t]))
        per = 4 // d.itemsize  # lanes a word
        raw = unsigned(8 * d.itemsize) if d.itemsize < 4 else self.program.shared[s.buffer][0]  # (what a lane holds)
        for r in range(extent(s)):
            offset = b.add(self.get(s.base, 0, INT64), self.get(s.offset, r, INT64))
            ok, first, last = self.get(s.mask, r, BOOL), self.get(s.first, r, INT32), self.get(s.last, r, INT32)
            if not (isinstance(s.aligned, Imm) and not s.aligned.value):

                def partial(x):
                    inside = b.icmp_signed("<", x, ir.Constant(I32, lanes))
                    return b.and_(b.icmp_signed(">", x, ir.Constant(I32, 0)), inside)

                odd = b.icmp_unsigned("!=", b.and_(offset, ir.Constant(I64, lanes - 1)), ir.Constant(I64, 0))
                broken = b.or_(odd, b.or_(partial(first), partial(last)))
                self.fail(b.and_(self.get(s.aligned, r, BOOL), broken), MISALIGNED_COPY)
            at = b.sext(self.get(s.index, r, INT32), I64)
            words = []
            for i in range(lanes):
                lane = ir.Constant(I32, i)
                inside = b.and_(ok, b.and_(b.icmp_signed("<=", first, lane), b.icmp_signed("<", lane, last)))
                at_lane = b.add(offset, ir.Constant(I64, i))
                words.append(memory.load(b, raw, ptr, at_lane, inside, ir.Constant(stored_type(raw), 0), self.host))
            if per > 1:  # two raw 16-bit lanes a word (four 8-bit ones), the first lowest
                words = [memory.packed_word(b, words[w : w + per]) for w in range(0, len(words), per)]
            for w, word in enumerate(words):
                where = b.add(at, ir.Constant(I64, w))
                b.store(word, b.gep(pending, [where]))
                b.store(tag, b.gep(group, [where]))
                b.store(b.zext(self.t, I64), b.gep(owner, [where]))

    def _AsyncCommit(self, s):
        b = self.builder
        at = b.gep(self.pointers["async_groups"], [self.t])
        b.store(b.add(b.load(at), ir.Constant(I64, 1)), at)

    def _AsyncWait(self, s: AsyncWait):
        """This thread's copies of the groups done land in shared memory."""
        b = self.builder
        done = b.sub(b.load(b.gep(self.pointers["async_groups"], [self.t])), ir.Constant(I64, s.pending))
        me = b.zext(self.t, I64)
        for name in self.async_buffers:
            buffer, pending = self.shared[name], self.pointers[f"{name}__pending"]
            group, owner = self.pointers[f"{name}__group"], self.pointers[f"{name}__owner"]

            def land(w, buffer=buffer, pending=pending, group=group, owner=owner):
                tag = b.load(b.gep(group, [w]))
                mine = b.icmp_signed("==", b.load(b.gep(owner, [w])), me)
                started = b.icmp_signed(">=", tag, ir.Constant(I64, 0))
                landed = b.and_(mine, b.and_(started, b.icmp_signed("<", tag, done)))
                with b.if_then(landed):
                    b.store(b.load(b.gep(pending, [w])), b.gep(buffer, [w]))
                    b.store(ir.Constant(I64, -1), b.gep(group, [w]))

            self.counted(self.program.shared[name][1], land, "w")

    def _ProxyFence(self, s):  # (one proxy)
        pass

    def _WgmmaWait(self, s):  # (a wgmma is done when issued)
        pass

    def _Mbarriers(self, s: Mbarriers):
        b = self.builder
        bars = self.shared[s.buffer]
        with b.if_then(b.icmp_unsigned("==", self.t, ir.Constant(I32, 0))):
            for i in range(s.count):
                b.store(ir.Constant(I64, 0 if s.valid else INVALID), b.gep(bars, [ir.Constant(I32, i)]))

    def _MbarrierWait(self, s: MbarrierWait):
        """A TmaLoad completes its phase as it is issued (one phase per count): the phase of
        ``parity`` must have completed, the wait on the GPU would never end otherwise."""
        b = self.builder
        word = b.load(b.gep(self.shared[s.barriers], [self.get(s.stage)]))
        parity = b.zext(self.get(s.parity, 0, INT32), I64)
        invalid = b.icmp_unsigned(">=", word, ir.Constant(I64, INVALID))
        self.fail(b.or_(invalid, b.icmp_unsigned("==", b.and_(word, ir.Constant(I64, 1)), parity)), DEAD_WAIT)

    def _TmaLoad(self, s: TmaLoad):
        """Thread 0 lands each box now (zeros where out of bounds) into its swizzled tile and
        completes the stage's phase."""
        b = self.builder
        with b.if_then(b.and_(b.icmp_unsigned("==", self.t, ir.Constant(I32, 0)), self.get(s.pred, 0, BOOL))):
            bar = b.gep(self.shared[s.barriers], [self.get(s.stage)])
            b.store(b.add(b.load(bar), ir.Constant(I64, 1)), bar)
            for buffer, at, m, coords in zip(s.buffers, s.indices, s.maps, box_coords(s)):
                self.tma_box(buffer, self.get(at, 0, INT64), self.program.tensor_maps[m], coords)

    def tma_box(self, buffer, at, tmap, coords):
        b = self.builder
        axes = range(len(tmap.box) - 1, -1, -1)  # innermost first
        shape = [self.get(array_reg(tmap.array, "shape", d)) for d in axes]
        strides = [self.get(array_reg(tmap.array, "stride", d)) for d in axes]
        coords = [self.get(c, 0, INT64) for c in coords]
        box = [tmap.box[d] for d in axes]
        ptr = self.get(array_reg(tmap.array, "ptr"))
        zero = ir.Constant(I64, 0)
        inside, corner = ir.Constant(I1, 1), zero
        for d in range(2, len(shape)):
            ok = b.and_(b.icmp_signed(">=", coords[d], zero), b.icmp_signed("<", coords[d], shape[d]))
            inside, corner = b.and_(inside, ok), b.add(corner, b.mul(coords[d], strides[d]))
        words, width = self.shared[buffer], tmap.swizzle
        raw, mask = unsigned(8 * tmap.itemsize), (1 << 8 * tmap.itemsize) - 1

        def row(r):
            y = b.add(coords[1], r)

            def column(c):
                x = b.add(coords[0], c)
                ok = b.and_(inside, b.and_(b.icmp_signed(">=", y, zero), b.icmp_signed("<", y, shape[1])))
                ok = b.and_(ok, b.and_(b.icmp_signed(">=", x, zero), b.icmp_signed("<", x, shape[0])))
                element = b.add(corner, b.add(b.mul(y, strides[1]), b.mul(x, strides[0])))
                bits = b.zext(memory.load(b, raw, ptr, element, ok, ir.Constant(stored_type(raw), 0), self.host), I32)
                byte = b.add(b.mul(at, ir.Constant(I64, 4)), b.mul(r, ir.Constant(I64, width)))
                byte = b.add(byte, b.mul(c, ir.Constant(I64, tmap.itemsize)))
                swizzle = b.and_(b.lshr(byte, ir.Constant(I64, 7)), ir.Constant(I64, width // 16 - 1))
                byte = b.xor(byte, b.shl(swizzle, ir.Constant(I64, 4)))
                shift = b.trunc(b.shl(b.and_(byte, ir.Constant(I64, 3)), ir.Constant(I64, 3)), I32)  # (in its word)
                word = b.gep(words, [b.lshr(byte, ir.Constant(I64, 2))])
                kept = b.and_(b.load(word), b.not_(b.shl(ir.Constant(I32, mask), shift)))
                b.store(b.or_(kept, b.shl(bits, shift)), word)

            self.counted(box[0], column, "c")

        self.counted(box[1], row, "r")


_NO_ARRAY = (ir.Constant(I8.as_pointer(), None), ir.Constant(I64, 0))  # a helper's (pointer, size) of none


def _i64(v):
    return ir.Constant(I64, int(v))


_NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "float": np.float32, "double": np.float64}


_C_TYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
            "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
            "uint64": ctypes.c_uint64, "float8_e4m3fn": ctypes.c_float, "float8_e5m2": ctypes.c_float,
            "float16": ctypes.c_float, "bfloat16": ctypes.c_float,
            "float32": ctypes.c_float, "float64": ctypes.c_double}  # fmt: skip


class CpuKernel:
    """The thread program compiled for the host; blocks run in parallel over worker threads
    for grids of many blocks when the kernel has no atomics."""

    PARALLEL_BLOCKS = 64  # below this, one thread runs every block

    def __init__(self, program: ThreadProgram, general=None):
        self.program = program
        self._general = general  # makes the kernel lowered for any array (kernel.py), then is it
        emitter = CpuEmitter(program)
        self.module, self.entry = emitter.module, emitter.function.name
        self.ir = str(emitter.module)
        self.scratch = emitter.scratch
        self.loop_locs = [loop.loc for loop in emitter.loops]
        kinds = {type(s) for s in walk_statements(program.body)}
        self.prints = Print in kinds
        # (atomics: blocks one after another, as the emitter assumes; prints: their lines in block order)
        self.can_parallel = not self.prints and Atomic not in kinds
        self._function = None
        self._argtypes = [_C_TYPES[r.dtype.name] for r in param_regs(program)]

    def general(self) -> CpuKernel:
        if not isinstance(self._general, CpuKernel):
            self._general = self._general()
        return self._general

    def function(self):
        """The compiled kernel (MCJIT, on first use)."""
        if self._function is None:
            address = jit(self.module, self.entry, owner=self)
            argtypes = [ctypes.c_int64] * 5 + [ctypes.c_void_p] + self._argtypes
            self._function = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(address)
        return self._function

    def __call__(self, grid, args):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        if 0 in grid:
            return
        facts = {p.name: host_facts(a) for p, a in zip(self.program.params, args) if isinstance(p, ArrayParam)}
        if not takes_arrays(self.program, facts):  # (what the CUDA launcher decides, by the same rules)
            return self.general()(grid, args)
        flat = []
        for p, value in zip(self.program.params, args):
            if isinstance(p, ArrayParam):
                pointer, shape, strides, _ = facts[p.name]
                flat += [pointer, *shape, *strides]
            else:
                flat.append(value.item() if hasattr(value, "item") else value)
        blocks = grid[0] * grid[1] * grid[2]
        workers = min(os.cpu_count() or 1, blocks // 16) if self.can_parallel and blocks >= self.PARALLEL_BLOCKS else 1
        function = self.function()
        chunks = np.linspace(0, blocks, max(workers, 1) + 1).astype(np.int64)

        def run(k):
            scratch = [np.empty(shape, _NUMPY[str(t)]) for _, t, shape in self.scratch]
            pointers = (ctypes.c_void_p * max(len(scratch), 1))(*[a.ctypes.data for a in scratch])
            return function(int(chunks[k]), int(chunks[k + 1]), *grid, ctypes.cast(pointers, ctypes.c_void_p), *flat)

        if workers <= 1:
            codes = [run(0)]
        else:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                codes = list(pool.map(run, range(workers)))
        if self.prints:  # (the C library's buffer: its lines out before Python's next ones)
            sys.stdout.flush()
            _LIBC.fflush(None)
        for code in codes:
            if code > 0:
                raise TileValueError("tl.range: step must not be zero", self.loop_locs[code - 1])
            if code < 0:
                raise TileCompilerError(f"tilelang: {_ERRORS[code]}")


_LIBC = ctypes.CDLL(None)  # (the process's C library: printf's buffer)


def host_facts(a) -> tuple:
    """A NumPy array's (pointer, shape, strides in elements, itemsize): what the kernel takes
    of it, and what ``thread_ir.takes_arrays`` judges."""
    return a.__array_interface__["data"][0], a.shape, [s // a.itemsize for s in a.strides], a.itemsize
