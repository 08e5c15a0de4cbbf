"""The CUDA backend's generated kernels, run by numba's CUDA simulator (CPU tier: no GPU).

Each case compiles a kernel through the real pipeline (trace, simplify, layouts, thread IR,
the numba-cuda source of ``CudaWriter``) and runs that source under the simulator, with
``cuda_simulated.py``'s pure-Python intrinsics reading and writing host NumPy arrays, then
compares with NumPy. ``NUMBA_ENABLE_CUDASIM`` is read once, when numba is imported, so the
cases run in one subprocess: this file as a script (``NUMBA_ENABLE_CUDASIM=1 python
tests/test_cuda_simulator.py [case ...]`` prints one JSON line of results). The simulator
runs one Python thread per CUDA thread, so the shapes are tiny.

Warp shuffles are excluded: the simulator has no ``cuda.shfl_xor_sync``. A reduction whose
axis spans threads is lowered to shuffles, so the reductions here keep their axis within
each thread's registers (4 columns per row: a thread holds a whole row), and
``CudaKernel.simulate`` refuses a kernel with shuffles (``test_shuffles_are_refused``).
Barriers and shared memory do run (the transpose's layout conversion, the matmul's dot).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback

import ml_dtypes
import numpy as np
import pytest

import tilelang as tl

CASES = {}


def case(fn):
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


# ------------------------------------------------------------------ kernels


@tl.tile_kernel
def add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


@tl.tile_kernel
def shifted(x, out, r, c, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, offset=(i * BM + r, j * BN + c), shape=(BM, BN), padding=-1.0)
    tl.store(out, t * 2, index=(i, j))


@tl.tile_kernel
def row_sum(x, out, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.sum(tl.load(x, index=(i, 0), shape=(BM, BN)), axis=1), index=(i,))


@tl.tile_kernel
def softmax(x, out, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(BM, BN), padding=float("-inf"))
    e = tl.exp(t - tl.max(t, axis=1, keepdims=True))
    tl.store(out, e / tl.sum(e, axis=1, keepdims=True), index=(i, 0))


@tl.tile_kernel
def transpose(x, out, B: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    tl.store(out, tl.load(x, index=(i, j), shape=(B, B)).T, index=(j, i))


@tl.tile_kernel
def matmul(a, b, c, K, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc, index=(i, j))


@tl.tile_kernel
def histogram(x, bins, TILE: tl.Constant):
    i = tl.block_id(0)
    v = tl.load(x, index=(i,), shape=(TILE,), padding=-1)
    tl.atomic_add(bins, v, tl.full((TILE,), 1, tl.int32), mask=v >= 0)


# --------------------------------------------- cases (run in the simulator)


def _simulate(kernel, grid, *args, **constants):
    from tilelang._backends.cuda import simulate

    return simulate(kernel, grid, *args, **constants)


RNG = np.random.default_rng(0)


@case
def case_vector_add_partial_tile():
    n = 300  # 3 tiles of 128, the last one partial: masked loads and stores, vector and scalar paths
    x, y = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    out = np.full(n + 5, np.nan, np.float32)
    _simulate(add, tl.cdiv(n, 128), x, y, out[:n], TILE=128)
    np.testing.assert_array_equal(out[:n], x + y)
    assert np.isnan(out[n:]).all()  # nothing written past the end


@case
def case_vector_add_16_bit_floats():
    n = 200
    for dtype in (np.float16, ml_dtypes.bfloat16):  # float32 registers, rounded once per op
        x, y = RNG.random(n).astype(dtype), RNG.random(n).astype(dtype)
        out = np.zeros(n, dtype)
        _simulate(add, tl.cdiv(n, 128), x, y, out, TILE=128)
        np.testing.assert_array_equal(out, (x.astype(np.float32) + y.astype(np.float32)).astype(dtype))


@case
def case_vector_add_int8_wraps():
    n = 100
    x, y = RNG.integers(-128, 128, n).astype(np.int8), RNG.integers(-128, 128, n).astype(np.int8)
    out = np.zeros(n, np.int8)
    _simulate(add, tl.cdiv(n, 128), x, y, out, TILE=128)
    np.testing.assert_array_equal(out, x + y)


@case
def case_load_store_2d_offsets_padding():
    x = RNG.random((20, 37), dtype=np.float32)
    out = np.full((24, 48), np.nan, np.float32)
    r, c = 3, -5  # windows hang off every edge of x: padded with -1
    _simulate(shifted, (3, 3), x, out, r, c, BM=8, BN=16)
    expected = np.full((24, 48), -1.0, np.float32)
    expected[: 20 - r, -c : 37 - c] = x[r:, :]
    np.testing.assert_array_equal(out, expected * 2)


@case
def case_load_store_strided_views():
    base = RNG.random((40, 60), dtype=np.float32)
    x = base[::2, 1::3]  # non-unit strides in both dimensions
    out = np.full((32, 32), np.nan, np.float32)
    _simulate(shifted, (4, 2), x, out.T, 0, 0, BM=8, BN=16)  # a transposed (column-major) output
    expected = np.full((32, 32), -1.0, np.float32)
    expected[:20, :20] = x
    np.testing.assert_array_equal(out.T, expected * 2)


@case
def case_reduction_within_registers():
    x = RNG.random((100, 4), dtype=np.float32)  # BN=4: each thread holds whole rows, no shuffles
    out = np.zeros(100, np.float32)
    _simulate(row_sum, tl.cdiv(100, 64), x, out, BM=64, BN=4)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-6)


@case
def case_softmax_within_registers():
    x = RNG.standard_normal((50, 3)).astype(np.float32)  # 3 columns: the 4th reads -inf
    out = np.zeros_like(x)
    _simulate(softmax, tl.cdiv(50, 32), x, out, BM=32, BN=4)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@case
def case_transpose_through_shared_memory():
    x = RNG.random((20, 30), dtype=np.float32)  # layout conversion: shared memory between two barriers
    out = np.full((30, 20), np.nan, np.float32)
    _simulate(transpose, (2, 2), x, out, B=16)
    np.testing.assert_array_equal(out, x.T)


@case
def case_matmul_runtime_loop():
    M, N, K = 20, 24, 40  # partial tiles in every dimension, 3 iterations of a loop with barriers
    a = RNG.standard_normal((M, K)).astype(np.float32)  # (16-bit floats take tensor cores, which it has not)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    _simulate(matmul, (2, 2), a, b, c, K, BM=16, BN=16, BK=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


@case
def case_atomic_histogram():
    x = RNG.integers(0, 10, 300).astype(np.int32)
    bins = np.zeros(10, np.int32)
    _simulate(histogram, tl.cdiv(300, 128), x, bins, TILE=128)
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=10))


@case
def case_shuffles_are_refused():
    x, out = np.zeros((32, 32), np.float32), np.zeros(32, np.float32)
    with pytest.raises(tl.TileCompilerError, match="shuffles"):
        _simulate(row_sum, 1, x, out, BM=32, BN=32)  # a row spans threads: a shuffle tree


def _run(names):
    results = {}
    for name in names:
        try:
            CASES[name]()
            results[name] = "ok"
        except (Exception, pytest.fail.Exception):  # pytest.raises fails with a BaseException
            results[name] = traceback.format_exc()
    return results


# ---------------------------------------------------- the pytest side


@pytest.fixture(scope="module")
def simulated():
    """Every case's result, from one simulator process."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", list(CASES))
def test_generated_kernel_in_simulator(simulated, name):
    assert simulated[name] == "ok", simulated[name]


def test_simulated_rounding_matches_the_cpu_backend():
    """``round_float16``/``round_bfloat16`` of the simulator agree bit for bit with the CPU
    backend's integer implementation of ``cvt.rn``: ties, subnormals, overflow, inf, NaN."""
    from tilelang._backends import cpu_intrinsics
    from tilelang._backends.cuda_simulated import INTRINSICS

    bits = np.concatenate([
        RNG.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32),
        np.arange(0x33000000, 0x39000000, 0x1000, dtype=np.uint32),  # float16 subnormals and ties
        np.array([0x477FEFFF, 0x477FF000, 0x7F800000, 0x7FC00000, 0x3F808000, 0x3F818000], np.uint32),
    ])  # fmt: skip
    values = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    for name in ("float16", "bfloat16"):
        simulated, cpu = INTRINSICS[f"round_{name}"], getattr(cpu_intrinsics, f"round_{name}")
        got = np.array([simulated(v) for v in values], np.float32)
        want = np.array([cpu(v) for v in values], np.float32)
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), f"{name}: {values[~same][:5]} → {got[~same][:5]}, expected {want[~same][:5]}"


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1:] or list(CASES))))
