"""Runtime: what the arguments of a launch are, and running a compiled kernel on them.

Arrays are NumPy arrays (host), or anything with ``__cuda_array_interface__`` (CuPy,
PyTorch CUDA tensors, numba device arrays: device), or anything NumPy can view
(``__array_interface__``, ``__array__``: host). The interpreter and the CPU backend run
on host arrays; the CUDA backend runs on device arrays and copies host arrays to the
GPU and back (only the arrays the kernel writes come back).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from dataclasses import dataclass

import numpy as np

from . import dtypes
from ._backends.cuda_driver import on_device, primary_context
from ._ir.core import ArrayType, Program, array_accesses
from .errors import PASSED_THROUGH, TileArgumentError, TileError, TileTypeError, at_user_call, user_location


@dataclass
class ArrayInfo:
    dtype: dtypes.DType
    shape: tuple
    strides: tuple | None  # in elements (None for host arrays: not needed)
    ptr: int
    on_device: bool
    device: int = 0
    unit: bool = True  # the last dimension's elements are adjacent
    readonly: bool = False  # its producer says so (__cuda_array_interface__, DLPack)


_TORCH_DTYPES = {}


def _torch_info(t) -> ArrayInfo:
    """PyTorch tensors directly (their ``__cuda_array_interface__`` is slow and has no bfloat16)."""
    if not _TORCH_DTYPES:
        import torch

        for d in dtypes.ALL_DTYPES:
            _TORCH_DTYPES[getattr(torch, "bool" if d.is_bool else d.name, None)] = d  # (float8: torch >= 2.1)
        _TORCH_DTYPES.pop(None, None)
        _TORCH_DTYPES[None] = torch.strided  # (the one layout of arrays of elements)
    d = _TORCH_DTYPES.get(t.dtype)
    if d is None:
        raise TileTypeError(f"{t.dtype} is not a supported dtype")
    if t.layout is not _TORCH_DTYPES[None]:
        raise TileTypeError(f"a {t.layout} tensor is not an array of elements: pass .to_dense()")
    if t.is_neg():  # (its memory holds the values' negation, z.conj().imag say)
        raise TileTypeError("a lazily negated tensor (torch's neg bit): pass .resolve_neg()")
    # torch calls a tensor contiguous whatever the strides of its size-1 axes, which never
    # move an index: C strides serve as well, and are what the fast path reads (one call less)
    strides = c_strides(t.shape) if t.is_contiguous() else t.stride()
    unit = _unit_stride(t.shape, strides)
    device = t.get_device()  # -1 on the host; cheaper than t.device
    return ArrayInfo(d, t.shape, strides, t.data_ptr(), device >= 0, max(device, 0), unit)


def attribute_reading(value):
    """How a numba or CuPy device array is read by its attributes (``.dtype``, ``.shape``,
    ``.strides`` in bytes, the pointer down a chain of attributes), rather than by its
    ``__cuda_array_interface__``: numba builds that at each access and calls a broadcast
    (stride-0) array contiguous, CuPy synchronizes its stream first (~20 us a launch).
    ``(pointer attributes, device of the array)``, or None for other arrays."""
    kind = type(value)
    if getattr(kind, "__cuda_ndarray__", False):
        return _NUMBA_POINTER, _numba_device
    if kind.__module__.startswith("cupy") and hasattr(kind, "__cuda_array_interface__") and hasattr(kind, "data"):
        return _CUPY_POINTER, _cupy_device
    return None


_NUMBA_POINTER, _CUPY_POINTER = ("gpu_data", "device_pointer"), ("data", "ptr")


_NUMBA_DEVICES = weakref.WeakKeyDictionary()  # numba's memory object -> its GPU (a driver call, once)


def _numba_device(a) -> int:
    """The GPU of a numba array's memory (numba's own context for it is whichever was
    current when it wrapped the memory, so the driver is asked; once per memory object)."""
    memory = a.gpu_data
    try:
        device = _NUMBA_DEVICES.get(memory)
    except TypeError:  # no memory object to remember it by
        return _pointer_device(_pointer(a, _NUMBA_POINTER))
    if device is None:
        device = _NUMBA_DEVICES[memory] = _pointer_device(_pointer(a, _NUMBA_POINTER))
    return device


def _cupy_device(a) -> int:
    return a.device.id


def _pointer(a, attributes) -> int:
    for attribute in attributes:
        a = getattr(a, attribute)
    return int(a)  # numba's is a cuda.bindings CUdeviceptr


def _element_strides(byte_strides, itemsize: int, ptr: int = 0) -> tuple | None:
    """Strides in elements (None where none are given); an array whose strides are not whole
    elements (NumPy's ``as_strided`` allows them), or a device array whose pointer is not, is
    refused: every backend indexes by element, and the GPU faults on a misaligned element."""
    odd = any(s % itemsize for s in byte_strides or ())
    if odd or ptr % itemsize:
        where = f"strides of {tuple(byte_strides)} bytes" if odd else f"its data at {ptr:#x}"
        raise TileArgumentError(
            f"an array with {where}, not whole {itemsize}-byte elements: pass a copy (np.ascontiguousarray)"
        )
    return None if byte_strides is None else tuple(s // itemsize for s in byte_strides)


def _attribute_info(a, pointer, device_of) -> ArrayInfo:
    ptr = _pointer(a, pointer)
    strides = _element_strides(a.strides, a.dtype.itemsize, ptr)
    shape = tuple(a.shape)
    return ArrayInfo(_dtype(a.dtype), shape, strides, ptr, True, device_of(a), _unit_stride(shape, strides))


def _unit_stride(shape, strides, step=1) -> bool:
    """Whether the last dimension's elements are adjacent (``step`` apart in ``strides``' unit)."""
    return not shape or shape[-1] <= 1 or strides[-1] == step


def c_strides(shape) -> tuple:
    """The strides, in elements, of a C-contiguous array of this shape."""
    return tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape)))


def is_torch_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def untraced(fn):
    """``fn``, run with torch.compile's dynamo off where dynamo is loaded: a launch in compiled
    code (not through tl.torch.custom_op) is then a graph break that runs eagerly. Traced, ~400
    of tilelang's own frames (and the kernel's) went through dynamo, which failed inside. A
    TileError leaves with this frame alone (it is located at the user's line already)."""
    disabled = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            dynamo = sys.modules.get("torch._dynamo")
            if dynamo is None:
                return fn(*args, **kwargs)
            if not disabled:
                disabled.append(dynamo.disable(fn, recursive=True))
                code = getattr(disabled[0], "__code__", None) or type(disabled[0]).__call__.__code__
                PASSED_THROUGH.add(code.co_filename)  # (errors are located past its frame)
            return disabled[0](*args, **kwargs)
        except TileError as err:
            raise at_user_call(err) from None

    return call


def without_data(arguments: dict) -> bool:
    """Whether the launch has torch tensors with shape but no data: fake ones (torch.compile and
    ``torch.library.opcheck`` trace custom ops on those), or meta ones only. Meta tensors beside
    torch tensors with data (a model's weight never materialized) are a TileArgumentError:
    skipping the launch left its outputs unwritten."""
    meta, real = [], []
    for name, v in arguments.items():
        if is_torch_tensor(v):
            if type(v).__name__ != "Tensor" and _is_fake(v):
                return True
            (meta if getattr(v, "is_meta", False) else real).append(name)
    if meta and real:
        raise TileArgumentError(
            f"{_names(meta)} {'is a meta tensor' if len(meta) == 1 else 'are meta tensors'} (no data) and "
            f"{_names(real)} {'has' if len(real) == 1 else 'have'} data: move them to one device"
        )
    return bool(meta)


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _is_fake(t) -> bool:
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # (a stand-in for torch)
        return False
    return is_fake(t)


def array_info(value) -> ArrayInfo | None:
    """Facts about an array argument, or None if ``value`` is not an array."""
    if isinstance(value, type):  # a class (np.ndarray, say) has these methods unbound
        return None
    if is_torch_tensor(value):
        return _torch_info(value)
    reading = attribute_reading(value)
    if reading is not None:
        return _attribute_info(value, *reading)
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        dt = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        ptr, readonly = cai["data"]
        strides = _element_strides(cai.get("strides"), dt.itemsize, ptr or 0)
        strides = c_strides(shape) if strides is None else strides
        unit = _unit_stride(shape, strides)
        return ArrayInfo(_dtype(dt), shape, strides, ptr, True, _pointer_device(ptr), unit, bool(readonly))
    dlpack_device = getattr(value, "__dlpack_device__", None)
    device_type = dlpack_device()[0] if dlpack_device is not None else None
    if device_type is not None and device_type not in DLPACK_HOST:
        return _dlpack_info(value, device_type)
    array = _host_view(value)[0]
    if array is None:
        return None
    _element_strides(array.strides, array.itemsize)
    unit = _unit_stride(array.shape, array.strides, array.itemsize)  # NumPy's strides are in bytes
    return ArrayInfo(_dtype(array.dtype), array.shape, None, 0, False, 0, unit)


DLPACK_HOST, DLPACK_CUDA = (1, 3), (2, 13)  # kDLCPU, kDLCUDAHost; kDLCUDA, kDLCUDAManaged


def _dlpack_info(value, device_type: int) -> ArrayInfo:
    """A GPU array known by DLPack alone, read through cuda.core's StridedMemoryView
    (without a stream to synchronize with its producer: see docs/runtime.md)."""
    if device_type not in DLPACK_CUDA:
        raise TileArgumentError(f"a DLPack array on device type {device_type}: tilelang runs on CUDA GPUs and the host")
    from cuda.core.utils import StridedMemoryView

    view = StridedMemoryView.from_dlpack(value, stream_ptr=-1)
    shape = tuple(view.shape)
    strides = tuple(view.strides or c_strides(shape))
    dtype = _dtype(np.dtype(view.dtype))
    return ArrayInfo(
        dtype, shape, strides, view.ptr, True, view.device_id, _unit_stride(shape, strides), bool(view.readonly)
    )


def _host_view(value) -> tuple[np.ndarray | None, bool]:
    """A host array as NumPy sees it, and whether that is the caller's memory (a NumPy
    array or interface, a torch tensor, DLPack) rather than a copy ``__array__`` may have
    made; (None, False) if ``value`` is no array."""
    if isinstance(value, np.ndarray):
        return value, True
    interface = getattr(value, "__array_interface__", None)
    if interface is not None:
        array, data = np.asarray(value), interface.get("data")  # (pointer, read-only), or a buffer
        return array, isinstance(data, tuple) and array.__array_interface__["data"][0] == data[0]
    with contextlib.suppress(TypeError, RuntimeError, BufferError, ValueError):  # (bf16, say)
        if is_torch_tensor(value):
            return _torch_host_view(value.detach()), True
        if hasattr(value, "__dlpack__"):
            return np.from_dlpack(value), True
    if hasattr(value, "__array__"):
        return np.asarray(value), False
    return None, False


def _torch_host_view(t) -> np.ndarray:
    """A host tensor's memory as NumPy (bfloat16 and float8, which NumPy's torch bridge
    refuses, by their bits: ml_dtypes' types)."""
    torch = sys.modules.get("torch")  # (imported already where t is a torch tensor)
    name = str(t.dtype).removeprefix("torch.")
    if torch is not None and name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        d = dtypes.dtype(name)
        return t.view(torch.int16 if d.bits == 16 else torch.uint8).numpy().view(d.np)
    return t.numpy()


def read_cuda_array(value, flat):
    """A fast path's reader of a device array other than a torch tensor or a numba or CuPy
    array (tilelang/_fastpath.py):
    appends its pointer, shape and strides to ``flat`` and returns the facts its
    specialization and launch depend on; None (alike nothing) for a host array or a dtype
    the full path must name in its error."""
    try:
        info = array_info(value)
    except TileError:
        return None
    if not info.on_device:
        return None
    flat.append(info.ptr)
    flat += info.shape
    flat += info.strides
    return info.dtype, len(info.shape), info.unit, info.device, info.readonly, shares_memory(info.shape, info.strides)


@functools.cache
def gpu_count() -> int:
    """The GPUs the driver sees (0 without a driver), asked of cuda.bindings: importing
    numba.cuda for this would cost a first launch hundreds of milliseconds."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
        return int(count) if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # no driver library on this machine
        return 0


def _pointer_device(ptr: int) -> int:
    """The device a CUDA pointer belongs to (asked of the driver only where there are
    several): the device whose primary context allocated it. (cuda.bindings reads the
    DEVICE_ORDINAL attribute as 0 whatever the device: NVIDIA/cuda-python#2928.)"""
    if not ptr or gpu_count() <= 1:
        return 0
    from cuda.bindings import driver

    err, context = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TileArgumentError(f"cannot tell which GPU the pointer {ptr:#x} is on: {err}")
    for device in range(gpu_count()):
        if int(primary_context(device)) == int(context):
            return device
    raise TileArgumentError(f"the memory at {ptr:#x} belongs to no GPU's primary context; pass torch or CuPy arrays")


_NP_DTYPES: dict = {}


def _dtype(np_dtype):
    d = _NP_DTYPES.get(np_dtype)
    if d is None:
        if not np_dtype.isnative:  # (kernels read and write their elements' bytes as this machine orders them)
            raise TileTypeError(
                f"an array of {np_dtype.name} in {'big' if np_dtype.byteorder == '>' else 'little'}-endian byte "
                "order, not this machine's: convert it first, e.g. x.astype(x.dtype.newbyteorder('='))"
            )
        try:
            d = _NP_DTYPES[np_dtype] = dtypes.dtype(np_dtype)
        except TileError as err:
            raise TileTypeError(err.message) from None
    return d


@functools.cache
def gpu_available() -> bool:
    return gpu_count() > 0


@functools.cache
def default_arch() -> str:
    """What the lowering targets when a kernel names nothing: ``sm_90a`` (dots on wgmma) on
    a Hopper GPU and where there is no GPU (explain's PTX, the CPU backend running what a
    Hopper would), ``sm_80`` (mma.sync) on other GPUs."""
    if not gpu_available():
        return "sm_90a"
    from cuda.core import Device

    return "sm_90a" if tuple(Device(0).compute_capability) == (9, 0) else "sm_80"


@functools.cache
def default_backend() -> str:
    """``TILELANG_BACKEND`` if set, else CUDA when a GPU is present, else the CPU backend."""
    chosen = os.environ.get("TILELANG_BACKEND")
    if chosen:
        return chosen
    if gpu_available():
        return "cuda"
    print("tilelang: no CUDA GPU found; running kernels on the CPU backend", file=sys.stderr)
    return "cpu"


# H200 SXM datasheet figures, used when no GPU is present to ask.
ASSUMED_DEVICE = ("NVIDIA H200 (assumed: no GPU here; datasheet figures)", 4.8e12, 67e12)


def device_peaks(device_id: int = 0) -> tuple[str, float, float]:
    """(name, memory bandwidth in bytes/s, fp32 flop/s) of a GPU, from its properties."""
    if not gpu_available():
        return ASSUMED_DEVICE
    from cuda.core import Device

    device = Device(device_id)
    p = device.properties
    bandwidth = 2 * p.memory_clock_rate * 1e3 * p.global_memory_bus_width / 8
    flops = p.multiprocessor_count * 128 * 2 * p.clock_rate * 1e3  # 128 fp32 FMA lanes per SM
    return device.name, bandwidth, flops


def host_array(name, value, info: ArrayInfo) -> tuple[np.ndarray, bool]:
    """The NumPy view of a host array argument (``info``: what ``specialize`` read of it),
    and whether it is the caller's memory."""
    if info.on_device:
        raise TileArgumentError(
            f"argument `{name}` is in GPU memory; the interpreter and the CPU backend need host arrays "
            "(copy it to the host, or run with backend='cuda')"
        )
    return _host_view(value)


def scalar_converter(t):
    """A runtime scalar's conversion to its kernel parameter's NumPy type (16- and 8-bit
    floats travel as float32, the type their registers have)."""
    d = t.dtype
    if d.is_narrow_float:
        return lambda v: np.float32(d.np.type(v))
    return d.np.type


def _check_writable(name, array: np.ndarray, zero_copy: bool):
    """A written host array must be writable, own its elements' memory and be the memory the
    caller sees (not a copy)."""
    if not array.flags.writeable:
        raise TileArgumentError(f"argument `{name}` is read-only, and the kernel writes it")
    _check_unshared(name, array.shape, array.strides)
    if not zero_copy:
        raise TileArgumentError(
            f"argument `{name}` converts to a NumPy copy, so the kernel's writes would be lost; pass a NumPy array"
        )


def shares_memory(shape, strides) -> bool:
    """Whether elements of an array of this shape and strides share memory (a stride of 0)."""
    return 0 not in shape and any(step == 0 and size > 1 for size, step in zip(shape, strides))


def _check_unshared(name, shape, strides):
    """A written array's elements each have memory of their own: an expanded (stride 0) view
    shares it, and its writes would race (torch refuses in-place writes to such tensors)."""
    if shares_memory(shape, strides):
        raise TileArgumentError(
            f"argument `{name}` has elements that share memory (a stride of 0: an expanded or broadcast view), "
            "and the kernel writes it: writes to one address would race; pass an array of its own (.contiguous())"
        )


class HostRunner:
    """Runs a host backend (interpreter or CPU) on host arrays."""

    def __init__(self, program: Program, run, interpret=False):
        self.program, self.run, self.interpret = program, run, interpret
        self.written = array_accesses(program)[1]

    def __call__(self, grid, arguments: dict, infos: dict, stream=None):
        values = []
        for var, name in zip(self.program.body.params, self.program.arg_names):
            if isinstance(var.type, ArrayType):
                array, zero_copy = host_array(name, arguments[name], infos[name])
                if name in self.written:
                    _check_writable(name, array, zero_copy)
                values.append(array)
            elif self.interpret:
                values.append(var.type.dtype.cast(arguments[name])[()])
            else:
                values.append(scalar_converter(var.type)(arguments[name]))
        self.run(grid, values)

    def fast_launch(self, arguments: dict, infos: dict):
        return None  # host backends convert every call's arguments


def stream_handle(stream) -> int:
    """The raw handle of a ``stream=`` argument: anything with ``__cuda_stream__``, a
    torch/CuPy/numba stream, or a handle."""
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if hasattr(stream, "handle"):  # numba stream
        return int(getattr(stream.handle, "value", stream.handle) or 0)
    if isinstance(stream, int):
        return stream
    message = f"stream= takes a CUDA stream object or handle, got {type(stream).__name__}"
    raise TileArgumentError(message, user_location())  # located here: a fast path (C) calls this too


def _default_stream(device: int) -> int:
    return 0


def _cupy_stream(device: int) -> int:
    import cupy

    return cupy.cuda.get_current_stream(device).ptr


def current_stream(values):
    """How to find the stream a launch without ``stream=`` goes on, as a function of the
    device: the current stream of the framework the arrays come from (torch, then CuPy),
    else the default stream."""
    if any(is_torch_tensor(v) for v in values):
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # fast: no Stream object
        return raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)
    if any(type(v).__module__.startswith("cupy") for v in values):
        return _cupy_stream
    return _default_stream


def require_gpu():
    if not gpu_available():
        raise TileArgumentError("backend='cuda' needs an NVIDIA GPU and none was found; use backend='cpu'")


def launch_device(infos: dict) -> int:
    """The GPU the device arrays live on (host arrays follow them, or go to the current
    device); arrays on two GPUs in one launch are an error naming them."""
    on = {name: info.device for name, info in infos.items() if info.on_device}
    devices = set(on.values())
    if len(devices) > 1:
        where = ", ".join(f"`{name}` on cuda:{d}" for name, d in on.items())
        raise TileArgumentError(f"the arrays of one launch must be on one GPU; got {where}")
    if devices:
        return devices.pop()
    return current_device()


def current_device() -> int:
    from cuda.bindings import runtime

    return runtime.cudaGetDevice()[1]


def launch_grid(grid, arguments) -> tuple:
    """A launch's grid as a tuple of 1 to 3 ints: an int, a tuple, or a function of the
    arguments by name giving one."""
    if type(grid) is int and 0 <= grid < 2**31:  # the common case, first
        return (grid,)
    if callable(grid):
        grid = grid(arguments)
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise TileArgumentError(f"the grid must be an int or a tuple of 1 to 3 ints, got {grid!r}")
    for axis, g in enumerate(grid):  # CUDA's limits, on every backend (block ids are int32: past 2**31 they wrapped)
        if not isinstance(g, (int, np.integer)) or isinstance(g, bool) or not 0 <= g < (2**31 if axis == 0 else 65536):
            raise TileArgumentError(
                f"grid sizes must be ints from 0 to 2**31 - 1 (the first) and to 65535 (the others), got {grid!r}"
            )
    return tuple(int(g) for g in grid)


def grid3(grid: tuple) -> tuple:
    """A grid of one to three sizes as the three the driver takes."""
    return grid + (1,) * (3 - len(grid))


class CudaRunner:
    """Launches on the GPU through the driver; host arrays are copied there and back
    (only those the kernel writes come back), which costs a transfer each way."""

    def __init__(self, program: Program, cuda_kernel):
        self.program = program
        self.kernel = cuda_kernel
        self.written = array_accesses(program)[1]
        self.params = [
            (name, None if isinstance(var.type, ArrayType) else scalar_converter(var.type))
            for var, name in zip(program.body.params, program.arg_names)
        ]

    def __call__(self, grid, arguments: dict, infos: dict, stream=None):
        if gpu_count() <= 1:  # the fast path: no device to choose or restore
            require_gpu()
            return self.launch(grid, arguments, infos, stream, 0)
        device = launch_device(infos)
        with on_device(device):
            self.launch(grid, arguments, infos, stream, device)

    def launch(self, grid, arguments, infos, stream, device):
        flat, copies, keep = [], [], []
        for name, convert in self.params:
            value = arguments[name]
            if convert is not None:
                flat.append(convert(value))
                continue
            info = infos[name]
            if name in self.written and info.readonly:  # refused before anything runs, not after
                raise TileArgumentError(f"argument `{name}` is read-only, and the kernel writes it")
            if name in self.written and info.on_device:  # (a host array's view is checked below)
                _check_unshared(name, info.shape, info.strides)
            if not info.on_device:
                from numba import cuda

                host, zero_copy = _host_view(value)
                if name in self.written:
                    _check_writable(name, host, zero_copy)
                if host.size == 0:  # nothing to copy
                    flat += [0, *host.shape, *c_strides(host.shape)]
                    continue
                if dtypes.dtype(host.dtype).is_narrow_float:  # numba moves their bits
                    host = host.view(f"u{host.dtype.itemsize}")
                flat_host = np.ascontiguousarray(host).reshape(-1)
                if name in self.written and host.dtype.itemsize == 1 and host.size % 4:
                    # an 8-bit atomic updates the aligned 32-bit word holding its element: the
                    # copy ends on a whole word (else compute-sanitizer sees a read past its end)
                    flat_host = np.concatenate([flat_host, np.zeros(-host.size % 4, host.dtype)])
                with cuda.gpus[device]:  # allocated on the GPU the kernel runs on; copied flat, as
                    # numba's shape checks refused some (a (1, 1) array against a (0, 1) one on the H200)
                    copy = cuda.to_device(flat_host)
                keep.append(copy)  # alive until the kernel has run
                if name in self.written:
                    copies.append((host, copy))
                flat += [copy.__cuda_array_interface__["data"][0], *host.shape, *c_strides(host.shape)]
                continue
            flat += [info.ptr, *info.shape, *info.strides]
        if 0 not in grid:
            handle = current_stream(arguments.values())(device) if stream is None else stream_handle(stream)
            self.kernel.launcher(device)(grid3(grid), handle, flat)
        if keep:  # the kernel may run on another stream than numba's copies: wait for it
            from numba import cuda

            cuda.synchronize()
        for host, copy in copies:
            host[...] = copy.copy_to_host()[: host.size].reshape(host.shape)

    def fast_launch(self, arguments: dict, infos: dict):
        """What a fast path for calls like this one launches with (see tilelang/_fastpath.py):
        ``(launcher, current_stream, device)``; None where each call must take the full path
        (host arrays to copy, or no array to place the launch)."""
        if not infos or not all(info.on_device for info in infos.values()):
            return None
        device = launch_device(infos)
        return self.kernel.launcher(device), current_stream(arguments.values()), device
