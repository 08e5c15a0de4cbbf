"""The CUDA backend: thread program → NVVM IR → PTX → cubin (and a runnable kernel).

``cuda_emit.py`` builds the kernel's LLVM IR directly from the thread program (no numba in
the way); NVVM (``cuda.bindings.nvvm``, libdevice linked) makes PTX for sm_90 by default and
nvJitLink assembles the cubin, neither needing a GPU. Cubins are cached on disk by the hash
of the IR, the launch bounds and the toolchain's versions, so a later process loads one
without invoking NVVM. Running needs a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import threading
import warnings
import weakref

from .._lower.thread_ir import ArrayParam, AsyncCopy, Loop, Mma, ThreadProgram, Wgmma, shared_offsets, walk_statements
from ..errors import TileCompilerError, TileError, TileLimitError
from .cuda_driver import PARAM_CODES, kernel_launcher
from .cuda_emit import STATIC_SHARED_LIMIT, emit_module

DEFAULT_CC = (9, 0)
SWIZZLE_MODE = {32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_<bytes>B
SHARED_PER_SM = 228 * 1024  # sm_90's shared memory per SM, of which each block takes
RESERVED_SHARED = 1024  # this much more than it declares (the system's)
# the files whose code decides the machine code beside the IR's text
# (cuda.py itself: NVVM's options, the PTX rewrites before ptxas)
GENERATOR = ("cuda.py", "cuda_emit.py", "llvm_emit.py", "llvm_values.py", "cuda_intrinsics.py", "cuda_arith.py",
             "cuda_mma.py", "cuda_tma.py")  # fmt: skip


def cache_dir() -> str:
    path = os.environ.get("TILELANG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilelang")
    os.makedirs(path, exist_ok=True)
    return path


@functools.cache
def toolchain_versions() -> tuple[str, ...]:
    """What besides the IR decides the machine code: package versions, NVVM's and the code
    generator's own source (the inline PTX). Read once per process (~15 ms)."""
    from importlib.metadata import PackageNotFoundError, version

    here = os.path.dirname(os.path.abspath(__file__))
    out = [f"nvvm {nvvm_versions()}"]
    for name in GENERATOR:
        with open(os.path.join(here, name), "rb") as f:
            out.append(f"{name} {hashlib.sha256(f.read()).hexdigest()}")
    for name in ("tilelang-numba", "llvmlite", "cuda-core", "cuda-bindings", "nvidia-nvjitlink"):
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
    try:
        code_path, meta_path = _cache_paths(digest, cc)
    except OSError:  # no cache directory to be had (store_cached says so)
        return None
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
    meta = {"digest": digest, "sha256": hashlib.sha256(code).hexdigest(), "report": report, "entry": entry}
    try:
        code_path, meta_path = _cache_paths(digest, cc)
        os.makedirs(os.path.dirname(code_path), exist_ok=True)
        for path, data in ((code_path, code), (meta_path, json.dumps(meta).encode())):
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
    except OSError as err:  # a cache is a saving, not a condition: compile without it, and say so once
        _warn_once(f"tilelang: kernels are not cached on disk ({err}); set TILELANG_CACHE_DIR to a writable directory")


@functools.cache
def _warn_once(message: str):
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def param_codes(program: ThreadProgram) -> str:
    """The kernel's parameters as struct codes, one per PTX parameter: an array is its
    pointer, shape and strides."""
    return "".join(
        "Q" + "q" * (2 * p.ndim) if isinstance(p, ArrayParam) else PARAM_CODES[p.reg.dtype.name] for p in program.params
    )


def _array_params(program: ThreadProgram) -> dict:
    """Each array's name -> (the index of its pointer among the parameters, the array)."""
    first, at = {}, 0
    for p in program.params:
        if isinstance(p, ArrayParam):
            first[p.name] = (at, p)
        at += 1 + 2 * p.ndim if isinstance(p, ArrayParam) else 1
    return first


def map_specs(program: ThreadProgram) -> tuple:
    """What the launcher encodes each tensor map from: the index of its array's pointer among
    the parameters, the rank, the box innermost first, the swizzle mode (CUtensorMapSwizzle)
    and the itemsize."""
    first = _array_params(program)
    return tuple(
        (first[m.array][0], len(m.box), m.box[::-1], SWIZZLE_MODE[m.swizzle], m.itemsize) for m in program.tensor_maps
    )


