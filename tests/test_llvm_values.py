"""The LLVM expression table (``_backends/llvm_values.py``) against the interpreter, on the host.

The CUDA backend builds every thread-IR operation with ``llvm_values.op_value``; the GPU
runs it only on the device. Here each operation is built the same way with the host as the
target (``_backends/host_llvm.py``: libm for math functions, integer code for the 16-bit
roundings the GPU does with ``cvt``), compiled with llvmlite's MCJIT into a loop over
arrays and compared with the interpreter's rule (``_ir/primitives.py``) on hypothesis-drawn
values of every dtype, edge values included (NaN, infinities, -0.0, the integer extremes).
What differs between host and GPU is only what the targets give (math functions' last
ulps, the instructions that round), so integer wrap-around, shifts, floor division,
comparisons of mixed types, NaN-propagating maximum, conversions and 16-bit rounding are
checked in CI with no GPU.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from llvmlite import ir  # noqa: I001 - (after tilelang: its import sets nothing up for llvmlite)

from tilelang import dtypes as D
from tilelang._backends.host_llvm import HostTarget, host_module, jit, unique_name
from tilelang._backends.llvm_values import op_value
from tilelang._ir.core import PRIMITIVES
from tilelang._ir.primitives import BINARY, COMPARE, UNARY
from tilelang._lower.thread_ir import Op, Reg
from tilelang.testing import assert_close

N = 24  # elements per draw


def _memory(d):
    """How an array of ``d`` is handed to the compiled loop: the register's type, bools as bytes,
    16-bit floats as float32 (the registers' representation)."""
    if d.is_bool:
        return ir.IntType(8), np.uint8
    if d.is_float:
        return (ir.DoubleType(), np.float64) if d.bits == 64 else (ir.FloatType(), np.float32)
    return ir.IntType(d.bits), d.np


_COMPILED: dict = {}


def compiled(name: str, ins: tuple, out, attr=None):
    """A function ``f(a0, .., out, n)`` applying thread op ``name`` element by element."""
    key = (name, ins, out, attr)
    if key in _COMPILED:
        return _COMPILED[key]
    module = host_module(f"op_{len(_COMPILED)}")
    types = [_memory(d)[0].as_pointer() for d in (*ins, out)]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [*types, ir.IntType(64)]), unique_name("op"))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    i64 = ir.IntType(64)
    start = b.block
    loop, body, done = (fn.append_basic_block(x) for x in ("loop", "body", "done"))
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), start)
    b.cbranch(b.icmp_signed("<", i, fn.args[-1]), body, done)
    b.position_at_end(body)
    values = []
    for d, ptr in zip(ins, fn.args):
        v = b.load(b.gep(ptr, [i]))
        values.append(b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)) if d.is_bool else v)
    op = Op(Reg("out", out), name, tuple(Reg(f"a{k}", d) for k, d in enumerate(ins)), attr)
    result = op_value(HostTarget(b), op, values)
    b.store(b.zext(result, ir.IntType(8)) if out.is_bool else result, b.gep(fn.args[len(ins)], [i]))
    i.add_incoming(b.add(i, ir.Constant(i64, 1)), b.block)
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()
    address = jit(module, fn.name)
    c_types = [ctypes.c_void_p] * (len(ins) + 1) + [ctypes.c_int64]
    _COMPILED[key] = ctypes.CFUNCTYPE(None, *c_types)(address)
    return _COMPILED[key]


def run(name: str, arrays: list, out, attr=None) -> np.ndarray:
    """Thread op ``name`` on NumPy ``arrays`` (of tilelang dtypes), its result as ``out``."""
    ins = tuple(D.dtype(a.dtype) for a in arrays)
    held = [np.ascontiguousarray(a.astype(_memory(d)[1])) for a, d in zip(arrays, ins)]
    result = np.zeros(len(arrays[0]), _memory(out)[1])
    compiled(name, ins, out, attr)(*(a.ctypes.data for a in held), result.ctypes.data, len(result))
    return result.astype(np.bool_) if out.is_bool else result.astype(out.np)


