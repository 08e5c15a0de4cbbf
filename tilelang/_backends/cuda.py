"""The numba-cuda backend: thread program → Python source → PTX (and a runnable kernel).

The generated source is written to a file in the cache directory, named by its hash,
so numba's line info points at readable code and identical kernels share one file.
PTX needs no GPU (``numba.cuda.compile_ptx`` for sm_90 by default), nor does the cubin
nvJitLink assembles from it; cubins are cached on disk by the hash of the generated source
and the toolchain's versions, so a later process loads one without invoking NVVM. Running
needs a GPU,
or numba's CUDA simulator on host arrays (:func:`simulate`, in a process started with
``NUMBA_ENABLE_CUDASIM=1``; kernels with warp shuffles excepted: the simulator has none).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
import warnings
import weakref

import numpy as np

from .._lower.swizzled import MODE
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
    Op,
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
    box_coords,
    registers,
    shared_alignment,
    shared_offsets,
    walk_statements,
)
from ..dtypes import int32 as INT32
from ..errors import TileCompilerError
from .cuda_driver import PARAM_CODES, kernel_launcher
from .numba_pipeline import lean_cuda_pipeline
from .numba_source import SourceWriter, cast, code_type_name, lane_slot, slot_ranges

DEFAULT_CC = (9, 0)
# numba's CUDA simulator, as numba reads it at import (the source is made without importing numba.cuda:
# a cached kernel loads without it)
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
SWIZZLE_MODE = {32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_<bytes>B
# source-line info in the PTX (what Nsight and compute-sanitizer show against the generated
# source); off unless asked for: numba spends 15-25% more compiling a kernel with it
LINEINFO = os.environ.get("TILELANG_LINEINFO", "") not in ("", "0")


class CudaWriter(SourceWriter):
    """numba-cuda: raw-pointer intrinsics, shared arrays, ``syncthreads``, ``shfl_xor_sync``;
    tile values in ``cuda.local.array`` register arrays."""

    COPY_VERSIONS = True
    copies_whole = None  # within copy_versions: which version of the run's copies is written

    def copy_versions(self, run, start, stop, indent):
        """Twice, under a test of the run's copies: where every window is ``aligned``
        (``AsyncCopy``) and its array's pointer 16-byte aligned, each copy is one cp.async
        (``cp_async16_whole_<itemsize>``); else the copies with their fallback for misaligned
        and partial groups. One branch per window, not per copy: NVVM does not merge the
        copies' own tests. Both are loops over the slots, which NVVM unrolls (written out
        slot by slot, the same PTX took more source: float32 128x128x32, 289 lines against
        238; a loop of the copies each with its fallback inside stayed rolled)."""

        def write(whole, at):
            self.copies_whole = whole
            SourceWriter.slot_loop(self, run, start, stop, at)

        self.versions([s for s in run if isinstance(s, AsyncCopy)], write, indent)
        self.copies_whole = None

    def loop_statement(self, s: Loop, indent):
        """A loop leaving wgmma dots in flight, followed by their waits, under its own
        test: the waits then come first on its exit edge. ptxas serializes every wgmma of
        the kernel (C7514) when any instruction comes between the loop's end and the wait,
        and LLVM sinks values computed before the loop (used after it) to the top of the
        block after it: under the ``if``, they land after the ``if``."""
        waits = self.exit_waits.get(id(s))
        if not waits:
            return super().loop_statement(s, indent)
        self.copy(s.params, s.inits, indent)
        start, stop, step = (self.ref(x) for x in (s.start, s.stop, s.step))  # (each read once)
        self.emit(f"if ({step} > 0 and {start} < {stop}) or ({step} < 0 and {start} > {stop}):", indent)
        self.iterate(s, f"{start}, {stop}, {step}", indent + 4)
        for w in waits:
            self.wait(w.acc, indent + 4)

    def versions(self, copies, write, indent):
        """``write(True, ...)`` under ``if`` every copy's window is aligned and its array's
        pointer too, ``write(False, ...)`` under ``else``; just the latter where a window is
        known not to be."""
        if any(isinstance(s.aligned, Imm) and not s.aligned.value for s in copies):
            return write(False, indent)
        tests = [self.ref(s.aligned) for s in copies]
        tests += [f"(uint64({name}__ptr) & uint64(15)) == uint64(0)" for name in sorted({s.array for s in copies})]
        inlined = dict(self.inlined)  # (both versions use what was inlined before)
        self.emit(f"if {' and '.join(tests)}:", indent)
        write(True, indent + 4)
        self.inlined = inlined
        self.emit("else:", indent)
        write(False, indent + 4)

    def source(self) -> str:
        p = self.program
        self.header("cuda", "cuda_intrinsics")
        # ptxas serializes every wgmma of a function that calls a subroutine (C7509): such
        # kernels divide floats without div.rn.f32's (cuda_arith.py)
        self.no_calls = any(isinstance(s, Wgmma) for s in walk_statements(p.body))
        self.rounded_to_16 = _rounded_to_16_bits(p.body)
        self.emit(f"def {p.name}({', '.join(self.signature())}):", 0)
        self.offsets, dynamic = shared_layout(p)
        vectors = not SIMULATOR  # (numba's simulator declares no aligned arrays, nor needs them)

        def sixteen_bytes(s):  # a buffer read or written 16 bytes at a time: aligned so
            vector = isinstance(s, AsyncCopy) or (isinstance(s, SharedLoad) and s.lanes > 1)
            return isinstance(s, LdMatrix) or (vectors and vector)

        matrices = {s.buffer for s in walk_statements(p.body) if sixteen_bytes(s)}
        for name, (d, size) in p.shared.items():
            if not dynamic:  # (ldmatrix reads 16-byte rows; wgmma's swizzle needs more)
                aligned = name in matrices or shared_alignment(name) > 16
                align = f", alignment={shared_alignment(name)}" if aligned else ""
                self.emit(f"{name} = cuda.shared.array({size}, {code_type_name(d)}{align})", 4)
        for d in sorted({code_type_name(d) for d, _ in p.shared.values()} if dynamic else ()):
            self.emit(f"dynamic_{d} = cuda.shared.array(0, {d})", 4)  # all start at the same base
        for x in self.array_registers():  # one per tile value: LLVM unrolls the slot loops into registers
            self.emit(f"{x.name} = cuda.local.array({x.slots}, {code_type_name(x.dtype)})", 4)
        self.variants: dict = {}  # intrinsic name -> how the module makes it (wgmma, TMA)
        self.exit_waits = _exit_waits(p.body)
        self.moved_waits = {id(w) for waits in self.exit_waits.values() for w in waits}
        self.body(p.body, 4)
        start = self.body_start
        self.lines[start:start] = [f"{name} = {make}" for name, make in self.variants.items()]
        return self.module()

    def shared_place(self, buffer, index) -> tuple[str, str]:
        """The shared array and the index in it of ``buffer[index]``."""
        if buffer not in self.offsets:
            return buffer, self.ref(index)
        d, start = self.offsets[buffer]
        return f"dynamic_{code_type_name(d)}", f"{start} + {self.ref(index)}"

    def shared_ref(self, buffer, index) -> str:
        return "{}[{}]".format(*self.shared_place(buffer, index))

    def special(self, op):
        axis = "xyz"[op.attr] if op.op in ("block_id", "num_blocks") else None
        if op.op == "thread_id":
            return "int32(cuda.threadIdx.x)"
        if op.op == "block_id":
            return f"int32(cuda.blockIdx.{axis})"
        if op.op == "num_blocks":
            return f"int32(cuda.gridDim.{axis})"
        same_type = all(a.dtype == op.dst.dtype for a in op.args)
        if op.op in ("floordiv", "mod") and op.dst.dtype.is_int and same_type and not isinstance(op.args[1], Imm):
            return f"{op.op}_int({self.ref(op.args[0])}, {self.ref(op.args[1])})"  # no div.s64 (cuda_arith.py)
        if op.op == "exp2_ftz" and code_type_name(op.dst.dtype) == "float32" and same_type:
            return cast(op, f"ex2_ftz_f32({self.ref(op.args[0])})")  # (cuda_arith.py)
        if op.op in ("maximum", "minimum") and code_type_name(op.dst.dtype) == "float32" and same_type:
            return f"{op.op[:3]}_nan_f32({self.ref(op.args[0])}, {self.ref(op.args[1])})"  # (cuda_arith.py)
        if op.op == "div" and code_type_name(op.dst.dtype) == "float32" and same_type:
            # a quotient rounded to 16 bits next needs no correctly rounded float32 (cuda_arith.py)
            fast = op.dst.dtype.bits == 16 or op.dst in self.rounded_to_16
            if fast or self.no_calls:
                return cast(op, f"div_{'full' if fast else 'rn'}_f32({self.ref(op.args[0])}, {self.ref(op.args[1])})")
        return super().special(op)

    def statement(self, s, indent):
        ref = self.ref
        if isinstance(s, Load):
            d = s.dst.dtype  # the array's, or uint16 for the raw bits of 16-bit floats
            if s.pack > 1:
                name = self.arrays[s.array].dtype.name
                targets = ", ".join(ref(s.dst, lane_slot(self.at, s.lanes // 2, i)) for i in range(s.lanes // 2))
                args = ", ".join(ref(x) for x in (s.offset, s.mask, s.first, s.last, s.pad))
                self.emit(f"{targets}, = ld{s.lanes}w_{name}({s.array}__ptr, {args})", indent)
            elif s.lanes == 1:
                call = f"ld_{d.name}({s.array}__ptr, {ref(s.offset)}, {ref(s.mask)}, {ref(s.pad)})"
                self.emit(f"{ref(s.dst)} = {call}", indent)
            else:
                targets = ", ".join(ref(s.dst, lane_slot(self.at, s.lanes, i)) for i in range(s.lanes))
                args = ", ".join(ref(x) for x in (s.offset, s.mask, s.first, s.last, s.pad))
                self.emit(f"{targets}, = ld{s.lanes}_{d.name}({s.array}__ptr, {args})", indent)
        elif isinstance(s, Store):
            d = self.arrays[s.array].dtype
            if s.lanes == 1:
                args = ", ".join(ref(x) for x in (s.offset, s.mask, s.values))
                self.emit(f"st_{d.name}({s.array}__ptr, {args})", indent)
            else:
                values = ", ".join(ref(s.values, lane_slot(self.at, s.lanes, i)) for i in range(s.lanes))
                args = ", ".join(ref(x) for x in (s.offset, s.mask, s.first, s.last))
                self.emit(f"st{s.lanes}_{d.name}({s.array}__ptr, {args}, ({values}))", indent)
        elif isinstance(s, Atomic):
            d = self.arrays[s.array].dtype
            call = f"atomic_{s.op}_{d.name}({s.array}__ptr, {ref(s.offset)}, {ref(s.value)})"
            self.masked(s.mask, call, indent)
        elif isinstance(s, SharedLoad) and s.lanes > 1:
            targets = ", ".join(ref(s.dst, lane_slot(self.at, s.lanes, i)) for i in range(s.lanes))
            array, index = self.shared_place(s.buffer, s.index)
            self.emit(f"{targets}, = lds{s.lanes}_{code_type_name(s.dst.dtype)}({array}, {index})", indent)
        elif isinstance(s, SharedLoad):
            value = self.shared_ref(s.buffer, s.index)
            self.emit(f"{ref(s.dst)} = {value} != 0" if s.dst.dtype.is_bool else f"{ref(s.dst)} = {value}", indent)
        elif isinstance(s, SharedStore):
            value = f"uint8({ref(s.value)})" if s.value.dtype.is_bool else ref(s.value)
            if s.add:
                array, index = self.shared_place(s.buffer, s.index)
                self.masked(s.mask, f"cuda.atomic.add({array}, {index}, {value})", indent)
            else:
                self.masked(s.mask, f"{self.shared_ref(s.buffer, s.index)} = {value}", indent)
        elif isinstance(s, Barrier):
            self.emit("cuda.syncthreads()", indent)
        elif isinstance(s, Shuffle):
            d = s.dst.dtype
            native = d.name in ("int32", "int64", "float32", "float64") or (d.is_float and d.bits == 16)
            wide = "int64" if d.bits == 64 else "int32"
            for loop in slot_ranges(s.dst.slots) if s.dst.slots > 1 else [None]:
                inner = indent
                if loop:
                    self.emit(f"for r in {loop}:", indent)
                    self.at, inner = "r", indent + 4
                src = ref(s.src) if native else f"{wide}({ref(s.src)})"
                value = f"cuda.shfl_xor_sync(0xFFFFFFFF, {src}, {s.xor})"
                value = f"{value} != 0" if d.is_bool else f"{code_type_name(d)}({value})"
                self.emit(f"{ref(s.dst)} = {value}", inner)
            self.at = 0
        elif isinstance(s, AsyncCopy):
            array, index = self.shared_place(s.buffer, s.index)
            args = ", ".join(ref(x) for x in (s.base, s.offset, s.mask, s.first, s.last))
            d = self.arrays[s.array].dtype
            general = f"cp_async16_{d.name}({array}, {index}, {s.array}__ptr, {args})"
            whole_copy = f"cp_async16_whole_{d.itemsize}({array}, {index}, {s.array}__ptr, {args})"
            if self.copies_whole is None:  # (a copy alone: its own test)
                self.versions([s], lambda whole, at: self.emit(whole_copy if whole else general, at), indent)
            else:
                self.emit(whole_copy if self.copies_whole else general, indent)
        elif isinstance(s, AsyncCommit):
            self.emit("cp_async_commit()", indent)
        elif isinstance(s, AsyncWait):
            self.emit(f"cp_async_wait_{s.pending}()", indent)
        elif isinstance(s, Mma):
            self.mma(s, indent)
        elif isinstance(s, Wgmma):
            self.wgmma(s, indent)
        elif isinstance(s, ProxyFence):
            self.emit("proxy_fence()", indent)
        elif isinstance(s, Mbarriers):
            self.emit("if cuda.threadIdx.x == 0:", indent)
            for i in range(s.count):
                array, index = self.shared_place(s.buffer, Imm(i, INT32))
                self.emit(f"mbarrier_{'init' if s.valid else 'inval'}({array}, {index})", indent + 4)
            if s.valid:
                self.emit("mbarrier_init_fence()", indent + 4)
        elif isinstance(s, TmaLoad):
            self.tma_load(s, indent)
        elif isinstance(s, MbarrierWait):
            array, index = self.shared_place(s.barriers, s.stage)
            self.emit(f"while mbarrier_try_wait({array}, {index}, {self.ref(s.parity)}) == 0:", indent)
            self.emit("pass", indent + 4)
        elif isinstance(s, WgmmaWait):
            if id(s) not in self.moved_waits:
                self.wait(s.acc, indent)
        elif isinstance(s, LdMatrix):
            groups = s.dst.slots // 4
            if groups > 1:
                self.emit(f"for r in range({groups}):", indent)
                self.at, indent = "r", indent + 4
            array, index = self.shared_place(s.buffer, s.index)
            words = ", ".join(ref(s.dst, lane_slot(self.at, 4, q)) for q in range(4))
            self.emit(f"{words}, = ldmatrix_x4{'_trans' if s.trans else ''}({array}, {index})", indent)
            self.at = 0
        else:
            raise TileCompilerError(f"the CUDA backend cannot emit {type(s).__name__}")

    def tma_load(self, s: TmaLoad, indent):
        """Thread 0 arms the stage's mbarrier, then a ``cp.async.bulk.tensor`` per box."""
        self.emit(f"if cuda.threadIdx.x == 0 and {self.ref(s.pred)}:", indent)
        bars, bar = self.shared_place(s.barriers, s.stage)  # (once: an inlined stage is rendered once)
        self.emit(f"mbarrier_expect_tx({bars}, {bar}, {s.bytes})", indent + 4)
        for buffer, at, m, coords in zip(s.buffers, s.indices, s.maps, box_coords(s)):
            name = f"tma_load_{len(coords)}d_{m}"
            self.variants[name] = f"tma_load({len(coords)}, {m})"
            array, index = self.shared_place(buffer, at)
            self.emit(f"{name}({array}, {index}, {bars}, {bar}, ({', '.join(map(self.ref, coords))},))", indent + 4)

    def mma(self, s: Mma, indent):
        """Loops over the fragments (NVVM unrolls them: the register arrays stay registers)."""
        mi, ni, ki = s.shape
        acc = ", ".join(f"d{q}_" for q in range(4))
        self.emit(f"for mma_i in range({mi}):", indent)
        self.emit(f"for mma_j in range({ni}):", indent + 4)
        inner = indent + 8
        self.emit(f"mma_c = 4 * (mma_j + {ni} * mma_i)", inner)
        self.emit(f"{acc} = {', '.join(self.ref(s.c, f'mma_c + {q}') for q in range(4))}", inner)
        self.emit(f"for mma_k in range({ki}):", inner)
        self.emit(f"mma_a, mma_b = 4 * (mma_k + {ki} * mma_i), 2 * (mma_k + {ki} * mma_j)", inner + 4)
        words = [self.ref(s.a, f"mma_a + {q}") for q in range(4)] + [self.ref(s.b, f"mma_b + {q}") for q in range(2)]
        name = "mma_m16n8k8_tf32" if s.dtype.name == "float32" else f"mma_m16n8k16_{s.dtype.name}"
        self.emit(f"{acc} = {name}({', '.join(words)}, {acc})", inner + 4)
        self.emit(f"{', '.join(self.ref(s.dst, f'mma_c + {q}') for q in range(4))} = {acc}", inner)

    def wgmma(self, s: Wgmma, indent):
        """Descriptors, then fence, one instruction per (mb, nb, k-step), commit and wait."""
        mb, nb, n, ks = s.shape
        descs = []
        for name, buffer, index, tile, k_major in (
            ("wg_a", s.a_buffer, s.a_index, s.a_tile, s.a_k_major),
            ("wg_b", s.b_buffer, s.b_index, s.b_tile, s.b_k_major),
        ):
            if buffer is None:  # a in registers
                descs.append((tile, k_major))
                continue
            array, at = self.shared_place(buffer, index)
            self.emit(f"{name} = wgmma_desc({array}, {at}, {', '.join(map(str, tile.strides(k_major)))}, "
                      f"{MODE[tile.width]})", indent)  # fmt: skip
            descs.append((tile, k_major))
        for loop in slot_ranges(s.dst.slots) if s.c is not None and s.dst != s.c else ():
            self.emit(f"for r in {loop}:", indent)
            self.emit(f"{self.ref(s.dst, 'r')} = {self.ref(s.c, 'r')}", indent + 4)
        self.emit("wgmma_fence()", indent)
        (ta, a_major), (tb, b_major) = descs
        names = []
        for add in (0, 1) if s.c is None else (1,):  # (no accumulator: the first k-step adds to nothing)
            if s.a_regs is None:
                name = f"wgmma_m64n{n}k16_{s.dtype.short}_{int(not a_major)}{int(not b_major)}"
                made = f"wgmma_instruction({n}, {s.dtype.name!r}, {int(not a_major)}, {int(not b_major)}, {add})"
            else:
                name = f"wgmma_m64n{n}k16_{s.dtype.short}_r{int(not b_major)}"
                made = f"wgmma_instruction_rs({n}, {s.dtype.name!r}, {int(not b_major)}, {add})"
            names.append(name + ("" if add else "_set"))
            self.variants[names[-1]] = made
        for i in range(mb):
            for j in range(nb):
                for kk in range(ks):
                    name = names[min(kk, len(names) - 1)]
                    b = tb.start(n * j, 16 * kk, b_major) >> 4
                    if s.a_regs is None:
                        a = f"wg_a + {ta.start(64 * i, 16 * kk, a_major) >> 4}"
                    else:
                        a = f"{s.a_regs.name}, {ta.word(i, kk)}"
                    self.emit(f"{name}({s.dst.name}, {n // 2 * (j + nb * i)}, {a}, wg_b + {b})", indent)
        self.emit("wgmma_commit()", indent)
        if s.pending:  # (untied: the accumulators are still in flight)
            self.emit(f"wgmma_wait_group_{s.pending}()", indent)
        elif not s.deferred:  # (deferred: the next wgmma's wait, then a WgmmaWait on dst)
            self.wait(s.dst, indent)

    def wait(self, acc: Reg, indent):
        """Every wgmma group done, ``acc``'s registers tied to the wait (none is read before it)."""
        self.variants[f"wgmma_wait_{acc.slots}"] = f"wgmma_wait({acc.slots})"
        self.emit(f"wgmma_wait_{acc.slots}({acc.name})", indent)