def aligned_specs(program: ThreadProgram) -> tuple:
    """What the launcher checks each array the program takes to be aligned by: the index of
    its pointer among the parameters, its rank and itemsize (``thread_ir.array_aligned``)."""
    first = _array_params(program)
    return tuple((first[a][0], first[a][1].ndim, first[a][1].dtype.itemsize) for a in program.aligned)


class CudaKernel:
    """The NVVM IR of one thread program, its PTX, and (on a GPU) a launcher."""

    def __init__(self, program: ThreadProgram, general=None):
        self.program = program
        self._general = general  # makes the kernel lowered for any array (kernel.py), then is it
        total = shared_offsets(program.shared)[1]
        self.dynamic_shared = total if total > STATIC_SHARED_LIMIT else 0
        self.launch_bounds = launch_bounds(program, self.dynamic_shared)
        self.ir = emit_module(program, nvvm_versions()[1], self.launch_bounds)
        # what the compiled code depends on: the IR (launch bounds included), the parameters'
        # struct codes (an int32 and a uint32 scalar give the same IR) and the toolchain
        key = [self.ir, param_codes(program), *toolchain_versions()]
        self.digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:32]
        self._ptx = {}
        self.hopper = any(isinstance(s, Wgmma) for s in walk_statements(program.body))  # needs sm_90a
        self._loaded = {}  # device id -> its launcher (tilelang._launch.Launcher)

    def entry(self, cc=DEFAULT_CC) -> str:
        return self.cubin(cc)[2]

    def cubin(self, cc=DEFAULT_CC):
        """(cubin, ptxas report, entry name) for ``cc``: from the disk cache, or compiled
        (NVVM → PTX → nvJitLink, no GPU needed) and stored there."""
        if ("cubin", cc) not in self._ptx:
            self._ptx["cubin", cc] = load_cached(self.digest, cc) or self._build_cubin(cc)
        return self._ptx["cubin", cc]

    def _build_cubin(self, cc):
        from cuda.core import Linker, LinkerOptions, ObjectCode

        ptx = self.ptx(cc)
        options = LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}{'a' if self.hopper else ''}", verbose=True)
        entry = re.search(r"\.visible\s+\.entry\s+([\w$]+)\(", ptx).group(1)
        try:  # (adding the PTX assembles it)
            linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=options)
            code = linker.link("cubin").code
        except Exception as err:  # noqa: BLE001 - nvJitLink's error (its type is cuda.bindings'): ptxas refused the PTX
            raise _refused(self.program, str(err)) from None
        built = (code, linker.get_info_log(), entry)
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
            # ptxas's reason for making each wgmma wait for the one before (C7509, C7514), if it did
            "wgmma_serialized": next(iter(re.findall(r"\(C75\d\d\)[^:]*: wgmma[^']*? due to ([^']*?) in", log)), ""),
            # whether ptxas added a wait of its own (C7517: a product's registers used before our wait)
            "wgmma_wait_injected": "(C7517)" in log,
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
            if p.tensor_maps or p.aligned:  # the general kernel is made (and compiled) at the first launch
                # that needs it (by a weak reference: the launcher is held by this kernel, which must stay collectable)
                general = functools.partial(_general_launcher, weakref.ref(self), device_id)
                maps = dict(maps=map_specs(p), aligned=aligned_specs(p), general=general)
            launcher = self._loaded[device_id] = kernel_launcher(kernel, *launch, **maps)
        return launcher

    def general(self) -> CudaKernel:
        """The version for arrays the program does not take (``tensor_map_ok``, ``array_aligned``):
        the program lowered for any array."""
        if not isinstance(self._general, CudaKernel):
            self._general = self._general()
        return self._general

    def ptx(self, cc=DEFAULT_CC) -> str:
        if cc not in self._ptx:
            if self.hopper and cc != (9, 0):
                raise TileCompilerError(
                    f"{self.program.name} was lowered for sm_90a (wgmma) but this GPU is sm_{cc[0]}{cc[1]}: "
                    "compile it with @tl.tile_kernel(arch='sm_80')"
                )
            ptx = compile_ir(self.ir, cc)
            ptx = re.sub(r"\.target sm_90\b", ".target sm_90a", ptx) if self.hopper else ptx
            self._ptx[cc] = _with_tensor_maps(ptx, len(self.program.tensor_maps))
        return self._ptx[cc]


