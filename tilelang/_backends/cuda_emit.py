"""Thread program → NVVM IR: the CUDA backend's kernel, built with llvmlite and compiled by NVVM.

Every register of the thread program is a Python list of LLVM values, one per slot: a
statement over ``n`` slots is built ``n`` times (what a register array holds is known at
each slot, so nothing lands in local memory and no unroller decides it). Global memory goes
through the masked access helpers of ``cuda_intrinsics.py`` (16-byte vectors with their
lane-by-lane fallback), operations through the expression table of ``llvm_values.py`` with
libdevice for math functions, tensor cores and TMA through the inline PTX of
``cuda_mma.py`` and ``cuda_tma.py``. A ``Loop`` is an LLVM loop whose carried registers are
phi nodes. Building takes milliseconds where numba's Python frontend took seconds; NVVM
then optimizes the module (``-opt=3``) and links libdevice.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from .._lower.swizzled import MODE
from .._lower.thread_ir import (
    AsyncCopy,
    AsyncWait,
    Imm,
    LdMatrix,
    Loop,
    Mbarriers,
    MbarrierWait,
    Mma,
    Op,
    Reg,
    Shuffle,
    ThreadProgram,
    TmaLoad,
    Wgmma,
    WgmmaWait,
    box_coords,
    extent,
    k_step,
    shared_alignment,
    shared_offsets,
    walk_statements,
)
from ..dtypes import bool_ as BOOL
from ..dtypes import int32 as INT32
from ..dtypes import int64 as INT64
from . import cuda_intrinsics as memory
from .cuda_arith import div_rn_f32, divide_by_shared, floor_divmod, instruction_f32
from .cuda_mma import asm_statement, ldmatrix, mma, pack, tf32_bits, wgmma, wgmma_desc, wgmma_wait
from .cuda_tma import mbarrier_op, mbarrier_try_wait, tma_load
from .llvm_emit import ThreadEmitter, param_regs, stored_type
from .llvm_values import convert

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
DATA_LAYOUT = (
    "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-"
    "v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
)
STATIC_SHARED_LIMIT = 48 * 1024  # bytes a kernel may declare statically
_SREG = {"thread_id": "tid", "block_id": "ctaid", "num_blocks": "nctaid"}


def dynamic_shared(program: ThreadProgram) -> dict:
    """Where each shared buffer starts (bytes) when they exceed the static limit: one dynamic
    allocation, buffers at aligned offsets; empty below the limit (static arrays)."""
    starts, total = shared_offsets(program.shared)
    return starts if total > STATIC_SHARED_LIMIT else {}


def emit_module(program: ThreadProgram, ir_version: tuple, launch_bounds=None) -> str:
    """The NVVM IR text of ``program``'s kernel (``launch_bounds``: maxntid[, minctasm])."""
    return str(KernelEmitter(program, ir_version, launch_bounds).module)


