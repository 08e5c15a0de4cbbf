"""The few CUDA driver calls a launch makes (through cuda.bindings).

Launching is the hot path of small kernels: cuda.core packs and type-checks every
parameter on every call (~9 us on the H200 host); here a kernel's parameters are packed
with one ``struct.pack_into`` into a buffer laid out once, and ``cuLaunchKernel`` gets
that buffer's pointer array (5-8 us in all on that shared host, of which the driver's own
work is ~4.5-5 and cuda.bindings' wrapper ~2: benchmarks/launch_breakdown.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import threading

from ..errors import TileError

# struct codes of scalar parameters, as the kernel's PTX declares them
# (16-bit floats travel as float32, bool as one byte)
PARAM_CODES = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B", "uint16": "H",
    "uint32": "I", "uint64": "Q", "float16": "f", "bfloat16": "f", "float32": "f", "float64": "d",
}  # fmt: skip


def check(result, what: str):
    from cuda.bindings import driver

    if result != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(result)
        raise TileError(f"{what} failed: {(name or b'CUDA error').decode()} ({int(result)})")


_PRIMARY: dict = {}  # device -> its primary context, retained once for the life of the process


def primary_context(device: int):
    context = _PRIMARY.get(device)
    if context is None:  # retained for good, as numba and cuda.core do
        from cuda.bindings import driver

        result, context = driver.cuDevicePrimaryCtxRetain(device)
        check(result, f"retaining cuda:{device}'s context")
        _PRIMARY[device] = context
    return context


@contextlib.contextmanager
def on_device(device: int):
    """Make ``device``'s primary context current and restore the caller's afterwards
    (so torch's current device, say, is unchanged)."""
    from cuda.bindings import driver

    _, previous = driver.cuCtxGetCurrent()
    target = primary_context(device)
    if int(previous) == int(target):
        yield
        return
    check(driver.cuCtxSetCurrent(target)[0], "cuCtxSetCurrent")
    try:
        yield
    finally:
        driver.cuCtxSetCurrent(previous)


def param_layout(codes: str) -> tuple[struct.Struct, list[int]]:
    """The packing of a parameter list (one struct code per parameter) into one buffer
    with C's alignment ("@"), and each parameter's offset in it (what ``cuLaunchKernel``'s
    ``kernelParams`` point at)."""
    offsets = [struct.calcsize("@" + codes[: i + 1]) - struct.calcsize(code) for i, code in enumerate(codes)]
    return struct.Struct("@" + codes), offsets


class KernelLauncher:
    """Launches of one loaded kernel on one device: the parameters packed into one buffer
    laid out as the C ABI lays out the kernel's parameter list, then ``cuLaunchKernel``."""

    def __init__(self, kernel, codes: str, threads: int, shared: int, device: int, name: str):
        from cuda.bindings import driver

        self.kernel = kernel  # a cuda.core Kernel: it keeps its loaded library alive
        self.function = driver.CUfunction(int(kernel.handle))  # a CUkernel: launches in the current context
        self.threads, self.shared, self.device, self.name = threads, shared, device, name
        self.pack, offsets = param_layout(codes)
        self.buffer = ctypes.create_string_buffer(max(self.pack.size, 1))
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * max(len(offsets), 1))(*(base + o for o in offsets))
        self.params = ctypes.addressof(self.pointers)
        self.lock = threading.Lock()  # one buffer: a launch packs and queues as one step
        self.launch, self.success = driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS
        self.streams, self.stream_type = {}, driver.CUstream

    def __call__(self, grid: tuple, stream: int, flat):
        """Queue the kernel on ``stream`` (a raw handle) over ``grid`` (three sizes) with
        ``flat``, its parameters in order; the driver copies them at the call."""
        cu_stream = self.streams.get(stream)
        if cu_stream is None:
            if len(self.streams) > 64:  # streams come and go; keep the recent ones
                self.streams.clear()
            cu_stream = self.streams[stream] = self.stream_type(stream)
        gx, gy, gz = grid
        with self.lock:
            self.pack.pack_into(self.buffer, 0, *flat)
            (result,) = self.launch(
                self.function, gx, gy, gz, self.threads, 1, 1, self.shared, cu_stream, self.params, 0
            )
        if result != self.success:
            self.failed(result, grid, stream, flat)

    def failed(self, result, grid, stream, flat):
        """A thread where no context is current yet gets the device's primary one (as the
        runtime API would) and the launch again; any other failure is a TileError."""
        from cuda.bindings import driver

        context = primary_context(self.device)
        if result == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT and int(driver.cuCtxGetCurrent()[1]) != int(context):
            check(driver.cuCtxSetCurrent(context)[0], "cuCtxSetCurrent")
            return self(grid, stream, flat)
        check(result, f"launching {self.name}")