def launch_bounds(program: ThreadProgram, dynamic_shared: int):
    """``.maxntid`` (and ``.minnctapersm``) for the kernel, or None.

    Over 256 threads, .maxntid: ptxas keeps to the registers such a block may have (it spills
    rather than build a kernel that cannot launch: 64 floats a thread at 512 threads took 194
    registers without it). Smaller blocks launch with any count, and ptxas given the bound chose
    more registers for them (a softmax: 80, not 56). A 256-thread tensor-core kernel is asked for
    two blocks per SM (128 registers): one block of 8 warps leaves the tensor cores waiting on
    its loads and barriers. Not where two blocks' shared memory does not fit an SM (one block is
    all it gets: a register cap would only spill; attention d128's forward spilled 480 B), nor
    where its products' results hold over 64 registers a thread (m64n256 accumulators; the
    attention backward's four products: 952 B spilled at 128). So is a loop of dots on CUDA
    cores copying its tiles ahead, by the accumulators its loops carry (float32 128x128x32: 124
    registers, no spill, 42.1 TFLOP/s, 39.3 with one block; two such dots, 128 accumulators:
    764 B spilled at 128)."""
    threads, body = program.num_threads, program.body
    accumulators = _product_registers(body)
    if not accumulators and any(isinstance(s, AsyncCopy) for s in walk_statements(body)):
        accumulators = _carried_registers(body)
    two_fit = 2 * (dynamic_shared + RESERVED_SHARED) <= SHARED_PER_SM
    if threads > 256:
        return (threads,)
    return (threads, 2) if 0 < accumulators <= 64 and threads == 256 and two_fit else None


@functools.cache
def nvvm_versions() -> tuple:
    """(NVVM's version, the NVVM IR version it reads)."""
    from cuda.bindings import nvvm

    return nvvm.version(), nvvm.ir_version()


@functools.cache
def _libdevice() -> bytes:
    from cuda import pathfinder

    with open(pathfinder.find_bitcode_lib("device"), "rb") as f:
        return f.read()


def _refused(program: ThreadProgram, log: str) -> TileError:
    """The error of a kernel ptxas would not assemble: a TileLimitError where its threads per
    block leave too few registers (``num_threads`` threads share 65536, at most 255 each)."""
    need = re.search(r"Insufficient registers \((\d+)\).*?register target of (\d+)", log, re.S)
    if need:
        have, want = need.groups()
        return TileLimitError(
            f"{program.name}: with {program.num_threads} threads per block each thread has {have} registers, and "
            f"ptxas needs {want} for it: fewer threads per block (num_threads=) or smaller tiles (fewer results "
            "a thread)"
        )
    return TileCompilerError(f"ptxas rejected the kernel {program.name}:\n{log.strip()}")


def compile_ir(text: str, cc) -> str:
    """NVVM IR text → PTX for ``cc`` (optimized at -O3, libdevice linked lazily)."""
    from cuda.bindings import nvvm

    program = nvvm.create_program()
    try:
        ir_bytes = text.encode()
        nvvm.add_module_to_program(program, ir_bytes, len(ir_bytes), "kernel")
        libdevice = _libdevice()
        nvvm.lazy_add_module_to_program(program, libdevice, len(libdevice), "libdevice")
        options = [f"-arch=compute_{cc[0]}{cc[1]}", "-opt=3"]
        try:
            nvvm.compile_program(program, len(options), options)
        except nvvm.nvvmError as e:
            size = nvvm.get_program_log_size(program)
            log = bytearray(size)
            nvvm.get_program_log(program, log)
            raise TileCompilerError(f"NVVM rejected the kernel: {e}\n{log.decode(errors='replace').strip()}") from None
        out = bytearray(nvvm.get_compiled_result_size(program))
        nvvm.get_compiled_result(program, out)
        return out.rstrip(b"\0").decode()
    finally:
        nvvm.destroy_program(program)


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


def _general_launcher(kernel_ref, device_id: int):
    """The launcher of the general version of the kernel ``kernel_ref`` refers to."""
    return kernel_ref().general().launcher(device_id)


def _with_tensor_maps(ptx: str, count: int) -> str:
    """The kernel's PTX with ``count`` tensor-map parameters after numba's: 128 bytes each,
    64-byte aligned, named as ``cuda_tma.tma_load`` reads them (the launcher fills them)."""
    if not count:
        return ptx
    params = "".join(f",\n\t.param .align 64 .b8 tl_map_{i}[128]" for i in range(count))
    entry = re.search(r"\.entry\s+[\w$]+\(([^)]*)\)", ptx)
    return ptx[: entry.end(1)] + params + ptx[entry.end(1) :]
