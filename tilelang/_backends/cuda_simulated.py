"""The intrinsics of ``cuda_intrinsics.py`` for numba's CUDA simulator, in plain Python.

Under the simulator (``NUMBA_ENABLE_CUDASIM=1``, read once when numba is imported) a
kernel is ordinary Python run by one Python thread per CUDA thread, and its arguments
are host memory: the ``uint64`` pointers the generated code receives are addresses of
NumPy arrays. So every access reads or writes ``itemsize * lanes`` bytes at
``ptr + offset * itemsize`` through a NumPy view of that memory, with the same names,
arguments and results as the GPU intrinsics: ``ld_<dtype>`` returns one register value,
``ld<N>_<dtype>`` a tuple; ``st_<dtype>`` takes one value, ``st<N>_<dtype>`` a tuple; lanes
that are masked off are not touched, and a group moves at once only when it is whole and
aligned, as on the GPU.
16-bit floats live in float32 registers as on the GPU: loads widen, stores narrow (exact),
and ``round_float16``/``round_bfloat16`` round a float32 to the nearest 16-bit value, ties
to even (``np.float16`` and ``ml_dtypes.bfloat16`` convert from float32 as ``cvt.rn``
does). A vector access at an address that is not a multiple of its size raises, as the
GPU faults on a misaligned ``ld.global.v4``.

Atomics: the simulator's threads are real Python threads, switched preemptively between
barriers (not run one at a time), so each atomic is a read-modify-write under one lock,
as numba's own simulated ``cuda.atomic`` is. Float ``max``/``min`` let NaN win, as the
GPU's compare-and-swap loop does; integers wrap.
"""

from __future__ import annotations

import ctypes
import operator
import threading

import numpy as np

from .. import dtypes
from .._ir import primitives
from ..dtypes import DType
from .numba_source import intrinsic_table

_ATOMIC_LOCK = threading.Lock()


def _memory(d: DType) -> np.dtype:
    return np.dtype(np.uint8) if d.is_bool else d.np


def _register(d: DType):
    """The NumPy scalar type of a register of dtype ``d`` (16-bit floats compute in float32)."""
    if d.is_float and d.bits == 16:
        return np.float32
    return np.bool_ if d.is_bool else d.np.type


def _view(ptr, offset, memory: np.dtype, lanes: int) -> np.ndarray:
    """The ``lanes`` elements at ``ptr + offset * itemsize`` as a writable NumPy array."""
    address = int(ptr) + int(offset) * memory.itemsize
    if lanes > 1 and address % (memory.itemsize * lanes):
        raise RuntimeError(f"misaligned {memory.itemsize * lanes}-byte vector access at address {address:#x}")
    return np.frombuffer((ctypes.c_char * (memory.itemsize * lanes)).from_address(address), memory)


def _whole(ptr, offset, ok, first, last, memory: np.dtype, lanes: int) -> bool:
    """As the GPU decides: one access when every lane is in and the address is aligned."""
    aligned = (int(ptr) + int(offset) * memory.itemsize) % (memory.itemsize * lanes) == 0
    return bool(ok) and first <= 0 and last >= lanes and aligned


def _load(d: DType, lanes: int):
    memory, reg = _memory(d), _register(d)

    if lanes == 1:

        def load(ptr, offset, ok, pad):
            return reg(_view(ptr, offset, memory, 1)[0]) if ok else pad

        return load

    def load_vector(ptr, offset, ok, first, last, pad):
        if _whole(ptr, offset, ok, first, last, memory, lanes):
            return tuple(reg(x) for x in _view(ptr, offset, memory, lanes))
        return tuple(
            reg(_view(ptr, offset + i, memory, 1)[0]) if ok and first <= i < last else pad for i in range(lanes)
        )

    return load_vector


