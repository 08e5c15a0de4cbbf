"""The kernels benchmarks/ times on the GPU, checked against NumPy at small sizes on every
backend (their full-size checks run only where the benchmarks do)."""

import axes
import machine_code
import matmul
import numpy as np
import pytest
import rows
import run

import tilelang as tl
from tilelang.testing import default_backends

BACKENDS = default_backends()


@pytest.mark.parametrize("backend", BACKENDS)
def test_middle_axis_argmax_takes_the_first_of_ties(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 100, 70)).astype(np.float32)
    x[0, 20, 3] = x[0, 50, 3] = x[2, 99, 69] = 10.0  # a tie across tiles; the last row and column
    out = np.full((3, 70), -1, np.int64)
    axes.middle_argmax[2, 3](x, out, BB=16, BC=64, backend=backend)
    np.testing.assert_array_equal(out, x.argmax(axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sum_in_one_launch_rearms_its_counter(backend):
    """run.py's sum: the last block to finish adds the blocks' totals in block order and sets
    the counter back to 0, so a second launch (7 blocks over 12 tiles, the last one partial)
    gives the same bits."""
    x = np.random.default_rng(5).random(12 * 256 - 100).astype(np.float32)
    parts, out, done = np.full(7, np.nan, np.float32), np.full(1, np.nan, np.float32), np.zeros(1, np.int32)
    results = []
    for _ in range(2):
        run.total[7](x, parts, done, out, x.size, TILE=256, PARTS=8, backend=backend)
        results.append(out[0])
        assert done[0] == 0
    want = [x[k * 256 : (k + 1) * 256].sum(dtype=np.float64) for k in range(12)]
    np.testing.assert_allclose(parts, [sum(want[b::7]) for b in range(7)], rtol=1e-6)
    assert results[0] == results[1]
    np.testing.assert_allclose(results[0], x.sum(dtype=np.float64), rtol=1e-6)  # float32 sums of ~3000 terms in [0, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_middle_axis_sum_column_tiles_first(backend):
    x = np.random.default_rng(6).standard_normal((3, 100, 70)).astype(np.float32)
    out = np.full((3, 70), np.nan, np.float32)
    axes.middle_sum[2, 3](x, out, BB=16, BC=64, backend=backend)  # (blocks (column tile, slice))
    np.testing.assert_allclose(out, x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-5)  # float32 sums of 100


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_per_row(backend):
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal((7, 300)) * 3).astype(np.float32)
    target = rng.integers(0, 300, 7)
    loss = np.full(7, np.nan, np.float32)
    rows.cross_entropy[7](logits, target, loss, BLOCK=512, backend=backend)
    x = logits.astype(np.float64)
    top = x.max(axis=1)
    want = top + np.log(np.exp(x - top[:, None]).sum(axis=1)) - x[np.arange(7), target]
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-5)  # float32 sums of 300 terms


@pytest.mark.parametrize("backend", BACKENDS)
def test_row_cumsum_carries_across_tiles(backend):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 1000)).astype(np.float32)
    out = np.full_like(x, np.nan)
    rows.row_cumsum[5](x, out, BLOCK=256, backend=backend)
    np.testing.assert_allclose(out, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["softmax", "fast_math"])
def test_softmax_variants(backend, name):
    """Each softmax variant within its numerics of the float64 softmax: correctly rounded
    division and exp within 2 ulps, or Triton's (fast_math: exp2 of a rounded product, its
    error growing with the argument, ~1e-6 relative at -30; a division within 2 ulps)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 300)) * 4).astype(np.float32)
    out = np.full_like(x, np.nan)
    kernel = rows.KERNELS["softmax"][None if name == "softmax" else name]
    kernel[5](x, out, BLOCK=512, backend=backend)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    rtol = 1e-5 if name == "fast_math" else 2e-6
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("n", [300, 301])  # (rows of 1204 bytes: the kernel for any array)
def test_norm_variants_agree(backend, kind, n):
    """Each norm variant (threads per block) gives the default kernel's result."""
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, n), n, n))
    args = (x, w, b) if kind == "layernorm" else (x, w)
    results = []
    for kernel in rows.KERNELS[kind].values():
        out = np.full_like(x, np.nan)
        kernel[4](*args, out, n, 1e-5, BLOCK=512, backend=backend)
        results.append(out)
    for out in results[1:]:
        np.testing.assert_allclose(out, results[0], rtol=1e-5, atol=1e-5)
    x64 = x.astype(np.float64)
    if kind == "rmsnorm":
        want = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5) * w
    else:
        d = x64 - x64.mean(axis=1, keepdims=True)
        want = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float8_matmul_nt_on_the_float8_tensor_cores(backend):
    """matmul.py's float8 ``x @ w.T`` in its first config (128x256x128, 4 stages), two tiles
    of k and a partial block of rows, against float64 (within the float8 tensor cores'
    ~13 bits a k-step on the GPU; the CPU backend and the interpreter sum exactly)."""
    bm, bn, bk, t, s = matmul.FLOAT8_CONFIGS[0]
    rng = np.random.default_rng(3)
    a, w = (rng.standard_normal(shape).astype(tl.float8_e4m3fn.np) for shape in ((200, 2 * bk), (bn, 2 * bk)))
    c = np.full((200, bn), np.nan, np.float32)
    matmul.FLOAT8[t, s][tl.cdiv(200, bm)](a, w, c, BM=bm, BN=bn, BK=bk, GROUP=8, backend=backend)
    want = a.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=0, atol=4 * 2.0**-12 * np.abs(want).max())


@pytest.mark.parametrize("kind", list(machine_code.CASES))
def test_machine_code_compares_kernels_that_build(kind):
    """benchmarks/machine_code.py's kernels build to sm_90 cubins without a GPU, and where
    nvdisasm is at hand their SASS has the 16-byte accesses the table counts."""
    ptx, cubin, threads = machine_code.ours(kind, 1024, None)
    assert cubin and ".target sm_90" in ptx and threads >= 32
    tool = machine_code.nvdisasm()
    if tool is not None:
        row = machine_code.row(kind, ptx, cubin, tool, None).split(" | ")
        assert int(row[4]) > 0  # LDG.128
