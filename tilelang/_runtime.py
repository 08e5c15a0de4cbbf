"""Runtime: what the arguments of a launch are, and running a compiled kernel on them.

Arrays are NumPy arrays (host), or anything with ``__cuda_array_interface__`` (CuPy,
PyTorch CUDA tensors, numba device arrays: device), or anything NumPy can view
(``__array_interface__``, ``__array__``: host). The interpreter and the CPU backend run
on host arrays; the CUDA backend runs on device arrays and copies host arrays to the
GPU and back (only the arrays the kernel writes come back).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

import numpy as np

from . import dtypes
from ._ir.core import ArrayType, Block, Program
from .errors import TileArgumentError, TileError, TileTypeError


@dataclass
class ArrayInfo:
    dtype: dtypes.DType
    shape: tuple
    strides: tuple  # in elements
    ptr: int
    on_device: bool


def array_info(value) -> ArrayInfo | None:
    """Facts about an array argument, or None if ``value`` is not an array."""
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        dt = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) * dt.itemsize for i in range(len(shape)))
        return ArrayInfo(_dtype(dt), shape, tuple(s // dt.itemsize for s in strides), cai["data"][0], True)
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__") or hasattr(value, "__array__"):
        array = np.asarray(value)
        strides = tuple(s // array.itemsize for s in array.strides)
        return ArrayInfo(_dtype(array.dtype), array.shape, strides, array.__array_interface__["data"][0], False)
    return None


def _dtype(np_dtype):
    try:
        return dtypes.dtype(np_dtype)
    except TileError as err:
        raise TileTypeError(err.message) from None


def array_type(info: ArrayInfo) -> ArrayType:
    unit = not info.shape or info.shape[-1] <= 1 or info.strides[-1] == 1
    return ArrayType(info.dtype, len(info.shape), unit)


@functools.cache
def gpu_available() -> bool:
    try:
        from numba import cuda

        return cuda.is_available()
    except Exception:
        return False


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


def written_arrays(program: Program) -> set:
    """Names of the array arguments the kernel stores to."""
    names = dict(zip(program.body.params, program.arg_names))
    out = set()

    def walk(block: Block):
        for eqn in block.eqns:
            if eqn.prim.effect == "write":
                out.add(names[eqn.inputs[0]])
            for sub in eqn.params.values():
                if isinstance(sub, Block):
                    walk(sub)

    walk(program.body)
    return out


def host_array(name, value) -> np.ndarray:
    info = array_info(value)
    if info is None:
        raise TileArgumentError(f"argument `{name}`: expected an array, got {type(value).__name__}")
    if info.on_device:
        raise TileArgumentError(
            f"argument `{name}` is in GPU memory; the interpreter and the CPU backend need host arrays "
            "(copy it to the host, or run with backend='cuda')"
        )
    return np.asarray(value)


def scalar_value(t, value):
    """A runtime scalar as the kernel's register type (16-bit floats travel as float32)."""
    d = t.dtype
    if d.is_float and d.bits == 16:
        return np.float32(np.asarray(value).astype(d.np))
    return np.asarray(value).astype(d.np)[()]


class HostRunner:
    """Runs a host backend (interpreter or CPU) on host arrays."""

    def __init__(self, program: Program, run, interpret=False):
        self.program, self.run, self.interpret = program, run, interpret

    def __call__(self, grid, arguments: dict):
        values = []
        for var, name in zip(self.program.body.params, self.program.arg_names):
            if isinstance(var.type, ArrayType):
                values.append(host_array(name, arguments[name]))
            elif self.interpret:
                values.append(np.asarray(arguments[name]).astype(var.type.dtype.np)[()])
            else:
                values.append(scalar_value(var.type, arguments[name]))
        self.run(grid, values)


class CudaRunner:
    """Runs on the GPU through numba-cuda; host arrays are copied there and back."""

    def __init__(self, program: Program, cuda_kernel):
        self.program = program
        self.kernel = cuda_kernel
        self.written = written_arrays(program)

    def __call__(self, grid, arguments: dict):
        from numba import cuda

        flat, copies = [], []
        for var, name in zip(self.program.body.params, self.program.arg_names):
            value = arguments[name]
            if not isinstance(var.type, ArrayType):
                flat.append(scalar_value(var.type, value))
                continue
            info = array_info(value)
            if not info.on_device:
                host = np.asarray(value)
                device = cuda.to_device(np.ascontiguousarray(host))
                if name in self.written:
                    copies.append((host, device))
                info = array_info(device)
            flat += [info.ptr, *info.shape, *info.strides]
        grid = tuple(grid) + (1,) * (3 - len(grid))
        if 0 not in grid:
            self.kernel.launch(grid, flat)
        for host, device in copies:
            host[...] = device.copy_to_host()
