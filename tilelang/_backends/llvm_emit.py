"""Thread-IR statements as LLVM IR: what the CUDA and CPU backends build alike.

:class:`ThreadEmitter` holds each register as a Python list of LLVM values, one per slot
(a statement over ``n`` slots is built ``n`` times), and builds operations (through
``llvm_values.op_value``), global loads, stores and atomics (through ``cuda_intrinsics``:
16-byte vectors with their lane-by-lane fallback), shared-memory accesses and loops (an
LLVM loop whose carried registers are phi nodes). A target subclass sets ``module``,
``builder``, ``shared`` (buffer name -> a pointer to its first element) and ``target``
(what ``op_value`` asks of a target: ``cuda_emit.CudaTarget``, ``host_llvm.HostTarget``),
says how it reads thread and block ids (``special``), and may keep registers elsewhere by
overriding ``get``/``define``.
"""

from __future__ import annotations

import contextlib
import types

from llvmlite import ir

from .._ir.primitives import ACQUIRING, RELEASING
from .._lower.thread_ir import (
    Atomic,
    Imm,
    Load,
    Loop,
    Op,
    Print,
    Reg,
    SharedLoad,
    SharedStore,
    Store,
    ThreadProgram,
    extent,
    registers,
    walk_statements,
)
from ..dtypes import bool_ as BOOL
from ..dtypes import int32 as INT32
from ..dtypes import int64 as INT64
from ..errors import TileCompilerError
from . import cuda_intrinsics as memory
from .llvm_values import constant, convert, op_value, register_type

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()


def param_regs(program: ThreadProgram) -> list:
    """The kernel's parameters as registers: each array's pointer, shape and strides, then scalars."""
    regs = []
    for p in program.params:
        regs.extend(p.regs() if hasattr(p, "ndim") else [p.reg])
    return regs


def stored_type(d):
    """A register's LLVM type where it is stored (a kernel parameter, shared memory, the CPU's
    register tables): a bool as a byte."""
    return I8 if d.is_bool else register_type(d)


def rounded_by_readers(stmts) -> set:
    """The float registers every reader of which rounds them to a 16- or 8-bit float: float32s
    converted to one or packed into words of two or four, narrow floats packed (``pack16`` rounds
    float32s itself), float8s stored (the store's ``cvt`` rounds), and picks of them that are
    themselves so read. A 16- or 8-bit result there needs no rounding of its own; a float32
    quotient no correctly rounded division."""
    flat = list(walk_statements(stmts))
    readers: dict = {}
    for s in flat:
        for x in registers(s, s.USES):
            if isinstance(x, Reg):
                readers.setdefault(x, []).append(s)

    def rounds(s, x) -> bool:
        if isinstance(s, Store):
            return x is s.values and x.dtype.is_float8
        if not isinstance(s, Op):
            return False
        if s.op in ("pack16", "pack8"):
            return x.dtype.name == "float32" or s.attr == x.dtype
        if s.op == "pick":
            return s.dst in found
        return s.op == "convert" and x.dtype.name == "float32" and s.attr.is_narrow_float

    found: set = set()
    for s in reversed(flat):  # (a pick's readers before the pick)
        if isinstance(s, Op) and s.dst.dtype.is_float and s.dst.dtype.bits <= 32 and s.dst in readers:
            if all(rounds(r, s.dst) for r in readers[s.dst]):
                found.add(s.dst)
    return found