class CudaTarget:
    """What ``llvm_values.op_value`` asks of a target, on the GPU: libdevice's math functions,
    ``cvt`` instructions for 16-bit and TF32 rounding, division without subroutine calls
    (cuda_arith.py) and the faster instructions of :meth:`fast`."""

    def __init__(self, builder: ir.IRBuilder, rounded_by_readers: set, no_calls: bool):
        self.builder, self.rounded_by_readers, self.no_calls = builder, rounded_by_readers, no_calls
        self.widened = {}  # a float32 register value -> the 16 bits it was widened from, their dtype

    def math(self, name: str, *args):
        t = args[0].type
        if name in ("floor", "ceil"):
            fn = self.builder.module.declare_intrinsic(f"llvm.{name}", [t])
        else:
            symbol = f"__nv_{name}{'f' if t == F32 else ''}"
            fn = self.builder.module.globals.get(symbol)
            fn = fn or ir.Function(self.builder.module, ir.FunctionType(t, [t] * len(args)), symbol)
        return self.builder.call(fn, list(args))

    def rounded(self, x, d):
        return memory.rounded(self.builder, x, d)

    def pack16(self, d, lo, hi):
        """Two 16-bit floats (held as float32s) in a word, ``lo`` low: rounded by ``cvt``, or,
        where both were just widened from 16 bits (a load's values stored for the tensor cores),
        those bits as they are: no rounding to do, and LLVM sees the word they came from."""
        bits = [self.widened.get(x, (None, None)) for x in (lo, hi)]
        if any(h is None or of != d for h, of in bits):  # (bits of another 16-bit type: converted)
            return pack(self.builder, d.name, lo, hi)
        b = self.builder
        low, high = (b.zext(h, I32) for h, _ in bits)
        return b.or_(low, b.shl(high, ir.Constant(I32, 16)))

    def tf32_bits(self, x):
        return tf32_bits(self.builder, x)

    def from_bits(self, h, d):
        value = memory.widen(self.builder, h, d)
        if d.is_float and d.bits == 16:
            self.widened[value] = h, d
        return value

    def float32_odd(self, x, d):
        return memory.float32_odd(self.builder, x, d)

    def floor_divmod(self, x, y, signed: bool):
        return floor_divmod(self.builder, x, y, signed)

    def fast(self, op: Op, args):
        """CUDA's own instructions where they are faster (cuda_arith.py)."""
        d = op.dst.dtype
        if op.op == "umulhi" and d.bits >= 32:  # (LLVM made some a full 64-bit multiply of zero-extended words)
            t, c = (ir.IntType(d.bits), "r" if d.bits == 32 else "l")
            asm = ir.InlineAsm(ir.FunctionType(t, [t, t]), f"mul.hi.u{d.bits} $0, $1, $2;", f"={c},{c},{c}")
            return self.builder.call(asm, list(args))
        if not (d.is_float and d.bits <= 32 and all(a.dtype == d for a in op.args)):
            return None
        if op.op == "exp2_ftz":
            return instruction_f32(self.builder, "ex2.approx.ftz.f32", *args)
        if op.op in ("maximum", "minimum"):
            return instruction_f32(self.builder, f"{op.op[:3]}.NaN.f32", *args)
        if op.op == "div_approx":  # fast_math's `/` (_passes/fast_math.py)
            return instruction_f32(self.builder, "div.full.f32", *args)
        if op.op == "rsqrt":  # rsqrt.approx.f32, within 2 ulps (docs/dtypes.md's bound): one MUFU.RSQ
            return self.math("rsqrt", *args)  # where 1 / sqrt(x) rounded twice took ~25 instructions
        if op.op == "div":
            # a quotient rounded to 16 bits next needs no correctly rounded float32 (cuda_arith.py)
            if d.is_narrow_float or op.dst in self.rounded_by_readers:
                return instruction_f32(self.builder, "div.full.f32", *args)
            # no subroutine call in a kernel with wgmma, nor for a thread's one quotient (a row's
            # mean: the call's convention cost a bf16 rmsnorm 8 registers, 72 -> 64)
            if self.no_calls or op.dst.slots == 1:
                return div_rn_f32(self.builder, *args)
        return None


