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

import numpy as np

from .._lower.thread_ir import (
    ArrayParam,
    Atomic,
    Barrier,
    If,
    Imm,
    Load,
    Loop,
    Reg,
    SharedLoad,
    SharedStore,
    Shuffle,
    Store,
    ThreadProgram,
    registers,
    walk_statements,
)
from ..errors import TileCompilerError, TileValueError
from .cpu_intrinsics import ZeroStep
from .cuda import write_module
from .numba_source import SourceWriter, code_type_name, operand


def _synchronises(s) -> bool:
    if isinstance(s, (Barrier, Shuffle)):
        return True
    if isinstance(s, Loop):
        return any(map(_synchronises, s.body))
    if isinstance(s, If):
        return any(map(_synchronises, s.then + s.orelse))
    return False


def _split(stmts):
    """Phases: ("threads", [stmts]) runs, ("shuffle", [shuffles]), ("loop", s); barriers just split."""
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
            elif not isinstance(s, Barrier):
                raise TileCompilerError("a barrier or shuffle under a condition cannot run on the CPU")
        else:
            run.append(s)
    if run:
        out.append(("threads", run))
    return out


def _registers(stmts):
    """Every register a statement list mentions (what each statement defines and reads)."""
    for s in stmts:
        yield from registers(s, s.DEFS + s.USES)
        if isinstance(s, If):
            yield from _registers(s.then + s.orelse)
        elif isinstance(s, Loop):
            yield from _registers(s.body)