def reference(name: str, arrays: list, **params) -> np.ndarray:
    return np.asarray(PRIMITIVES[name].rules["interpret"](None, *arrays, **params)[0])


_EDGES = {"f": [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 65504.0, 1e-30, -3e38, 6e-8, -1e-40]}


def values(d, nan_inf=True):
    """Arrays of ``d``: any value it holds, and its edges (NaN, infinities, -0.0, extremes)."""
    if d.is_bool:
        return hnp.arrays(np.bool_, N)
    if d.is_int:
        info = np.iinfo(d.np)
        edges = st.sampled_from([0, 1, -1 if d.kind == "i" else 2, int(info.min), int(info.max)])
        return hnp.arrays(d.np, N, elements=st.integers(int(info.min), int(info.max)) | edges)
    draw = np.float64 if d.bits == 64 else np.float32
    big = float(ml_dtypes.finfo(d.np).max)
    finite = st.floats(-big, big, width=64 if d.bits == 64 else 32, allow_nan=False)
    edges = st.sampled_from([v for v in _EDGES["f"] if (nan_inf or np.isfinite(v)) and not abs(v) > big])
    return hnp.arrays(draw, N, elements=finite | edges).map(lambda a: a.astype(d.np))


ALL = [d for d in D.ALL_DTYPES]
_EXACT_UNARY = {"neg", "invert", "abs", "floor", "ceil", "sqrt"}  # correctly rounded everywhere


@pytest.mark.parametrize("name", sorted(set(BINARY) - {"pow"}))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_binary_ops_match_the_interpreter(name, data):
    d = data.draw(st.sampled_from([d for d in ALL if d.kind in BINARY[name][1]]))
    x, y = data.draw(values(d)), data.draw(values(d))
    if name in ("floordiv", "mod") and d.is_float:
        return  # (lowered to fmod and selects before a backend sees them: tests/test_ops_elementwise.py)
    with np.errstate(all="ignore"):
        expected = reference(name, [x, y])
    assert_close(run(name, [x, y], d), expected, d, err_msg=f"{name} {d.name}\n{x}\n{y}")


@pytest.mark.parametrize("name", sorted(COMPARE))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_comparisons_match_the_interpreter(name, data):
    d = data.draw(st.sampled_from(ALL))
    x, y = data.draw(values(d)), data.draw(values(d))
    np.testing.assert_array_equal(run(name, [x, y], D.bool_), reference(name, [x, y]), f"{name} {d.name}")


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_unary_ops_match_the_interpreter(name, data):
    d = data.draw(st.sampled_from([d for d in ALL if d.kind in UNARY[name][1]]))
    x = data.draw(values(d))
    with np.errstate(all="ignore"):
        expected = reference(name, [x])
    got = run(name, [x], d)
    if name in _EXACT_UNARY or not d.is_float:
        assert_close(got, expected, d, rtol=0, atol=0, err_msg=f"{name} {d.name}\n{x}")
    else:  # libm's last ulps (docs/dtypes.md); near zero, the absolute part of the tolerance
        assert_close(got, expected, d, err_msg=f"{name} {d.name}\n{x}")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_conversions_match_the_interpreter(data):
    """Every pair of dtypes, with values the target holds exactly (floats to integers only
    in range: out-of-range conversions are unspecified off the interpreter, docs/dtypes.md)."""
    src, dst = data.draw(st.sampled_from(ALL)), data.draw(st.sampled_from(ALL))
    x = data.draw(values(src))
    if src.is_float and dst.is_int:
        info = np.iinfo(dst.np)
        x = np.where(np.isfinite(x) & (x > float(info.min) - 1) & (x < float(info.max)), x, 0).astype(src.np)
    expected = reference("convert", [x], dtype=dst)
    np.testing.assert_array_equal(
        run("convert", [x], dst, attr=dst).view(np.uint8), expected.view(np.uint8), f"{src.name} -> {dst.name}\n{x}"
    )


