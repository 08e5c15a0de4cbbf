"""The CUDA backend's float32 division (tilelang/_backends/cuda_arith.py) compiled for the
host: the same LLVM IR builders, run by MCJIT over NumPy arrays (``llvm.fma`` is exact on
the host as on the GPU), so their quotients are compared with NumPy's IEEE division bit
for bit without a GPU. Only ``rcp.approx.ftz.f64`` (PTX) has no host form: callers pass
its estimate (:func:`rough_reciprocal` stands in for it)."""

from __future__ import annotations

import ctypes
import functools

import numpy as np
from llvmlite import ir

from tilelang._backends import cuda_arith
from tilelang._backends.host_llvm import host_module, jit, unique_name

F32, F64, I1, I32, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(1), ir.IntType(32), ir.IntType(64)
_FLOATS = ctypes.POINTER(ctypes.c_float)


def _elementwise(extra: list, out_type, body, width: int = 1):
    """``f(xs, n, out, *extra)``: ``out[i] = body(builder, xs[i], *extra)`` for i < n; with a
    ``width``, n groups of that many: the body takes and gives lists (a thread's slots)."""
    module = host_module("division")
    name = unique_name("division")
    types = [F32.as_pointer(), I64, out_type.as_pointer(), *extra]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name)
    xs, n, out, *args = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    prepared = body(b, None, *args)  # (what the quotients share, built once)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    at = [b.add(b.mul(i, ir.Constant(I64, width)), ir.Constant(I64, k)) for k in range(width)]
    values = [b.load(b.gep(xs, [k])) for k in at]
    results = body(b, values, *prepared) if width > 1 else [body(b, values[0], *prepared)]
    for k, value in zip(at, results):
        b.store(value, b.gep(out, [k]))
    after = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(after, b.block)
    b.cbranch(b.icmp_signed("<", after, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return jit(module, name)


def _run(address, ctypes_extra, xs, out_dtype, *extra):
    xs = np.ascontiguousarray(xs, np.float32)
    out = np.empty(xs.shape, out_dtype)
    out_ptr = ctypes.POINTER(ctypes.c_uint8 if out_dtype == np.bool_ else ctypes.c_float)
    f = ctypes.CFUNCTYPE(None, _FLOATS, ctypes.c_int64, out_ptr, *ctypes_extra)(address)
    f(xs.ctypes.data_as(_FLOATS), xs.size, out.ctypes.data_as(out_ptr), *extra)
    return out


@functools.cache
def _markstein():
    def body(b, x, y, minus_b):
        return (y, minus_b) if x is None else cuda_arith.markstein_quotient(b, x, y, minus_b)

    return _elementwise([F32, F32], F32, body)


@functools.cache
def _wide():
    def body(b, x, *args):
        if x is None:
            return (cuda_arith.divisor64(b, *args),)
        return cuda_arith.quotient_f32(b, x, args[0])

    return _elementwise([F32, F64], F32, body)


@functools.cache
def _exact_range():
    def body(b, x, *args):
        if x is None:
            return cuda_arith.exact_range(b, args[0])
        start, span = args
        return b.zext(cuda_arith.in_exact_range(b, x, start, span), ir.IntType(8))

    return _elementwise([F32], ir.IntType(8), body)


@functools.cache
def _by_constant(bits: int):  # (keyed on the bits: -0.0 == 0.0)
    b = float(np.uint32(bits).view(np.float32))

    def body(builder, x):
        return () if x is None else cuda_arith.divide_by_shared(builder, [x], [ir.Constant(F32, b)])[0]

    return _elementwise([], F32, body)


def rough_reciprocal(b: np.float32, error: float) -> float:
    """An estimate of 1 / b off by the relative ``error`` (rcp.approx.ftz.f64's is ~2^-22), or
    IEEE's 1 / b where that is 0, an infinity or NaN (as the instruction gives)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = 1.0 / np.float64(b)
    return float(exact) if not np.isfinite(exact) or exact == 0 else float(exact * (1 + error))


def markstein(xs, b: np.float32) -> np.ndarray:
    """cuda_arith.markstein_quotient of each x by ``b``, its reciprocal rounded to float32
    as divide_by_shared rounds it."""
    y = np.float32(1.0 / np.float64(b))  # (float64 then float32: innocuous, as for the quotients)
    return _run(_markstein(), [ctypes.c_float, ctypes.c_float], xs, np.float32, y, -np.float32(b))


def wide(xs, b: np.float32, error: float = 2.0**-22) -> np.ndarray:
    """cuda_arith.quotient_f32 of each x by ``b``, from a reciprocal estimate off by ``error``."""
    return _run(_wide(), [ctypes.c_float, ctypes.c_double], xs, np.float32, b, rough_reciprocal(b, error))


def in_exact_range(xs, b: np.float32) -> np.ndarray:
    """cuda_arith.in_exact_range of each x for the divisor ``b``."""
    return _run(_exact_range(), [ctypes.c_float], xs, np.bool_, b)


def by_constant(xs, b: np.float32) -> np.ndarray:
    """cuda_arith.divide_by_shared of each x by the constant ``b`` (its reciprocals computed at
    compile time: cuda_arith.reciprocal64), one dividend a "thread"."""
    return _run(_by_constant(int(np.float32(b).view(np.uint32))), [], xs, np.float32)


@functools.cache
def _grouped(bits: tuple):
    """Each row's 8 dividends, the first 4 by one constant divisor, the others by another, in
    one divide_by_shared (as a thread's 8 slots)."""
    divisors = [ir.Constant(F32, float(np.uint32(v).view(np.float32))) for v in bits]  # (one object each)

    def body(builder, xs):
        return () if xs is None else cuda_arith.divide_by_shared(builder, xs, [divisors[k // 4] for k in range(8)])

    return _elementwise([], F32, body, width=8)


def grouped(xs, b0: np.float32, b1: np.float32) -> np.ndarray:
    """cuda_arith.divide_by_shared of rows of 8 (``xs``: (rows, 8)), by ``b0`` then ``b1``."""
    xs = np.ascontiguousarray(xs, np.float32)
    out = np.empty_like(xs)
    bits = tuple(int(np.float32(v).view(np.uint32)) for v in (b0, b1))
    f = ctypes.CFUNCTYPE(None, _FLOATS, ctypes.c_int64, _FLOATS)(_grouped(bits))
    f(xs.ctypes.data_as(_FLOATS), len(xs), out.ctypes.data_as(_FLOATS))
    return out
