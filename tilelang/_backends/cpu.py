"""The CPU backend: the same thread program the GPU runs, compiled with ``numba.njit``.

A block's threads run as loops: the statements between two barriers (or around a warp
shuffle) become one ``for t in range(THREADS)`` loop, a *phase*. A register used in one
phase only is a plain local; one that lives across phases is an array indexed by thread.
Shuffles read the source array at ``t ^ xor``; shared memory is a per-block array; loops
whose bodies synchronise run at block level with their phases inside. Blocks run in
parallel (``prange``) unless the kernel has atomics. So the CPU executes exactly what
the GPU would, barriers and shuffles included, and hypothesis can test the lowering.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading

import numba
import numpy as np

from .._lower.thread_ir import (
    ArrayParam,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Atomic,
    Barrier,
    Imm,
    LdMatrix,
    Load,
    Loop,
    Mbarriers,
    MbarrierWait,
    Mma,
    ProxyFence,
    Reg,
    SharedLoad,
    SharedStore,
    Shuffle,
    Store,
    ThreadProgram,
    TmaLoad,
    Wgmma,
    WgmmaWait,
    array_reg,
    box_coords,
    registers,
    tensor_map_ok,
    walk_statements,
)
from ..errors import TileCompilerError, TileValueError
from .cpu_intrinsics import INVALID, ZeroStep
from .cuda import cache_dir
from .numba_source import SourceWriter, code_type_name, lane_slot


def _synchronises(s) -> bool:
    if isinstance(s, (Barrier, Shuffle, Mma, LdMatrix, Wgmma)):
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


def _ints(*values) -> str:
    """Arguments of the warp-collective helpers typed int64, not literals: numba compiled a
    helper once per literal value (63 specializations of wgmma_m64 in a test run)."""
    return ", ".join(f"int64({int(v) if isinstance(v, bool) else v})" for v in values)


class CpuWriter(SourceWriter):
    FMOD = "np.fmod"  # numba has no math.fmod on the CPU

    def __init__(self, program: ThreadProgram, parallel: bool):
        super().__init__(program)
        self.parallel = parallel
        self.loops: list = []  # loops with a runtime step, in ZeroStep numbering
        self.uniform: set = set()  # indices of block-level loops: plain scalars
        self.thread = "t"  # the thread whose registers code refers to
        self.async_buffers = sorted({s.buffer for s in walk_statements(program.body) if isinstance(s, AsyncCopy)})
        self._classify(program.body)

    def _classify(self, stmts):
        seen: dict = {}
        shared = set()  # one-slot registers living across phases
        counter = iter(range(10**9))

        def visit(stmts):
            for kind, item in _split(stmts):
                if kind == "threads":
                    phase = next(counter)
                    for r in _registers(item):
                        if isinstance(r, Reg):
                            seen.setdefault(r, set()).add(phase)
                elif kind == "shuffle":
                    shared.update(r for s in item for r in (s.dst, s.src) if isinstance(r, Reg))
                elif kind == "warp":
                    shared.update(x for x in registers(item, item.DEFS + item.USES) if isinstance(x, Reg))
                else:
                    self.uniform.add(item.index)
                    shared.update(r for r in (item.start, item.stop, item.step) if isinstance(r, Reg))
                    shared.update(item.params)
                    shared.update(r for r in (*item.inits, *item.results) if isinstance(r, Reg))
                    visit(item.body)

        visit(stmts)
        params = {r for p in self.program.params for r in (p.regs() if isinstance(p, ArrayParam) else [p.reg])}
        shared.update(r for r, phases in seen.items() if len(phases) > 1)
        shared.update(r for r in seen if r.slots > 1)
        shared -= params | self.uniform | self.local
        # register arrays and registers living across phases: rows of a (threads, rows) table per type
        self.rows: dict = {}
        for r in sorted(shared, key=lambda r: r.name):
            table = self.rows.setdefault(code_type_name(r.dtype), {})
            table[r] = sum(x.slots for x in table)

    def ref(self, x, at=None) -> str:
        if isinstance(x, Reg) and x in self.rows.get(code_type_name(x.dtype), ()):
            name = code_type_name(x.dtype)
            base = self.rows[name][x]
            at = self.at if at is None else at
            row = base if x.slots == 1 else (base + at if isinstance(at, int) else f"{base} + {at}")
            return f"regs_{name}[{self.thread}, {row}]"
        return super().ref(x, at)

    # -- rendering with per-thread registers -------------------------------------

    def source(self) -> str:
        p = self.program
        parallel = self.parallel
        self.header("njit, prange, get_thread_id", "cpu_intrinsics")
        self.emit(f"@njit(parallel={parallel}, error_model='numpy', cache=True, pipeline_class=LeanCompiler)", 0)
        args = ["grid_x", "grid_y", "grid_z"]
        for q in p.params:
            if isinstance(q, ArrayParam):
                args += [f"{q.name}__buf", f"{q.name}__origin"]
        args += self.signature() + [f"{name}__all" for name, _, _ in self.scratch()]
        self.emit(f"def {p.name}({', '.join(args)}):", 0)
        self.emit(f"for block in {'prange' if parallel else 'range'}(grid_x * grid_y * grid_z):", 4)
        self.emit("bx = int32(block % grid_x)", 8)
        self.emit("by = int32((block // grid_x) % grid_y)", 8)
        self.emit("bz = int32(block // (grid_x * grid_y))", 8)
        self.emit(f"worker = {'get_thread_id()' if parallel else '0'}", 8)
        for name, _, _ in self.scratch():
            self.emit(f"{name} = {name}__all[worker]", 8)
        for name in self.async_buffers:  # no copy in flight yet
            self.emit(f"{name}__group[:] = -1", 8)
        if self.async_buffers:
            self.emit("async_groups[:] = 0", 8)
        self.phases(p.body, 8)
        return self.module()

    def scratch(self) -> list:
        """``(name, NumPy dtype, shape)`` of each block's shared buffers and register tables: the
        caller passes one per worker thread (allocating them in the kernel made numba compile
        np.zeros for every dtype and rank, ~0.1 s each)."""
        out = []
        for name, (d, size) in self.program.shared.items():
            out.append((name, np.dtype(code_type_name(d).replace("boolean", "bool")), (size,)))
        for name, table in self.rows.items():
            shape = (self.program.num_threads, sum(x.slots for x in table))
            out.append((f"regs_{name}", np.dtype(name.replace("boolean", "bool")), shape))
        for name in self.async_buffers:  # the words in flight, their group and the thread copying
            size = self.program.shared[name][1]
            words = np.dtype(code_type_name(self.program.shared[name][0]))  # (uint32, or float32 for float32s)
            out += [(f"{name}__pending", words, (size,)), (f"{name}__group", np.dtype("int64"), (size,))]
            out.append((f"{name}__owner", np.dtype("int64"), (size,)))
        if self.async_buffers:
            out.append(("async_groups", np.dtype("int64"), (self.program.num_threads,)))
        return out

    def phases(self, stmts, indent):
        threads = self.program.num_threads
        for kind, item in _split(stmts):
            if kind == "threads":
                self.emit(f"for t in range({threads}):", indent)
                self.body(item, indent + 4)
            elif kind == "shuffle":
                self.emit(f"for t in range({threads}):", indent)
                for s in item:
                    inner = indent + 4
                    if s.dst.slots > 1:
                        self.emit(f"for r in range({s.dst.slots}):", inner)
                        self.at, inner = "r", inner + 8 - 4
                    self.thread = f"t ^ {s.xor}"
                    source = self.ref(s.src)
                    self.thread = "t"
                    self.emit(f"{self.ref(s.dst)} = {source}", inner)
                    self.at = 0
            elif kind == "warp":  # mma or ldmatrix: all lanes' registers at once
                self.collective(item, indent)
            else:
                self.loop(item, indent)

    def collective(self, s, indent):
        def row(x):
            return self.rows[code_type_name(x.dtype)][x]

        threads = self.program.num_threads
        if isinstance(s, Wgmma):
            return self.wgmma(s, indent, row)
        if isinstance(s, Mma):
            rows = _ints(row(s.a), row(s.b))
            args = f"regs_uint32, {rows}, regs_float32, {_ints(row(s.c), row(s.dst), threads)}"
            kind = ("float16", "bfloat16", "float32").index(s.dtype.name)  # (float32: TF32 words)
            self.emit(f"mma_m16n8({args}, {_ints(*s.shape, kind)})", indent)
        else:
            groups = s.dst.slots // 4
            args = f"regs_uint32, {_ints(row(s.dst))}, {s.buffer}, regs_int32, {_ints(row(s.index), groups, threads)}"
            self.emit(f"ldmatrix_x4({args}, {_ints(s.trans)})", indent)

    def wgmma(self, s: Wgmma, indent, row):
        """Each warpgroup's instructions from its descriptors' fields (cpu_intrinsics.wgmma_m64)."""
        mb, nb, n, ks = s.shape
        for g in range(self.program.num_threads // 128):
            self.thread = str(128 * g)  # (the operands' indices are uniform in a warpgroup)
            operands = []
            for buffer, index, tile, k_major, blocks, size in (
                (s.a_buffer, s.a_index, s.a_tile, s.a_k_major, mb, 64),
                (s.b_buffer, s.b_index, s.b_tile, s.b_k_major, nb, n),
            ):
                in_registers = buffer is None  # the words of a's fragments: its row of the uint32 table
                steps = [
                    tile.word(i, kk) if in_registers else tile.start(size * i, 16 * kk, k_major)
                    for i in range(blocks)
                    for kk in range(ks)
                ]
                # a module-level array (numba freezes it): one compile of wgmma_m64 for any count
                steps = self.constants.setdefault(f"np.array({steps}, np.int64)", f"steps_{len(self.constants)}")
                if in_registers:  # (a_buf unused: the words come as the last argument)
                    none = self.constants.setdefault("np.zeros(0, np.uint32)", "no_buffer")
                    operands.append(f"{none}, {_ints(row(s.a_regs))}, {steps}, {_ints(0, 0, 16, True)}")
                else:
                    lbo, sbo = tile.strides(k_major)
                    operands.append(f"{buffer}, 4 * {self.ref(index)}, {steps}, {_ints(lbo, sbo, tile.width, k_major)}")
            self.thread = "t"
            rows = f"regs_float32, {_ints(-1 if s.c is None else row(s.c), row(s.dst), 128 * g)}"
            words = (
                "regs_uint32"
                if s.a_regs is not None
                else self.constants.setdefault("np.zeros((0, 0), np.uint32)", "no_words")
            )
            flags = _ints(mb, nb, n, ks, s.dtype.name == "bfloat16")
            self.emit(f"wgmma_m64({rows}, {', '.join(operands)}, {flags}, {words})", indent)

    def loop(self, s: Loop, indent):
        threads = self.program.num_threads
        if s.params:
            self.emit(f"for t in range({threads}):", indent)
            self.copy(s.params, s.inits, indent + 4)
        bounds = ", ".join(self.uniform_ref(x) for x in (s.start, s.stop, s.step))
        self.before_loop(s, indent, self.uniform_ref)
        self.emit(f"for {s.index.name} in range({bounds}):", indent)
        self.phases(s.body, indent + 4)
        if s.params:
            self.emit(f"for t in range({threads}):", indent + 4)
            self.copy(s.params, s.results, indent + 8)

    def before_loop(self, loop: Loop, indent, ref=None):
        """A zero step raises ``ZeroStep(i)``, ``i`` naming the loop (numba raises constants only)."""
        if not isinstance(loop.step, Imm):
            self.loops.append(loop)
            self.emit(f"if {(ref or self.ref)(loop.step)} == 0:", indent)
            self.emit(f"raise ZeroStep({len(self.loops) - 1})", indent + 4)

    def uniform_ref(self, x):
        self.thread = "0"
        try:
            return self.ref(x)
        finally:
            self.thread = "t"

    def special(self, op):
        if op.op == "thread_id":
            return "int32(t)"
        if op.op == "block_id":
            return ("bx", "by", "bz")[op.attr]
        if op.op == "num_blocks":
            return f"int32({('grid_x', 'grid_y', 'grid_z')[op.attr]})"
        return super().special(op)

    def memory(self, array, offset, i=0):
        """The element ``offset + i`` of an array argument (not :meth:`element`, a register's slot)."""
        return f"{array}__buf[{array}__origin + {self.ref(offset)}{f' + {i}' if i else ''}]"

    def statement(self, s, indent):
        if isinstance(s, (Load, Store)):
            d = self.arrays[s.array].dtype
            lane = "i" if s.lanes > 1 else 0
            ok = (
                self.ref(s.mask)
                if s.lanes == 1
                else f"{self.ref(s.mask)} and {self.ref(s.first)} <= i < {self.ref(s.last)}"
            )
            target = self.memory(s.array, s.offset, lane)
            if isinstance(s, Load) and s.pack > 1:  # raw 16-bit bits, two lanes to a uint32 word
                self.emit(f"for w in range({s.lanes // 2}):", indent)
                for half in (0, 1):
                    self.emit(f"i = 2 * w + {half}", indent + 4)
                    self.emit(f"h{half}_ = uint32({target} if {ok} else {self.ref(s.pad)})", indent + 4)
                self.emit(f"{self.ref(s.dst, lane_slot(self.at, s.lanes // 2, 'w'))} = h0_ | (h1_ << 16)", indent + 4)
                return
            if s.lanes > 1:
                self.emit(f"for i in range({s.lanes}):", indent)
                indent += 4
            if isinstance(s, Load):  # (into uint16 registers: a 16-bit float's raw bits)
                value = f"{_from_memory(s.dst.dtype, target)} if {ok} else {self.ref(s.pad)}"
                self.emit(f"{self.ref(s.dst, lane_slot(self.at, s.lanes, lane))} = {value}", indent)
            else:
                value = _to_memory(d, self.ref(s.values, lane_slot(self.at, s.lanes, lane)))
                self.emit(f"if {ok}:", indent)
                self.emit(f"{target} = {value}", indent + 4)
        elif isinstance(s, Atomic):
            d = self.arrays[s.array].dtype
            target, v = self.memory(s.array, s.offset), self.ref(s.value)
            current = _from_memory(d, target)
            combined = {"add": f"{current} + {v}", "max": f"max({current}, {v})", "min": f"min({current}, {v})"}[s.op]
            if s.op != "add" and d.is_float:
                cmp = ">" if s.op == "max" else "<"
                combined = f"{v} if ({v} {cmp} {current} or {v} != {v}) else {current}"
            value = f"{code_type_name(d)}({combined})"
            if d.is_float and d.bits == 16:
                value = f"round_{d.name}({value})"
            self.masked(s.mask, f"{target} = {_to_memory(d, value)}", indent)
        elif isinstance(s, AsyncCopy):  # into the words in flight: moved to the buffer at the wait
            b, array = s.buffer, s.array
            offset = f"wrapping_add({self.ref(s.base)}, {self.ref(s.offset)})"
            lanes = ", ".join([offset, *(self.ref(x) for x in (s.mask, s.first, s.last, s.aligned))])
            copy = "async_copy" if self.arrays[array].dtype.itemsize == 2 else "async_copy_words"
            self.emit(f"{copy}({b}__pending, {b}__group, {b}__owner, {self.ref(s.index)}, {array}__buf, "
                      f"{array}__origin, {lanes}, async_groups[t], t)", indent)  # fmt: skip
        elif isinstance(s, AsyncCommit):
            self.emit("async_groups[t] += 1", indent)
        elif isinstance(s, AsyncWait):  # this thread's copies of the groups done land in shared memory
            for b in self.async_buffers:
                self.emit(f"async_land({b}, {b}__pending, {b}__group, {b}__owner, t, async_groups[t] - {s.pending})",
                          indent)  # fmt: skip
        elif isinstance(s, Mbarriers):
            self.emit("if t == 0:", indent)
            self.emit(f"{s.buffer}[:{s.count}] = {0 if s.valid else INVALID}", indent + 4)
        elif isinstance(s, TmaLoad):  # lands now, completing the stage's phase (cpu_intrinsics.tma_box)
            self.emit(f"if t == 0 and {self.ref(s.pred)}:", indent)
            stage = self.ref(s.stage)
            self.emit(f"{s.barriers}[{stage}] += 1", indent + 4)
            for buffer, at, m, coords in zip(s.buffers, s.indices, s.maps, box_coords(s)):
                tmap = self.program.tensor_maps[m]
                axes = range(len(tmap.box) - 1, -1, -1)  # innermost first
                shape, strides = ([self.ref(array_reg(tmap.array, w, d)) for d in axes] for w in ("shape", "stride"))
                args = [f"({', '.join(xs)},)" for xs in (shape, strides, [self.ref(x) for x in coords])]
                box = f"({', '.join(str(tmap.box[d]) for d in axes)},)"
                self.emit(f"tma_box({buffer}, {self.ref(at)}, {tmap.array}__buf, {tmap.array}__origin, "
                          f"{', '.join(args)}, {box}, {tmap.swizzle})", indent + 4)  # fmt: skip
        elif isinstance(s, MbarrierWait):  # (a TmaLoad completed it as it was issued)
            self.emit(f"mbarrier_wait({s.barriers}, {self.ref(s.stage)}, {self.ref(s.parity)})", indent)
        elif isinstance(s, (ProxyFence, WgmmaWait)):  # (one proxy; a wgmma is done when issued)
            self.emit("pass", indent)
        elif isinstance(s, SharedLoad) and s.lanes > 1:
            self.emit(f"at_ = {self.ref(s.index)}", indent)  # (an inlined index is rendered once)
            for i in range(s.lanes):
                self.emit(f"{self.ref(s.dst, lane_slot(self.at, s.lanes, i))} = {s.buffer}[at_ + {i}]", indent)
        elif isinstance(s, SharedLoad):
            value = f"{s.buffer}[{self.ref(s.index)}]"
            self.emit(
                f"{self.ref(s.dst)} = {value} != 0" if s.dst.dtype.is_bool else f"{self.ref(s.dst)} = {value}", indent
            )
        elif isinstance(s, SharedStore):  # (a phase runs its threads one after another: += is atomic)
            eq = "+=" if s.add else "="
            self.masked(s.mask, f"{s.buffer}[{self.ref(s.index)}] {eq} {self.ref(s.value)}", indent)
        else:
            raise TileCompilerError(f"the CPU backend cannot emit {type(s).__name__} inside a phase")


_MODULES_LOCK = threading.Lock()


def write_module(source: str, prefix: str):
    """Write ``source`` to ``<cache>/<prefix>_<hash>.py`` and import it (once per process,
    whichever threads ask at the same time; a module that fails to import is not kept)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    name = f"tilelang_{prefix}_{digest}"
    with _MODULES_LOCK:
        if name in sys.modules:
            return sys.modules[name]
        path = os.path.join(cache_dir(), name + ".py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                f.write(source)
            os.replace(tmp, path)  # atomic: concurrent writers leave one complete file
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module


def _from_memory(d, text):
    if d.is_float and d.bits == 16:
        return f"{d.name}_value({text})"
    return text


def _to_memory(d, text):
    if d.is_float and d.bits == 16:
        return f"{d.name}_bits({text})"
    return text


class _Owner:
    """Exposes an array's memory from its lowest addressed element (negative strides too)."""

    def __init__(self, array):
        self.array = array
        itemsize = array.itemsize
        strides = [s // itemsize for s in array.strides]
        low = sum(min(0, (n - 1) * s) for n, s in zip(array.shape, strides)) if array.size else 0
        high = sum(max(0, (n - 1) * s) for n, s in zip(array.shape, strides)) if array.size else 0
        self.origin = -low
        ptr = array.__array_interface__["data"][0] + low * itemsize
        self.__array_interface__ = {
            "data": (ptr, False),
            "shape": ((high - low + 1) * itemsize,),
            "typestr": "|u1",
            "version": 3,
        }


class CpuKernel:
    """Blocks run one after another for small grids, in parallel (``prange``) for large ones
    when the kernel has no atomics; each variant is compiled when first needed (numba's
    parallel compile takes about twice as long)."""

    PARALLEL_BLOCKS = 1024  # below this, starting the thread pool costs more than it saves

    def __init__(self, program: ThreadProgram, without_tma=None):
        self.program = program
        self._without_tma = without_tma  # makes the kernel lowered without TMA (kernel.py), then is it
        writer = CpuWriter(program, parallel=False)
        self.source = writer.source()
        self.scratch = writer.scratch()
        self.loop_locs = [loop.loc for loop in writer.loops]
        self.can_parallel = not any(isinstance(s, Atomic) for s in walk_statements(program.body))
        self._functions = {}

    def without_tma(self) -> CpuKernel:
        """The version for arrays no tensor map takes: the program lowered without TMA."""
        if not isinstance(self._without_tma, CpuKernel):
            self._without_tma = self._without_tma()
        return self._without_tma

    def function(self, parallel: bool):
        if parallel not in self._functions:
            source = self.source if not parallel else CpuWriter(self.program, parallel=True).source()
            module = write_module(source, f"cpu_{self.program.name}")
            self._functions[parallel] = getattr(module, self.program.name)
        return self._functions[parallel]

    def __call__(self, grid, args):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        if 0 in grid:
            return
        if not tensor_maps_ok(self.program, args):  # (what the CUDA launcher decides, by the same rules)
            return self.without_tma()(grid, args)
        views, rest = [], []
        for p, value in zip(self.program.params, args):
            if isinstance(p, ArrayParam):
                flat, origin, base = _array_view(value)
                views += [flat, np.int64(origin)]
                rest += [np.uint64(base), *map(np.int64, value.shape)]
                rest += [np.int64(s // value.itemsize) for s in value.strides]
            else:
                rest.append(value)
        parallel = self.can_parallel and grid[0] * grid[1] * grid[2] >= self.PARALLEL_BLOCKS
        workers = numba.get_num_threads() if parallel else 1
        scratch = [np.empty((workers, *shape), dtype) for _, dtype, shape in self.scratch]
        try:
            self.function(parallel)(*map(np.int64, grid), *views, *rest, *scratch)
        except ZeroStep as err:
            raise TileValueError("tl.range: step must not be zero", self.loop_locs[err.args[0]]) from None


def tensor_maps_ok(program: ThreadProgram, args) -> bool:
    """Whether every array a ``TensorMap`` of ``program`` reads (``args`` as ``CpuKernel``
    takes them) is one a tensor map can describe (``thread_ir.tensor_map_ok``)."""
    values = {p.name: v for p, v in zip(program.params, args) if isinstance(p, ArrayParam)}
    for m in program.tensor_maps:
        a = values[m.array]
        strides = [s // a.itemsize for s in a.strides]
        if not tensor_map_ok(a.__array_interface__["data"][0], a.shape, strides, a.itemsize):
            return False
    return True


def _array_view(array: np.ndarray):
    """A flat typed view of the memory ``array`` spans, the index of its element 0 in it,
    and its data pointer. 16-bit floats are viewed as their bits (numba has no such type)."""
    owner = _Owner(array)
    dtype = np.dtype(np.uint16) if array.dtype.name in ("float16", "bfloat16") else array.dtype
    return np.asarray(owner).view(dtype), owner.origin, array.__array_interface__["data"][0]