STATIC_SHARED_LIMIT = 48 * 1024  # bytes a kernel may declare statically
SHARED_PER_SM = 228 * 1024  # sm_90's shared memory per SM, of which each block takes
RESERVED_SHARED = 1024  # this much more than it declares (the system's)


def shared_layout(program: ThreadProgram):
    """Where each shared buffer lives when they exceed the static limit: one dynamic
    allocation, buffers at 16-byte aligned offsets (in elements of their own type), and
    whether that is needed. Below the limit buffers are plain static arrays."""
    starts, total = shared_offsets(program.shared)
    if total <= STATIC_SHARED_LIMIT:
        return {}, False
    return {name: (d, starts[name] // d.itemsize) for name, (d, _) in program.shared.items()}, True


def dynamic_shared_bytes(program: ThreadProgram) -> int:
    total = shared_offsets(program.shared)[1]
    return total if total > STATIC_SHARED_LIMIT else 0


def cache_dir() -> str:
    path = os.environ.get("TILELANG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilelang")
    os.makedirs(path, exist_ok=True)
    return path


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


@functools.cache
def toolchain_versions() -> tuple[str, ...]:
    """What besides the generated source decides the machine code: package versions and
    the code generator's own source (the intrinsics). Read once per process (~15 ms)."""
    from importlib.metadata import PackageNotFoundError, version

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cuda_intrinsics.py"), "rb") as f:
        out = [f"cuda_intrinsics {hashlib.sha256(f.read()).hexdigest()}"]
    for name in ("tilelang-numba", "numba-cuda", "numba", "llvmlite", "cuda-core", "cuda-bindings", "nvidia-nvjitlink"):
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}: absent")
    return tuple(out)


def _cache_paths(digest, cc):
    base = os.path.join(cache_dir(), "cubin", f"{digest}.sm_{cc[0]}{cc[1]}")
    return base + ".cubin", base + ".json"


def load_cached(digest, cc):
    """A cached (cubin, report, entry), or None if absent, unreadable or corrupted (then
    removed, so it is rebuilt): the cubin's checksum is stored beside it."""
    code_path, meta_path = _cache_paths(digest, cc)
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(code_path, "rb") as f:
            code = f.read()
        if hashlib.sha256(code).hexdigest() != meta["sha256"] or meta["digest"] != digest:
            raise ValueError("checksum mismatch")
        return code, meta["report"], meta["entry"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        for path in (code_path, meta_path):
            with contextlib.suppress(OSError):
                os.remove(path)
        return None


def store_cached(digest, cc, code: bytes, report: str, entry: str):
    """Write atomically (a temporary file renamed into place): concurrent writers of the
    same entry each leave a complete, identical pair, and a reader sees old or new, never half."""
    code_path, meta_path = _cache_paths(digest, cc)
    os.makedirs(os.path.dirname(code_path), exist_ok=True)
    meta = {"digest": digest, "sha256": hashlib.sha256(code).hexdigest(), "report": report, "entry": entry}
    for path, data in ((code_path, code), (meta_path, json.dumps(meta).encode())):
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


def numba_signature(program: ThreadProgram):
    from numba import types

    from .cuda_intrinsics import code_type

    args = []
    for p in program.params:
        if isinstance(p, ArrayParam):
            args.append(types.uint64)
            args.extend([types.int64] * (2 * p.ndim))
        else:
            args.append(code_type(p.reg.dtype))
    return types.void(*args)


def param_codes(program: ThreadProgram) -> str:
    """The kernel's parameters as struct codes, one per PTX parameter: an array is its
    pointer, shape and strides."""
    return "".join(
        "Q" + "q" * (2 * p.ndim) if isinstance(p, ArrayParam) else PARAM_CODES[p.reg.dtype.name] for p in program.params
    )


def map_specs(program: ThreadProgram) -> tuple:
    """What the launcher encodes each tensor map from: the index of its array's pointer among
    the parameters, the rank, the box innermost first and the swizzle mode (CUtensorMapSwizzle)."""
    first, at = {}, 0
    for p in program.params:
        if isinstance(p, ArrayParam):
            first[p.name] = at
        at += 1 + 2 * p.ndim if isinstance(p, ArrayParam) else 1
    return tuple((first[m.array], len(m.box), m.box[::-1], SWIZZLE_MODE[m.swizzle]) for m in program.tensor_maps)


class CudaKernel:
    """The generated source of one thread program, its PTX, and (on a GPU) a launcher."""

    def __init__(self, program: ThreadProgram, without_tma=None):
        self.program = program
        self._without_tma = without_tma  # makes the kernel lowered without TMA (kernel.py), then is it
        self.source = CudaWriter(program).source()
        # what the compiled code depends on: the generated source, the parameters' types (an int32
        # and a uint32 scalar can give the same source), the block size (launch bounds), line info
        # and the toolchain
        key = [self.source, param_codes(program), f"threads={program.num_threads} lineinfo={LINEINFO}"]
        key += toolchain_versions()
        self.digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:32]
        self._function = None
        self._ptx = {}
        self.dynamic_shared = dynamic_shared_bytes(program)
        self.hopper = any(isinstance(s, Wgmma) for s in walk_statements(program.body))  # needs sm_90a
        self._loaded = {}  # device id -> its launcher (tilelang._launch.Launcher)
        self._simulated = None  # the kernel under numba's CUDA simulator

    @property
    def function(self):
        """The generated Python function (imported only when numba must compile it)."""
        if self._function is None:
            self._function = getattr(write_module(self.source, self.program.name), self.program.name)
        return self._function

    @property
    def signature(self):
        return numba_signature(self.program)

    def entry(self, cc=DEFAULT_CC) -> str:
        return self.cubin(cc)[2]

    def cubin(self, cc=DEFAULT_CC):
        """(cubin, ptxas report, entry name) for ``cc``: from the disk cache, or compiled
        (numba → PTX → nvJitLink, no GPU needed) and stored there."""
        if ("cubin", cc) not in self._ptx:
            self._ptx["cubin", cc] = load_cached(self.digest, cc) or self._build_cubin(cc)
        return self._ptx["cubin", cc]

    def _build_cubin(self, cc):
        from cuda.core import Linker, LinkerOptions, ObjectCode

        ptx = self.ptx(cc)
        options = LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}{'a' if self.hopper else ''}", verbose=True)
        linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=options)
        entry = re.search(r"\.visible\s+\.entry\s+([\w$]+)\(", ptx).group(1)
        built = (linker.link("cubin").code, linker.get_info_log(), entry)
        store_cached(self.digest, cc, *built)
        return built

    def resources(self, cc=DEFAULT_CC) -> dict:
        """Registers, spills, stack and shared memory per thread/block, from ptxas's report."""
        log = self.cubin(cc)[1]

        def number(pattern):
            m = re.search(pattern, log)
            return int(m.group(1)) if m else 0

        shared = sum(d.itemsize * size for d, size in self.program.shared.values())
        return {
            "registers": number(r"[Uu]sed (\d+) registers"),
            "spill_stores": number(r"(\d+) bytes spill stores"),
            "spill_loads": number(r"(\d+) bytes spill loads"),
            "stack": number(r"(\d+) bytes stack frame"),
            "shared": shared,
            "threads": self.program.num_threads,
            # ptxas's reason for making each wgmma wait for the one before (C7509), if it did
            "wgmma_serialized": next(iter(re.findall(r"\(C75\d\d\)[^:]*: wgmma[^']*? due to ([^']*?) in", log)), ""),
        }

    def launcher(self, device_id: int):
        """The kernel loaded on a device (assembled for its compute capability), ready to
        launch there; the caller has made that device's context current."""
        launcher = self._loaded.get(device_id)
        if launcher is None:
            from cuda.bindings import driver
            from cuda.core import Device, ObjectCode

            device = Device(device_id)
            device.set_current()  # with one GPU nobody made it current yet; else a no-op
            cc = tuple(device.compute_capability)
            code = ObjectCode.from_cubin(self.cubin(cc)[0])
            kernel = code.get_kernel(self.entry(cc))
            if self.dynamic_shared > STATIC_SHARED_LIMIT:  # opt in to more than 48 KB per block
                attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                (err,) = driver.cuKernelSetAttribute(attribute, self.dynamic_shared, kernel.handle, device_id)
                if err != driver.CUresult.CUDA_SUCCESS:
                    needs = f"{self.dynamic_shared} bytes of shared memory"
                    raise TileCompilerError(f"{self.program.name} needs {needs}, which the GPU refused: {err}")
            p = self.program
            launch = (param_codes(p), p.num_threads, self.dynamic_shared, device_id, p.name)
            maps = {}
            if p.tensor_maps:  # the kernel without TMA is made (and compiled) at the first launch that needs it
                # (by a weak reference: the launcher is held by this kernel, which must stay collectable)
                without = functools.partial(_launcher_without_tma, weakref.ref(self), device_id)
                maps = dict(maps=map_specs(p), without_maps=without)
            launcher = self._loaded[device_id] = kernel_launcher(kernel, *launch, **maps)
        return launcher

    def without_tma(self) -> CudaKernel:
        """The version for arrays no tensor map takes: the program lowered without TMA."""
        if not isinstance(self._without_tma, CudaKernel):
            self._without_tma = self._without_tma()
        return self._without_tma

    def ptx(self, cc=DEFAULT_CC) -> str:
        if cc not in self._ptx:
            from numba import cuda

            if self.hopper and cc != (9, 0):
                raise TileCompilerError(
                    f"{self.program.name} was lowered for sm_90a (wgmma) but this GPU is sm_{cc[0]}{cc[1]}: "
                    "compile it with @tl.tile_kernel(arch='sm_80')"
                )

            # over 256 threads, .maxntid: ptxas keeps to the registers such a block may have (it
            # spills rather than build a kernel that cannot launch: 64 floats a thread at 512
            # threads took 194 registers without it). Smaller blocks launch with any count, and
            # ptxas given the bound chose more registers for them (a softmax: 80, not 56). A
            # 256-thread tensor-core kernel is asked for two blocks per SM (128 registers): one
            # block of 8 warps leaves the tensor cores waiting on its loads and barriers. Not
            # where two blocks' shared memory does not fit an SM (one block is all it gets: a
            # register cap would only spill; attention d128's forward spilled 480 B), nor where
            # its products' results hold over 64 registers a thread (m64n256 accumulators; the
            # attention backward's four products: 952 B spilled at 128). So is a loop of dots on
            # CUDA cores copying its tiles ahead, by the accumulators its loops carry (float32
            # 128x128x32: 124 registers, no spill, 42.1 TFLOP/s, 39.3 with one block; two such
            # dots, 128 accumulators: 764 B spilled at 128)
            threads, body = self.program.num_threads, self.program.body
            accumulators = _product_registers(body)
            if not accumulators and any(isinstance(s, AsyncCopy) for s in walk_statements(body)):
                accumulators = _carried_registers(body)
            two_fit = 2 * (self.dynamic_shared + RESERVED_SHARED) <= SHARED_PER_SM
            two_blocks = 0 < accumulators <= 64 and threads == 256 and two_fit
            bounds = (threads,) if threads > 256 else ((threads, 2) if two_blocks else None)
            with lean_cuda_pipeline():
                ptx, _ = cuda.compile_ptx(self.function, self.signature, cc=cc, lineinfo=LINEINFO, launch_bounds=bounds)
            ptx = re.sub(r"\.target sm_90\b", ".target sm_90a", ptx) if self.hopper else ptx
            self._ptx[cc] = _with_tensor_maps(ptx, len(self.program.tensor_maps))
        return self._ptx[cc]

    def simulate(self, grid, args):
        """Run under numba's CUDA simulator on host memory: ``args`` are NumPy arrays and
        scalars in parameter order (what ``CpuKernel`` takes), arrays passed as their host
        addresses, shapes and strides in elements. The simulator runs one Python thread per
        CUDA thread and blocks one after another: slow, for tiny shapes."""
        from numba import cuda
        from numba.cuda.core import config

        if not config.ENABLE_CUDASIM:
            raise TileCompilerError("CudaKernel.simulate needs NUMBA_ENABLE_CUDASIM=1 set before numba is imported")
        statements = list(walk_statements(self.program.body))
        arrays = {p.name: p for p in self.program.params if isinstance(p, ArrayParam)}
        copies_16_bits = (isinstance(s, AsyncCopy) and arrays[s.array].dtype.itemsize == 2 for s in statements)
        if any(isinstance(s, (Shuffle, Mma, LdMatrix, Wgmma)) for s in statements) or any(copies_16_bits):
            raise TileCompilerError(
                f"kernel {self.program.name} uses warp shuffles, tensor cores or copies of 16-bit tiles, which numba's "
                "CUDA simulator does not have; it runs on the GPU and on the CPU backend"
            )
        grid = tuple(grid) + (1,) * (3 - len(grid))
        if 0 in grid:
            return
        flat = []
        for p, value in zip(self.program.params, args):
            if isinstance(p, ArrayParam):
                flat.append(np.uint64(value.__array_interface__["data"][0]))
                flat += [np.int64(n) for n in value.shape]
                flat += [np.int64(s // value.itemsize) for s in value.strides]
            else:
                flat.append(value)
        if self._simulated is None:
            self._simulated = cuda.jit(self.function)
        with warnings.catch_warnings():  # integer registers wrap, as on the GPU
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
            self._simulated[grid, self.program.num_threads](*flat)


def simulate(kernel, grid, *args, **kwargs) -> CudaKernel:
    """``kernel[grid](*args, **kwargs)`` on host arrays, the CUDA backend's generated kernel
    run by numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``); returns the ``CudaKernel``.
    Arguments are bound and converted as for the CPU backend (``HostRunner``)."""
    from .._runtime import HostRunner, launch_grid

    arguments = kernel.bind(args, kwargs)
    key, infos = kernel.specialize(arguments)
    compiled = kernel.compile(key, "cuda")
    HostRunner(compiled.program, compiled.backend_kernel.simulate)(launch_grid(grid, arguments), arguments, infos)
    return compiled.backend_kernel


def _product_registers(stmts) -> int:
    """The most registers a thread holds in tensor-core products' results that one loop body (or
    the kernel outside loops) makes: an estimate of the accumulators alive at once."""
    here = sum(s.dst.slots for s in stmts if isinstance(s, (Mma, Wgmma)))
    return max([here] + [_product_registers(s.body) for s in stmts if isinstance(s, Loop)])


def _carried_registers(stmts) -> int:
    """The most registers a loop carries in its register arrays (a CUDA-core dot's accumulators)."""
    loops = [s for s in stmts if isinstance(s, Loop)]
    here = [sum(p.slots for p in s.params if p.slots > 1) for s in loops]
    return max(here + [_carried_registers(s.body) for s in loops] + [0])


def _launcher_without_tma(kernel_ref, device_id: int):
    """The launcher of the version without TMA of the kernel ``kernel_ref`` refers to."""
    return kernel_ref().without_tma().launcher(device_id)


def _with_tensor_maps(ptx: str, count: int) -> str:
    """The kernel's PTX with ``count`` tensor-map parameters after numba's: 128 bytes each,
    64-byte aligned, named as ``cuda_tma.tma_load`` reads them (the launcher fills them)."""
    if not count:
        return ptx
    params = "".join(f",\n\t.param .align 64 .b8 tl_map_{i}[128]" for i in range(count))
    entry = re.search(r"\.entry\s+[\w$]+\(([^)]*)\)", ptx)
    return ptx[: entry.end(1)] + params + ptx[entry.end(1) :]


def _rounded_to_16_bits(stmts) -> set:
    """The float32 registers every reader of which rounds them to a 16-bit float (``convert``)."""
    readers: dict = {}
    for s in walk_statements(stmts):
        for x in registers(s, s.USES):
            if isinstance(x, Reg):
                readers.setdefault(x, []).append(s)
    return {
        x
        for x, reads in readers.items()
        if x.dtype.name == "float32"
        and all(isinstance(s, Op) and s.op == "convert" and s.attr.is_float and s.attr.bits == 16 for s in reads)
    }


def _exit_waits(stmts, found=None) -> dict:
    """Loop id -> the ``WgmmaWait`` statements right after it (for its dots left in flight):
    ``CudaWriter.loop_statement`` writes them."""
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