@pytest.mark.parametrize("d", [D.float16, D.bfloat16], ids=lambda d: d.name)
def test_16_bit_rounding_is_exact_at_every_float32_boundary(d):
    """Every 16-bit value's neighbours: the halfway points (ties to even), one float32 ulp either
    side of them, the subnormals, overflow to infinity and NaN, against ml_dtypes."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    exact = bits.view(d.np).astype(np.float32)
    finite = exact[np.isfinite(exact)]
    up = np.nextafter(finite, np.float32(np.inf))
    halfway = ((finite.astype(np.float64) + np.roll(finite, -1).astype(np.float64)) / 2).astype(np.float32)
    around = [np.nextafter(halfway, np.float32(0)), np.nextafter(halfway, np.float32(9e9))]
    x = np.concatenate([exact, up, halfway, *around])
    x = np.concatenate([x, np.array([1e38, -1e38, 65519.99, 65520.0, np.nan], np.float32)]).astype(np.float32)
    got, expected = run("convert", [x], d, attr=d).astype(np.float32), x.astype(d.np).astype(np.float32)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))  # (-0.0 too)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_select_and_fmod(data):
    d = data.draw(st.sampled_from([d for d in ALL if d.is_float]))
    c, x, y = data.draw(values(D.bool_)), data.draw(values(d)), data.draw(values(d))
    assert_close(run("select", [c, x, y], d), np.where(c, x, y), d, rtol=0, atol=0)
    with np.errstate(all="ignore"):
        expected = np.fmod(x.astype(np.float32 if d.bits <= 32 else np.float64), y).astype(d.np)
    assert_close(run("fmod", [x, y], d), expected, d, rtol=0, atol=0, err_msg=f"{d.name}\n{x}\n{y}")


def test_a_comparison_of_mixed_types_meets_in_a_common_type():
    """An int64 immediate against an int32 register (a loop's bound): compared exactly."""
    x = np.array([-(2**31), -1, 0, 7, 2**31 - 1], np.int32)
    y = np.array([2**40, -1, 1, 7, -(2**40)], np.int64)
    np.testing.assert_array_equal(run("lt", [x, y], D.bool_), x.astype(np.int64) < y)
    u = np.array([0, 1, 2**32 - 1], np.uint32)
    s = np.array([-1, 1, -1], np.int32)
    np.testing.assert_array_equal(run("gt", [u, s], D.bool_), u.astype(np.int64) > s)


def test_a_pack_of_values_widened_from_its_type_keeps_their_bits():
    """On CUDA two 16-bit floats just widened from bits of the pack's own type are packed as
    those bits, ``lo`` low (LLVM then sees the word they came from), not rounded by ``cvt``;
    widened from the other 16-bit type, they are converted. The packed word, run on the host,
    is the two inputs' bits for every pattern (NaN payloads and subnormals included)."""
    from tilelang._backends.cuda_emit import CudaTarget

    i16, i32 = ir.IntType(16), ir.IntType(32)
    module = host_module(unique_name("pack16"))
    fn = ir.Function(module, ir.FunctionType(i32, [i16, i16]), unique_name("pack16"))
    target = CudaTarget(ir.IRBuilder(fn.append_basic_block()), set(), no_calls=False)
    for d, other in ((D.float16, D.bfloat16), (D.bfloat16, D.float16)):
        lo, hi = (target.from_bits(bits, d) for bits in fn.args)
        assert "cvt.rn" in str(target.pack16(other, lo, hi))
    lo, hi = (target.from_bits(bits, D.float16) for bits in fn.args)
    target.builder.ret(target.pack16(D.float16, lo, hi))
    packed = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint16, ctypes.c_uint16)(jit(module, fn.name))
    for a, b in np.random.default_rng(0).integers(0, 1 << 16, (500, 2)).tolist() + [(0x7E01, 0xFC01), (1, 0x8001)]:
        assert packed(a, b) == a | b << 16