class ThreadEmitter:
    SHARED_SPACE = 3
    host = None  # the host target (host_llvm.HostTarget) where the code runs on the CPU

    def __init__(self, program: ThreadProgram):
        self.program = program
        self.values: dict = {}
        self.arrays = {p.name: p for p in program.params if hasattr(p, "ndim")}
        self.rounded_by_readers = rounded_by_readers(program.body)
        self.texts: dict = {}  # printed texts -> their global strings

    # ------------------------------------------------------------------ values

    def get(self, x, r: int = 0, dtype=None):
        """Slot ``r`` of a register or immediate (a one-slot register is the same at every
        slot), converted to ``dtype`` if given."""
        if isinstance(x, Imm):
            v = constant(x)
        else:
            held = self.held(x)
            v = held[r] if len(held) > 1 else held[0]
        return v if dtype is None or dtype == x.dtype else convert(self.target, v, x.dtype, dtype)

    def slots(self, x, n: int) -> list:
        return [self.get(x, r) for r in range(n)]

    def element(self, buffer: str, index):
        """A pointer to element ``index`` (an LLVM int) of a shared buffer."""
        return self.builder.gep(self.shared[buffer], [index], inbounds=True)

    def bind_params(self, regs, args):
        for r, arg in zip(regs, args):
            arg.name = r.name
            self.values[r] = [self.builder.icmp_unsigned("!=", arg, ir.Constant(I8, 0)) if r.dtype.is_bool else arg]

    def held(self, x) -> list:
        return self.values[x]

    def define(self, x, values: list):
        self.values[x] = values

    # ------------------------------------------------------------------ statements

    def statements(self, stmts):
        for s in stmts:
            self.statement(s)

    def statement(self, s):
        method = getattr(self, f"_{type(s).__name__}", None)
        if method is None:
            raise TileCompilerError(f"the {self.TARGET} backend cannot emit {type(s).__name__}")
        method(s)

    def _Op(self, s: Op):
        self.define(s.dst, [self.op_slot(s, r) for r in range(s.dst.slots)])

    def op_slot(self, s: Op, r: int):
        if s.op == "pick":
            return self.get(s.args[0], s.attr(r))
        if s.op == "slot":
            return ir.Constant(I32, s.attr(r))
        if s.op in ("thread_id", "block_id", "num_blocks"):
            return self.special(s)
        if s.op == "pack16":
            return self.target.pack16(s.attr, self.get(s.args[0], r), self.get(s.args[1], r))
        if s.op == "pack8":  # (each float32 rounded as a store to the float8 would round it)
            return memory.narrowed_words(self.builder, [self.get(a, r) for a in s.args], s.attr, self.host)[0]
        if s.op == "tf32":  # its bits (a word for the tensor cores), or the value
            word = self.target.tf32_bits(self.get(s.args[0], r))
            return word if s.dst.dtype.name == "uint32" else self.builder.bitcast(word, F32)
        # (a 16-bit float that is only packed into words is rounded there, cvt.rn.bf16x2.f32)
        return op_value(self.target, s, [self.get(a, r) for a in s.args], s.dst not in self.rounded_by_readers)

    def _Load(self, s: Load):
        b, array = self.builder, self.arrays[s.array]
        ptr = self.get(array.reg("ptr"))
        count = s.dst.slots * s.pack // s.lanes
        if s.lanes == 1:
            elements = [(self.get(s.offset, g, INT64), self.get(s.mask, g, BOOL)) for g in range(count)]
            pads = [self.get(s.pad, g) for g in range(count)]
            values = memory.load_elements(b, s.dst.dtype, ptr, elements, pads, host=self.host)
        else:
            groups = [self.group(s, g) for g in range(count)]
            pads = [self.get(s.pad, g) for g in range(count)]
            threads = self.program.num_threads
            values = memory.load_vectors(b, s.dst.dtype, s.lanes, ptr, groups, pads, self.host, s.pack > 1, threads)
        self.define(s.dst, values)

    def _Store(self, s: Store):
        b, array = self.builder, self.arrays[s.array]
        ptr, d = self.get(array.reg("ptr")), array.dtype
        count = max(1, extent(s))
        if s.lanes == 1:
            elements = [(self.get(s.offset, g, INT64), self.get(s.mask, g, BOOL)) for g in range(count)]
            memory.store_elements(b, d, ptr, elements, [self.get(s.values, g, d) for g in range(count)], self.host)
            return
        if s.pack > 1:  # the words themselves
            values = [self.get(s.values, i) for i in range(count * s.lanes // 2)]
        else:
            values = [self.get(s.values, i, d) for i in range(count * s.lanes)]
        groups = [self.group(s, g) for g in range(count)]
        memory.store_vectors(b, d, s.lanes, ptr, groups, values, self.host, words=s.pack > 1)

    def _Print(self, s: Print):
        b = self.builder
        for r in range(extent(s)):
            with self.masked(s.mask, r) as on:
                if not on:
                    continue
                args = []
                for i, x in enumerate(s.args):  # (printf's: 64-bit integers, doubles)
                    v = self.get(x, r)
                    if s.bits and i == len(s.args) - 1:
                        args.append(self.bits64(v, x.dtype))
                    elif x.dtype.is_float:
                        args.append(v if v.type == F64 else b.fpext(v, F64))
                    else:
                        unsigned = x.dtype.is_bool or x.dtype.kind == "u"
                        args.append(v if v.type == I64 else (b.zext if unsigned else b.sext)(v, I64))
                self.print_line(s.text, args)

    def bits64(self, v, d):
        """A register's bits as memory holds them (``d``'s), in an i64."""
        raw = memory.narrow(self.builder, v, d, self.host)
        if d.is_float and d.bits >= 32:
            raw = self.builder.bitcast(raw, ir.IntType(d.bits))
        return raw if d.bits == 64 else self.builder.zext(raw, I64)

    def print_line(self, text: str, args: list):
        """printf ``text`` with ``args`` (64-bit integers and doubles), the target's way."""
        raise TileCompilerError(f"the {self.TARGET} backend cannot print")

    def text_constant(self, text: str, addrspace: int = 0):
        """``text`` as a NUL-terminated global string (one per text)."""
        glob = self.texts.get(text)
        if glob is None:
            data = bytearray(text.encode() + b"\0")
            glob = ir.GlobalVariable(
                self.module, ir.ArrayType(I8, len(data)), f"text_{len(self.texts)}", addrspace=addrspace
            )
            glob.linkage, glob.global_constant, glob.initializer = "internal", True, ir.Constant(glob.value_type, data)
            self.texts[text] = glob
        return self.builder.gep(glob, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)

    def group(self, s, g: int) -> tuple:
        """Group ``g`` of a vector access: (offset, mask, first lane, end lane); no lanes where
        groups are whole or empty (``Load``)."""
        offset, mask = self.get(s.offset, g, INT64), self.get(s.mask, g, BOOL)
        if s.first is None:
            return offset, mask, None, None
        return offset, mask, self.get(s.first, g, INT32), self.get(s.last, g, INT32)

    def _Atomic(self, s: Atomic):
        array, b = self.arrays[s.array], self.builder
        ptr, d = self.get(array.reg("ptr")), array.dtype
        if s.sem in RELEASING:
            self.fence()
        old, zero = [], ir.Constant(register_type(d), 0)
        for r in range(extent(s)):
            offset = self.get(s.offset, r, INT64)
            operands = [self.get(x, r, d) for x in (s.compare, s.value) if x is not None]
            if s.mask is None or isinstance(s.mask, Imm):
                on = s.mask is None or bool(s.mask.value)
                old.append(memory.atomic(b, s.op, d, ptr, offset, operands, self.host) if on else zero)
                continue
            before = b.block
            with b.if_then(self.get(s.mask, r, BOOL)):
                found = memory.atomic(b, s.op, d, ptr, offset, operands, self.host)
                updated = b.block
            merged = b.phi(found.type)
            merged.add_incoming(found, updated)
            merged.add_incoming(zero, before)
            old.append(merged)
        if s.sem in ACQUIRING:
            self.fence()
        self.define(s.dst, old)

    def fence(self):
        """Order this thread's memory accesses at the GPU's scope (an atomic's ``sem``); on the
        host, where the blocks of a kernel with atomics run one after another, nothing."""

    @contextlib.contextmanager
    def masked(self, mask, r):
        """Within: where ``mask`` (slot ``r``) holds; yields False where it is a false immediate."""
        if mask is None or isinstance(mask, Imm):
            yield mask is None or bool(mask.value)
            return
        with self.builder.if_then(self.get(mask, r, BOOL)):
            yield True

    def _SharedLoad(self, s: SharedLoad):
        b, out = self.builder, []
        for g in range(s.dst.slots // s.lanes):
            at = self.element(s.buffer, self.get(s.index, g))
            if s.lanes > 1:
                vector_type = ir.VectorType(at.type.pointee, s.lanes).as_pointer(self.SHARED_SPACE)
                vector = b.load(b.bitcast(at, vector_type), align=s.lanes * 4)
                out.extend(b.extract_element(vector, ir.Constant(I32, i)) for i in range(s.lanes))
            else:
                v = b.load(at)
                out.append(b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if s.dst.dtype.is_bool else v)
        self.define(s.dst, out)

    def _SharedStore(self, s: SharedStore):
        b = self.builder
        d = self.program.shared[s.buffer][0]
        for r in range(extent(s)):
            at = self.element(s.buffer, self.get(s.index, r))
            values = [self.get(s.value, r * s.lanes + i) for i in range(s.lanes)]
            if s.value.dtype.is_bool:
                values = [b.zext(v, I8) for v in values]
            else:
                values = [convert(self.target, v, s.value.dtype, d) for v in values]
            with self.masked(s.mask, r) as on:
                if on and s.add:
                    b.atomic_rmw("add", at, values[0], "monotonic")
                elif on and s.lanes > 1:
                    vector = memory.vector(b, values)
                    to = b.bitcast(at, vector.type.as_pointer(self.SHARED_SPACE))
                    b.store(vector, to, align=s.lanes * d.itemsize)
                elif on:
                    b.store(values[0], at)

    def _Loop(self, s: Loop):
        start, stop, step = (self.get(x, 0, s.index.dtype) for x in (s.start, s.stop, s.step))
        self.check_step(s, step)
        self._iterate(s, start, step, self.trip_count(start, stop, step, s.index.dtype))

    def check_step(self, s: Loop, step):
        """What a zero step does before the loop (on the GPU: nothing; the loop runs no iterations)."""

    def trip_count(self, start, stop, step, d):
        """How many times ``range(start, stop, step)`` runs, of the index's width read unsigned
        (as Python counts: no index past ``stop`` is tested, so nothing overflows; an unsigned
        step counts up; a zero step never runs, which cannot raise on the GPU)."""
        b = self.builder
        zero, one = ir.Constant(start.type, 0), ir.Constant(start.type, 1)
        if isinstance(step, ir.Constant):  # (the usual case: a division LLVM multiplies out, or none)
            bits = start.type.width
            value = step.constant & ((1 << bits) - 1)
            if value == 0:
                return zero
            negative = d.kind == "i" and value >> (bits - 1)
            size = (1 << bits) - value if negative else value
            runs = (b.icmp_signed if d.kind == "i" else b.icmp_unsigned)(">" if negative else "<", start, stop)
            span = b.sub(start, stop) if negative else b.sub(stop, start)
            count = b.add(b.udiv(b.sub(span, one), ir.Constant(start.type, size)), one) if size != 1 else span
            return b.select(runs, count, zero)
        if d.kind == "i":
            up = b.and_(b.icmp_signed(">", step, zero), b.icmp_signed("<", start, stop))
            down = b.and_(b.icmp_signed("<", step, zero), b.icmp_signed(">", start, stop))
            span = b.select(up, b.sub(stop, start), b.sub(start, stop))  # (wrapping: read unsigned, it is exact)
            size = b.select(b.icmp_signed("<", step, zero), b.sub(zero, step), step)
        else:
            up = b.and_(b.icmp_unsigned("!=", step, zero), b.icmp_unsigned("<", start, stop))
            down, span, size = ir.Constant(I1, 0), b.sub(stop, start), step
        runs = b.or_(up, down)
        span = b.select(runs, span, one)
        size = b.select(b.icmp_unsigned("==", size, zero), one, size)
        count = b.add(self.target.floor_divmod(b.sub(span, one), size, False)[0], one)
        return b.select(runs, count, zero)

    @contextlib.contextmanager
    def loop(self, start, step, count, name: str, carried=()):
        """An LLVM loop run ``count`` times (unsigned), its body built within: ``index`` from
        ``start`` by ``step`` (wrapping), and phis starting at ``carried``; yields the state,
        whose ``next`` the body sets to the phis' values for the next time round."""
        b = self.builder
        entry = b.block
        header, body, done = (b.append_basic_block(f"{name}_{what}") for what in ("header", "body", "done"))
        b.branch(header)
        b.position_at_end(header)
        index = b.phi(start.type, name=name)
        index.add_incoming(start, entry)
        ran = b.phi(count.type, name=f"{name}_ran")
        ran.add_incoming(ir.Constant(count.type, 0), entry)
        phis = [b.phi(v.type) for v in carried]
        for phi, v in zip(phis, carried):
            phi.add_incoming(v, entry)
        b.cbranch(b.icmp_unsigned("<", ran, count), body, done)
        b.position_at_end(body)
        state = types.SimpleNamespace(index=index, phis=phis, next=phis)
        yield state
        index.add_incoming(b.add(index, step), b.block)
        ran.add_incoming(b.add(ran, ir.Constant(count.type, 1)), b.block)
        for phi, v in zip(phis, state.next):
            phi.add_incoming(v, b.block)
        b.branch(header)
        b.position_at_end(done)

    def _iterate(self, s: Loop, start, step, count):
        """The loop: its index and carried registers phi nodes of the header, which after the
        loop hold the final values."""
        inits = [self.slots(v, p.slots) for p, v in zip(s.params, s.inits)]
        outside = dict(self.values)
        with self.loop(start, step, count, s.index.name, [v for values in inits for v in values]) as state:
            phis, at = {}, 0
            for p in s.params:
                phis[p], at = state.phis[at : at + p.slots], at + p.slots
            self.values[s.index] = [state.index]
            self.values.update(phis)
            self.statements(s.body)
            state.next = [v for p, r in zip(s.params, s.results) for v in self.slots(r, p.slots)]
        self.values = outside
        for p in s.params:
            self.define(p, phis[p])
