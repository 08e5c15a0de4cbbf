"""The few CUDA driver calls tilelang makes: contexts through cuda.bindings, launches
through the C launcher (tilelang/_launch.c), which calls ``cuLaunchKernel`` itself.

Launching is the hot path of small kernels: cuda.core packs and type-checks every
parameter on every call (~9 us on the H200 host), cuda.bindings' wrapper with a
``struct``-packed buffer costs ~2 us more than the driver's own ~4.5
(benchmarks/launch_breakdown.py), so the launch is C.
"""

from __future__ import annotations

import contextlib
import ctypes

from ..errors import TileError, at_user_call

# struct codes of scalar parameters, as the kernel's PTX declares them
# (16- and 8-bit floats travel as float32, bool as one byte)
PARAM_CODES = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B", "uint16": "H",
    "uint32": "I", "uint64": "Q", "float8_e4m3fn": "f", "float8_e5m2": "f", "float16": "f", "bfloat16": "f",
    "float32": "f", "float64": "d",
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


_ENTRY_POINTS: list = []


def entry_points() -> tuple[int, int, int]:
    """The addresses of cuLaunchKernel, cuCtxGetCurrent and cuCtxSetCurrent in the driver
    library cuda.bindings uses too (one per process), for the C launcher."""
    if not _ENTRY_POINTS:
        library = ctypes.CDLL("libcuda.so.1")
        names = ("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent")
        _ENTRY_POINTS.extend(ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in names)
    return tuple(_ENTRY_POINTS)


def encode_entry_point() -> int:
    """The address of cuTensorMapEncodeTiled, for launchers of kernels that copy with TMA."""
    return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled, ctypes.c_void_p).value


def launcher_module():
    """tilelang._launch, the C launch path (built by ``pip install``)."""
    try:
        from .. import _launch
    except ImportError as err:
        raise TileError(
            f"tilelang's launcher (the C extension tilelang._launch) is not built ({err}); "
            "install tilelang with `pip install -e .` (it needs a C compiler), or run on backend='cpu'"
        ) from None
    return _launch


def kernel_launcher(kernel, codes: str, threads: int, shared: int, device: int, name: str, **maps):
    """A launcher of ``kernel`` (a cuda.core Kernel, loaded on ``device``):
    ``launcher(grid, stream, flat)`` packs ``flat`` by ``codes`` (one struct code per
    parameter) and calls ``cuLaunchKernel`` in the device's primary context (C:
    tilelang/_launch.c). A failed launch is a TileError naming the kernel. ``maps``: a
    kernel's tensor maps, the arrays it takes to be aligned and the launcher of its version
    for any array (``maps``, ``aligned``, ``general``, as the C Launcher takes them)."""

    def failed(result):
        from cuda.bindings import driver

        try:
            check(driver.CUresult(result), f"launching {name}")
        except TileError as err:  # raised through C, from a fast path too: located at the user's call
            raise at_user_call(err) from None

    context = int(primary_context(device))
    Launcher = launcher_module().Launcher
    if maps.get("maps"):
        maps["encode"] = encode_entry_point()
    return Launcher(int(kernel.handle), threads, shared, codes, context, entry_points(), failed, kernel, **maps)