class KernelEmitter(ThreadEmitter):
    TARGET = "CUDA"

    def print_line(self, text, args):
        """CUDA's ``vprintf(format, arguments)``: the arguments laid out in a local buffer as
        printf's would be (8 bytes each here), the format in constant memory."""
        b = self.builder
        vprintf = self.module.globals.get("vprintf") or ir.Function(
            self.module, ir.FunctionType(I32, [I8.as_pointer(), I8.as_pointer()]), "vprintf"
        )
        packed = ir.LiteralStructType([a.type for a in args])
        with b.goto_entry_block():
            buffer = b.alloca(packed)
        for i, a in enumerate(args):
            b.store(a, b.gep(buffer, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        text = b.addrspacecast(self.text_constant(text, addrspace=4), I8.as_pointer())
        b.call(vprintf, [text, b.bitcast(buffer, I8.as_pointer())])

    def __init__(self, program: ThreadProgram, ir_version: tuple, launch_bounds):
        super().__init__(program)
        m = self.module = ir.Module(name=program.name)
        m.triple, m.data_layout = "nvptx64-nvidia-cuda", DATA_LAYOUT
        regs = param_regs(program)
        types = [stored_type(r.dtype) for r in regs]
        fn = self.function = ir.Function(m, ir.FunctionType(ir.VoidType(), types), name=program.name)
        self.entry = fn.append_basic_block("entry")  # (allocas only; branches to the body at the end)
        self.builder = ir.IRBuilder(fn.append_basic_block("body"))
        body_start = self.builder.block
        self.bind_params(regs, fn.args)
        self.shared = self._shared_buffers()
        # ptxas serializes every wgmma of a function that calls a subroutine (C7509): such
        # kernels divide floats without div.rn.f32's (cuda_arith.py)
        no_calls = any(isinstance(s, Wgmma) for s in walk_statements(program.body))
        self.target = CudaTarget(self.builder, self.rounded_by_readers, no_calls)
        self.exit_waits = _exit_waits(program.body)
        self.moved_waits = {id(w) for waits in self.exit_waits.values() for w in waits}
        self.statements(program.body)
        self.builder.ret_void()
        self.builder.position_at_end(self.entry)
        self.builder.branch(body_start)
        self._annotate(launch_bounds, ir_version)

    # ------------------------------------------------------------------ module

    def _annotate(self, launch_bounds, ir_version):
        m = self.module
        marks = [("kernel", 1)] + list(zip(("maxntidx", "minctasm"), launch_bounds or ()))
        for key, value in marks:
            mark = [self.function, ir.MetaDataString(m, key), ir.Constant(I32, value)]
            m.add_named_metadata("nvvm.annotations", mark)
        m.add_named_metadata("nvvmir.version", [ir.Constant(I32, v) for v in ir_version])

    def _shared_buffers(self) -> dict:
        """Buffer name -> a pointer to its first element in shared memory (addrspace 3): static
        arrays, or places in one dynamic allocation past the static limit. Elements have their
        register type (16-bit floats as float32, as the lowering sized them), bools a byte."""
        starts, out = dynamic_shared(self.program), {}
        base = None
        for name, (d, size) in self.program.shared.items():
            t = stored_type(d)
            if starts:
                if base is None:
                    base = ir.GlobalVariable(self.module, ir.ArrayType(I8, 0), "dynamic_shared", addrspace=3)
                    base.linkage, base.align = "external", 1024
                first = self.builder.bitcast(base, t.as_pointer(3))
                out[name] = self.builder.gep(first, [ir.Constant(I64, starts[name] // d.itemsize)], inbounds=True)
            else:
                array = ir.GlobalVariable(self.module, ir.ArrayType(t, size), name, addrspace=3)
                array.linkage, array.align = "internal", max(16, shared_alignment(name))
                array.initializer = ir.Constant(array.value_type, ir.Undefined)
                out[name] = self.builder.gep(array, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
        return out

    # ------------------------------------------------------------------ values

    def address(self, buffer: str, index):
        """The 32-bit shared address of element ``index`` of a buffer (inline PTX takes these)."""
        return self.builder.ptrtoint(self.element(buffer, index), I32)

    # ------------------------------------------------------------------ statements

    def _Op(self, s: Op):
        """A thread's float32 quotients by few divisors (a softmax's ``e / sum``: one) share their
        reciprocals and divide by fmas (cuda_arith.divide_by_shared): ``div.rn.f32`` a quotient
        was ~10 instructions, and its subroutine calls held the softmax at 48 registers (34 now)."""
        n, d = s.dst.slots, s.dst.dtype
        if s.op == "div" and d.name == "float32" and all(a.dtype == d for a in s.args):
            x, b = s.args
            divisors = self.slots(b, n) if not isinstance(b, Imm) else [self.get(b)] * n  # (one constant)
            if 2 * len({id(v) for v in divisors}) <= n and s.dst not in self.rounded_by_readers:
                self.define(s.dst, divide_by_shared(self.builder, self.slots(x, n), divisors))
                return
        super()._Op(s)

    def statements(self, stmts):
        run = []  # consecutive ops and asynchronous copies: the copies written in two versions
        for s in stmts:
            if isinstance(s, (Op, AsyncCopy)):
                run.append(s)
                continue
            self.run(run)
            run = []
            self.statement(s)
        self.run(run)

    def run(self, run):
        if not any(isinstance(s, AsyncCopy) for s in run):
            for s in run:
                self.statement(s)
            return
        copies = [s for s in run if isinstance(s, AsyncCopy)]
        if any(isinstance(s.aligned, Imm) and not s.aligned.value for s in copies):
            for s in run:
                self.copy(s, whole=False) if isinstance(s, AsyncCopy) else self.statement(s)
            return
        # one-slot ops reading nothing else the run defines first (the tests read some); the
        # others in each version, as NVVM keeps their values alive no longer than the copies
        early, later = [], set()
        for s in run:
            if isinstance(s, Op) and s.dst.slots == 1 and not later & set(s.args):
                early.append(s)
            elif isinstance(s, Op):
                later.add(s.dst)
        if any(s.aligned in later for s in copies):  # (a test not computed before the versions: the general one)
            for s in run:
                self.copy(s, whole=False) if isinstance(s, AsyncCopy) else self.statement(s)
            return
        for s in early:
            self.statement(s)
        b = self.builder
        tests = [self.get(s.aligned, 0, BOOL) for s in copies]
        for name in sorted({s.array for s in copies}):
            ptr = self.get(self.arrays[name].reg("ptr"))
            tests.append(b.icmp_unsigned("==", b.and_(ptr, ir.Constant(I64, 15)), ir.Constant(I64, 0)))
        rest = [s for s in run if not any(s is e for e in early)]
        before, versions = dict(self.values), []
        with b.if_else(functools.reduce(b.and_, tests)) as (whole, general):
            for arm, is_whole in ((whole, True), (general, False)):
                with arm:
                    self.values = dict(before)
                    self.slot_major(rest, is_whole)
                    versions.append((dict(self.values), b.block))
        self.values = before
        (one, one_block), (other, other_block) = versions
        for x in (s.dst for s in rest if isinstance(s, Op)):  # (what later statements may read)
            self.values[x] = self.join(one[x], one_block, other[x], other_block)

    def join(self, one: list, one_block, other: list, other_block) -> list:
        """Phi nodes merging the values ``one`` (from ``one_block``) and ``other``, slot by slot."""
        joined = []
        for u, v in zip(one, other):
            phi = self.builder.phi(u.type)
            phi.add_incoming(u, one_block)
            phi.add_incoming(v, other_block)
            joined.append(phi)
        return joined

    def slot_major(self, run, whole):
        n = {extent(s) for s in run}
        defined = {s.dst for s in run if isinstance(s, Op)}
        if len(n) > 1 or any(s.op == "pick" and s.args[0] in defined for s in run if isinstance(s, Op)):
            for s in run:
                self.copy(s, whole) if isinstance(s, AsyncCopy) else self.statement(s)
            return
        for s in run:
            if isinstance(s, Op):
                self.values[s.dst] = [None] * s.dst.slots
        for r in range(n.pop()):
            for s in run:
                if isinstance(s, Op):
                    self.values[s.dst][r] = self.op_slot(s, r)
                else:
                    self.copy(s, whole, [r])

    def special(self, s: Op):
        """A thread or block id, or the grid's size: the special registers."""
        axis = "xyz"[s.attr] if s.op != "thread_id" else "x"
        name = f"llvm.nvvm.read.ptx.sreg.{_SREG[s.op]}.{axis}"
        return self.builder.call(self.module.declare_intrinsic(name, fnty=ir.FunctionType(I32, [])), [])

    def _Barrier(self, s):
        barrier = self.module.declare_intrinsic("llvm.nvvm.barrier0", fnty=ir.FunctionType(ir.VoidType(), []))
        self.builder.call(barrier, [])

    def _Shuffle(self, s: Shuffle):
        b, d = self.builder, s.dst.dtype
        fn = self.module.declare_intrinsic(f"llvm.nvvm.shfl.sync.{s.mode}.i32", fnty=ir.FunctionType(I32, [I32] * 4))
        c = 0 if s.mode == "up" else s.keep << 8 | 31  # (PTX's c: the segment mask, the clamp lane)

        def exchange(word):
            return b.call(fn, [ir.Constant(I32, -1), word, ir.Constant(I32, s.b), ir.Constant(I32, c)])

        out = []
        for r in range(s.dst.slots):
            v = self.get(s.src, r)
            if d.bits == 64:
                bits = b.bitcast(v, I64) if d.is_float else v
                lo, hi = b.trunc(bits, I32), b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32)
                lo, hi = exchange(lo), exchange(hi)
                bits = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
                out.append(b.bitcast(bits, F64) if d.is_float else bits)
            elif v.type == F32:
                out.append(b.bitcast(exchange(b.bitcast(v, I32)), F32))
            else:
                word = exchange(convert(self.target, v, d, INT32))
                out.append(convert(self.target, word, INT32, d))
        self.values[s.dst] = out

    def copy(self, s: AsyncCopy, whole: bool, groups=None):
        """Each group's copy: where ``whole`` (the window aligned and whole or empty groups,
        the array's pointer too) one cp.async, else each with its fallback for misaligned and
        partial groups."""
        b = self.builder
        d = self.arrays[s.array].dtype
        ptr = self.get(self.arrays[s.array].reg("ptr"))
        base = self.get(s.base, 0, INT64)
        for r in range(extent(s)) if groups is None else groups:
            words = b.bitcast(self.element(s.buffer, self.get(s.index, r)), I32.as_pointer(3))
            to = b.ptrtoint(words, I32)
            group = (self.get(s.offset, r, INT64), self.get(s.mask, r, BOOL))
            group += (self.get(s.first, r, INT32), self.get(s.last, r, INT32))
            if whole:
                memory.whole_copy(b, d.itemsize, to, ptr, base, *group)
            else:
                memory.async_copy(b, d, words, to, ptr, base, *group)

    def _AsyncCommit(self, s):
        asm_statement(self.builder, "cp.async.commit_group;")

    def _AsyncWait(self, s: AsyncWait):
        asm_statement(self.builder, f"cp.async.wait_group {s.pending};")

    def _ProxyFence(self, s):
        asm_statement(self.builder, "fence.proxy.async.shared::cta;")

    def fence(self):
        asm_statement(self.builder, "fence.acq_rel.gpu;")

    def _LdMatrix(self, s: LdMatrix):
        out = []
        for g in range(s.dst.slots // 4):
            out.extend(ldmatrix(self.builder, s.trans, self.address(s.buffer, self.get(s.index, g))))
        self.values[s.dst] = out

    def _Mma(self, s: Mma):
        """k-steps outermost: each fragment sums them in order as before, but one k-step's
        operands are used up before the next's are needed (all of a tile's live at once took
        160 registers of a 128x128 tf32 dot's 128: ptxas 13.0 spilled), and consecutive
        instructions accumulate into different fragments (no chain of dependent ones)."""
        mi, ni, ki = s.shape
        name = "tf32" if s.dtype.name == "float32" else s.dtype.name
        out = [self.get(s.c, slot) for slot in range(s.dst.slots)]
        for k in range(ki):
            for i in range(mi):
                for j in range(ni):
                    c, a, bw = 4 * (j + ni * i), 4 * (k + ki * i), 2 * (k + ki * j)
                    words = [self.get(s.a, a + q) for q in range(4)], [self.get(s.b, bw + q) for q in range(2)]
                    out[c : c + 4] = mma(self.builder, name, *words, out[c : c + 4])
        self.values[s.dst] = out

    def _Wgmma(self, s: Wgmma):
        """Descriptors, then fence, one instruction per (mb, nb, k-step), commit and wait."""
        b = self.builder
        mb, nb, n, ks = s.shape
        descs = {}
        for key, buffer, index, tile, k_major in (
            ("a", s.a_buffer, s.a_index, s.a_tile, s.a_k_major),
            ("b", s.b_buffer, s.b_index, s.b_tile, s.b_k_major),
        ):
            if buffer is not None:  # (a may come from registers)
                address = self.address(buffer, self.get(index))
                descs[key] = wgmma_desc(b, address, *tile.strides(k_major), MODE[tile.width])
        undefined = ir.Constant(F32, ir.Undefined)
        acc = self.slots(s.c, s.dst.slots) if s.c is not None else [undefined] * s.dst.slots
        asm_statement(b, "wgmma.fence.sync.aligned;")
        ta, tb = s.a_tile, s.b_tile
        trans_a, trans_b = int(not s.a_k_major), int(not s.b_k_major)
        for i in range(mb):
            for j in range(nb):
                first = n // 2 * (j + nb * i)
                for kk in range(ks):
                    k = k_step(s.dtypes[0]) * kk
                    desc_b = b.add(descs["b"], ir.Constant(I64, tb.start(n * j, k, s.b_k_major) >> 4))
                    if s.a_regs is None:
                        a = b.add(descs["a"], ir.Constant(I64, ta.start(64 * i, k, s.a_k_major) >> 4))
                    else:
                        word = ta.word(i, kk)
                        a = [self.get(s.a_regs, word + q) for q in range(4)]
                    add = s.c is not None or kk > 0  # (no accumulator: the first k-step adds to nothing)
                    part = acc[first : first + n // 2]
                    acc[first : first + n // 2] = wgmma(b, s.dtypes, part, a, desc_b, trans_a, trans_b, add)
        asm_statement(b, "wgmma.commit_group.sync.aligned;")
        self.values[s.dst] = acc
        if s.pending:  # (untied: the accumulators are still in flight)
            asm_statement(b, f"wgmma.wait_group.sync.aligned {s.pending};")

    def wait(self, acc: Reg, pending: int = 0):
        """All but the last ``pending`` wgmma groups done, ``acc``'s registers tied to the wait
        (none is read before it)."""
        self.values[acc] = wgmma_wait(self.builder, self.slots(acc, acc.slots), pending)

    def _WgmmaWait(self, s: WgmmaWait):
        if id(s) not in self.moved_waits:
            self.wait(s.acc, s.pending)

    def _Mbarriers(self, s: Mbarriers):
        with self.builder.if_then(self._thread_zero()):
            for i in range(s.count):
                mbarrier_op(self.builder, "init" if s.valid else "inval", self.address(s.buffer, ir.Constant(I32, i)))
            if s.valid:
                asm_statement(self.builder, "fence.mbarrier_init.release.cluster;")

    def _thread_zero(self):
        tid = self.module.declare_intrinsic("llvm.nvvm.read.ptx.sreg.tid.x", fnty=ir.FunctionType(I32, []))
        return self.builder.icmp_unsigned("==", self.builder.call(tid, []), ir.Constant(I32, 0))

    def _TmaLoad(self, s: TmaLoad):
        """Thread 0 arms the stage's mbarrier, then a ``cp.async.bulk.tensor`` per box."""
        b = self.builder
        with b.if_then(b.and_(self._thread_zero(), self.get(s.pred, 0, BOOL))):
            bar = self.address(s.barriers, self.get(s.stage))
            mbarrier_op(b, "expect_tx", bar, ir.Constant(I32, s.bytes))
            for buffer, at, m, coords in zip(s.buffers, s.indices, s.maps, box_coords(s)):
                tma_load(b, m, self.address(buffer, self.get(at)), bar, [self.get(c, 0, INT32) for c in coords])

    def _MbarrierWait(self, s: MbarrierWait):
        b = self.builder
        bar, parity = self.address(s.barriers, self.get(s.stage)), self.get(s.parity, 0, INT32)
        spin, done = b.append_basic_block("mbarrier_wait"), b.append_basic_block("mbarrier_done")
        b.branch(spin)
        b.position_at_end(spin)
        ready = b.icmp_unsigned("!=", mbarrier_try_wait(b, bar, parity), ir.Constant(I32, 0))
        b.cbranch(ready, done, spin)
        b.position_at_end(done)

    # ------------------------------------------------------------------ loops

    def _Loop(self, s: Loop):
        waits = self.exit_waits.get(id(s))
        if not waits:
            return super()._Loop(s)
        b = self.builder
        start, stop, step = (self.get(x, 0, s.index.dtype) for x in (s.start, s.stop, s.step))
        # dots left in flight: the loop under its own test, their waits first on its exit edge. ptxas
        # serializes every wgmma of the kernel (C7514) when any instruction comes between the loop's
        # end and the wait, and LLVM sinks values computed before the loop (used after it) to the top
        # of the block after it: under the test, they land after it
        before = dict(self.values)
        count = self.trip_count(start, stop, step, s.index.dtype)
        runs = b.icmp_unsigned("!=", count, ir.Constant(count.type, 0))
        entry = b.block
        loop, merge = b.append_basic_block("guarded_loop"), b.append_basic_block("guarded_done")
        b.cbranch(runs, loop, merge)
        b.position_at_end(loop)
        self._iterate(s, start, step, count)
        for w in waits:
            self.wait(w.acc)
        b.branch(merge)
        after, ran = dict(self.values), b.block
        b.position_at_end(merge)
        self.values = dict(before)
        for x in s.params + [w.acc for w in waits]:
            if x in s.params:  # (where the loop does not run: the init)
                skipped = self.slots(s.inits[s.params.index(x)], x.slots)
            else:
                skipped = before[x] if len(before[x]) > 1 else before[x] * x.slots
            ended = after[x] if len(after[x]) > 1 else after[x] * x.slots
            self.values[x] = self.join(skipped, entry, ended, ran)


def _exit_waits(stmts, found=None) -> dict:
    """Loop id -> the ``WgmmaWait`` statements right after it (for its dots left in flight),
    which the emitter puts on the loop's exit edge."""
    found = {} if found is None else found
    for i, s in enumerate(stmts):
        if isinstance(s, Loop):
            _exit_waits(s.body, found)
            waits = []
            for after in stmts[i + 1 :]:
                if not isinstance(after, WgmmaWait) or after.pending:
                    break
                waits.append(after)
            if waits:
                found[id(s)] = waits
    return found