def _load_words(d: DType, lanes: int):
    bits = _load(dtypes.uint16, lanes)

    def load_words(ptr, offset, ok, first, last, pad):
        lane = bits(ptr, offset, ok, first, last, pad)
        return tuple(np.uint32(int(lane[2 * w]) | int(lane[2 * w + 1]) << 16) for w in range(lanes // 2))

    return load_words


def _store(d: DType, lanes: int):
    memory = _memory(d)

    if lanes == 1:

        def store(ptr, offset, ok, value):
            if ok:
                _view(ptr, offset, memory, 1)[:] = value

        return store

    def store_vector(ptr, offset, ok, first, last, values):
        if _whole(ptr, offset, ok, first, last, memory, lanes):
            _view(ptr, offset, memory, lanes)[:] = values
            return
        for i in range(lanes):
            if ok and first <= i < last:
                _view(ptr, offset + i, memory, 1)[:] = values[i]

    return store_vector


def _round(d: DType):
    def round_(x):
        with np.errstate(over="ignore"):  # overflow rounds to inf, as on the GPU
            return np.float32(d.np.type(np.float32(x)))  # float32 → 16 bits directly: no double rounding

    return round_


def _value(d: DType):
    def value(bits):
        return np.float32(np.uint16(bits).view(d.np))

    return value


def _atomic(op: str, d: DType):
    memory, reg = _memory(d), _register(d)
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]

    def atomic(ptr, offset, value):
        with _ATOMIC_LOCK:
            cell = _view(ptr, offset, memory, 1)
            ufunc(cell, reg(value), out=cell)  # arrays wrap silently, as the GPU does

    return atomic


def _build():
    table = intrinsic_table(_load, _load_words, _store, _atomic, _round, _value)
    for name, fn in table.items():
        fn.__name__ = fn.__qualname__ = name
    return table


INTRINSICS = _build()


def select(cond, a, b):
    return a if cond else b


INTRINSICS["select"] = select


def copy_float32s(buffer, index, ptr, base, offset, ok, first, last):
    """``cp_async16_float32`` done at once (the simulator has no asynchronous copies: data that
    lands before the wait is what a cp.async promises): 4 lanes, zeros where out."""
    for i in range(4):
        inside = ok and first <= i < last
        buffer[index + i] = _view(ptr, base + offset + i, np.dtype(np.float32), 1)[0] if inside else 0


INTRINSICS["tf32_bits"] = lambda x: primitives.tf32(np.float32(x)).view(np.uint32)[()]
INTRINSICS["f32_from_bits"] = lambda u: np.uint32(u).view(np.float32)
INTRINSICS["cp_async16_float32"] = INTRINSICS["cp_async16_whole_4"] = copy_float32s
INTRINSICS["cp_async_commit"] = lambda: None
INTRINSICS.update({f"cp_async_wait_{n}": (lambda: None) for n in range(8)})


def _wrapping(fn):
    def wrapping(a, b):  # int64 arithmetic modulo 2**64, as the GPU's
        return np.int64((fn(int(a), int(b)) + 2**63) % 2**64 - 2**63)

    return wrapping


INTRINSICS.update({f"wrapping_{name}": _wrapping(fn) for name, fn in
                   (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul))})  # fmt: skip


def _integer_division(fn):
    def divide(a, b):  # x // 0 and x % 0 are 0; MIN // -1 wraps to MIN (cuda_arith.py)
        d = np.asarray(a).dtype
        bits = 8 * d.itemsize
        value = fn(int(a), int(b)) if b != 0 else 0
        return d.type(value % 2**bits - (2**bits if d.kind == "i" and value % 2**bits >= 2 ** (bits - 1) else 0))

    return divide


INTRINSICS["floordiv_int"] = _integer_division(operator.floordiv)
INTRINSICS["mod_int"] = _integer_division(operator.mod)
INTRINSICS["div_rn_f32"] = INTRINSICS["div_full_f32"] = lambda a, b: np.divide(np.float32(a), np.float32(b))
INTRINSICS["max_nan_f32"] = lambda a, b: np.maximum(np.float32(a), np.float32(b))
INTRINSICS["min_nan_f32"] = lambda a, b: np.minimum(np.float32(a), np.float32(b))
INTRINSICS["ex2_ftz_f32"] = lambda x: (
    np.float32(0.0) if x < primitives.ftz_exponent(dtypes.float32) else np.exp2(np.float32(x))
)
INTRINSICS["lds2_float32"] = lambda buf, i: (buf[i], buf[i + 1])
INTRINSICS["lds4_float32"] = lambda buf, i: (buf[i], buf[i + 1], buf[i + 2], buf[i + 3])


def float32_odd(x):
    """``x`` (a float64 or an integer) → float32 rounded to odd, as the GPU's ``cvt.rz`` sequence."""
    return primitives.float32_odd(np.asarray(x))[()]


INTRINSICS["float32_odd_float"] = INTRINSICS["float32_odd_int"] = float32_odd
INTRINSICS["floor"], INTRINSICS["ceil"] = np.floor, np.ceil  # float results, signed zeros kept