class CpuWriter(SourceWriter):
    FMOD = "np.fmod"  # numba has no math.fmod on the CPU

    def __init__(self, program: ThreadProgram, parallel: bool):
        super().__init__(program)
        self.parallel = parallel
        self.loops: list = []  # loops with a runtime step, in ZeroStep numbering
        self.uniform: set = set()  # indices of block-level loops: plain scalars
        self.shared_regs: set = set()  # registers living across phases: arrays
        self._classify(program.body)

    def _classify(self, stmts):
        seen: dict = {}
        counter = iter(range(10**9))

        def visit(stmts):
            for kind, item in _split(stmts):
                if kind == "threads":
                    phase = next(counter)
                    for r in _registers(item):
                        if isinstance(r, Reg):
                            seen.setdefault(r, set()).add(phase)
                elif kind == "shuffle":
                    self.shared_regs.update(r for s in item for r in (s.dst, s.src) if isinstance(r, Reg))
                else:
                    self.uniform.add(item.index)
                    self.shared_regs.update(r for r in (item.start, item.stop, item.step) if isinstance(r, Reg))
                    self.shared_regs.update(item.params)
                    self.shared_regs.update(r for r in (*item.inits, *item.results) if isinstance(r, Reg))
                    visit(item.body)

        visit(stmts)
        params = {r for p in self.program.params for r in (p.regs() if isinstance(p, ArrayParam) else [p.reg])}
        self.shared_regs.update(r for r, phases in seen.items() if len(phases) > 1)
        self.shared_regs -= params | self.uniform
        # registers living across phases: one row each of a (count, threads) array per type
        self.rows: dict = {}
        for r in sorted(self.shared_regs, key=lambda r: r.name):
            table = self.rows.setdefault(code_type_name(r.dtype), {})
            table[r] = len(table)

    def ref(self, x, thread="t") -> str:
        if isinstance(x, Reg) and x in self.shared_regs:
            name = code_type_name(x.dtype)
            return f"regs_{name}[{self.rows[name][x]}, {thread}]"
        return operand(x)

    # -- rendering with per-thread registers -------------------------------------

    def source(self) -> str:
        p = self.program
        parallel = self.parallel
        self.header("njit, prange", "cpu_intrinsics")
        self.emit(f"@njit(parallel={parallel}, error_model='numpy', cache=True)", 0)
        args = ["grid_x", "grid_y", "grid_z"]
        for q in p.params:
            if isinstance(q, ArrayParam):
                args += [f"{q.name}__buf", f"{q.name}__origin"]
        args += self.signature()
        self.emit(f"def {p.name}({', '.join(args)}):", 0)
        self.emit(f"for block in {'prange' if parallel else 'range'}(grid_x * grid_y * grid_z):", 4)
        self.emit("bx = int32(block % grid_x)", 8)
        self.emit("by = int32((block // grid_x) % grid_y)", 8)
        self.emit("bz = int32(block // (grid_x * grid_y))", 8)
        for name, (d, size) in p.shared.items():
            self.emit(f"{name} = np.zeros({size}, np.{code_type_name(d).replace('boolean', 'bool_')})", 8)
        for name, table in self.rows.items():
            shape = f"({len(table)}, {p.num_threads})"
            self.emit(f"regs_{name} = np.zeros({shape}, np.{name.replace('boolean', 'bool_')})", 8)
        self.phases(p.body, 8)
        return "\n".join(self.lines) + "\n"

    def phases(self, stmts, indent):
        threads = self.program.num_threads
        for kind, item in _split(stmts):
            if kind == "threads":
                self.emit(f"for t in range({threads}):", indent)
                self.body(item, indent + 4)
            elif kind == "shuffle":
                self.emit(f"for t in range({threads}):", indent)
                for s in item:
                    self.emit(f"{self.ref(s.dst)} = {self.ref(s.src, f't ^ {s.xor}')}", indent + 4)
            else:
                self.loop(item, indent)

    def loop(self, s: Loop, indent):
        threads = self.program.num_threads
        if s.params:
            self.emit(f"for t in range({threads}):", indent)
            for p, init in zip(s.params, s.inits):
                self.emit(f"{self.ref(p)} = {self.ref(init)}", indent + 4)
        bounds = ", ".join(self.uniform_ref(x) for x in (s.start, s.stop, s.step))
        self.before_loop(s, indent, self.uniform_ref)
        self.emit(f"for {s.index.name} in range({bounds}):", indent)
        self.phases(s.body, indent + 4)
        if s.params:
            self.emit(f"for t in range({threads}):", indent + 4)
            targets = ", ".join(self.ref(p) for p in s.params)
            self.emit(f"{targets}, = {', '.join(self.ref(r) for r in s.results)},", indent + 8)

    def before_loop(self, loop: Loop, indent, ref=None):
        """A zero step raises ``ZeroStep(i)``, ``i`` naming the loop (numba raises constants only)."""
        if not isinstance(loop.step, Imm):
            self.loops.append(loop)
            self.emit(f"if {(ref or self.ref)(loop.step)} == 0:", indent)
            self.emit(f"raise ZeroStep({len(self.loops) - 1})", indent + 4)

    def branch(self, s: If, indent):
        """The CPU has no wide accesses: the element-by-element way alone (half the code
        for numba to compile)."""
        self.body(s.orelse, indent)

    def uniform_ref(self, x):
        return self.ref(x, "0")

    def special(self, op):
        if op.op == "thread_id":
            return "int32(t)"
        if op.op == "block_id":
            return ("bx", "by", "bz")[op.attr]
        if op.op == "num_blocks":
            return f"int32({('grid_x', 'grid_y', 'grid_z')[op.attr]})"
        return super().special(op)

    def element(self, array, offset, i=0):
        return f"{array}__buf[{array}__origin + {self.ref(offset)}{f' + {i}' if i else ''}]"

    def statement(self, s, indent):
        if isinstance(s, Load):
            d = self.arrays[s.array].dtype
            for i, dst in enumerate(s.dsts):
                value = _from_memory(d, self.element(s.array, s.offset, i))
                if s.mask is None or (isinstance(s.mask, Imm) and s.mask.value):
                    self.emit(f"{self.ref(dst)} = {value}", indent)
                else:
                    self.emit(f"{self.ref(dst)} = {value} if {self.ref(s.mask)} else {self.ref(s.pad)}", indent)
        elif isinstance(s, Store):
            d = self.arrays[s.array].dtype
            lines = [
                f"{self.element(s.array, s.offset, i)} = {_to_memory(d, self.ref(v))}" for i, v in enumerate(s.values)
            ]
            self.masked(s.mask, lines, indent)
        elif isinstance(s, Atomic):
            d = self.arrays[s.array].dtype
            target, v = self.element(s.array, s.offset), self.ref(s.value)
            current = _from_memory(d, target)
            combined = {"add": f"{current} + {v}", "max": f"max({current}, {v})", "min": f"min({current}, {v})"}[s.op]
            if s.op != "add" and d.is_float:
                cmp = ">" if s.op == "max" else "<"
                combined = f"{v} if ({v} {cmp} {current} or {v} != {v}) else {current}"
            value = f"{code_type_name(d)}({combined})"
            if d.is_float and d.bits == 16:
                value = f"round_{d.name}({value})"
            self.masked(s.mask, f"{target} = {_to_memory(d, value)}", indent)
        elif isinstance(s, SharedLoad):
            value = f"{s.buffer}[{self.ref(s.index)}]"
            self.emit(
                f"{self.ref(s.dst)} = {value} != 0" if s.dst.dtype.is_bool else f"{self.ref(s.dst)} = {value}", indent
            )
        elif isinstance(s, SharedStore):
            self.masked(s.mask, f"{s.buffer}[{self.ref(s.index)}] = {self.ref(s.value)}", indent)
        else:
            raise TileCompilerError(f"the CPU backend cannot emit {type(s).__name__} inside a phase")


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

    def __init__(self, program: ThreadProgram):
        self.program = program
        writer = CpuWriter(program, parallel=False)
        self.source = writer.source()
        self.loop_locs = [loop.loc for loop in writer.loops]
        self.can_parallel = not any(isinstance(s, Atomic) for s in walk_statements(program.body))
        self._functions = {}

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
        try:
            self.function(parallel)(*map(np.int64, grid), *views, *rest)
        except ZeroStep as err:
            raise TileValueError("tl.range: step must not be zero", self.loop_locs[err.args[0]]) from None


def _array_view(array: np.ndarray):
    """A flat typed view of the memory ``array`` spans, the index of its element 0 in it,
    and its data pointer. 16-bit floats are viewed as their bits (numba has no such type)."""
    owner = _Owner(array)
    dtype = np.dtype(np.uint16) if array.dtype.name in ("float16", "bfloat16") else array.dtype
    return np.asarray(owner).view(dtype), owner.origin, array.__array_interface__["data"][0]
