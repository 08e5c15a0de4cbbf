"""Tiled matrix multiply: float16 inputs, float32 accumulation, a runtime loop over K.

On tensor cores: on Hopper (sm_90a, also what the CPU backend runs without a GPU) the 2
warpgroups of the 256 threads each multiply a 64x128 half of the 128x128 block with wgmma,
straight from swizzled shared memory; before Hopper (`arch="sm_80"`) each of the 8 warps
computes a 32x64 share with mma.sync from ldmatrix fragments. Either way the loop's tiles
are copied to shared memory stages ahead (TMA boxes where the arrays allow it, cp.async
otherwise: `--explain` prints the thread program that says so). float32 inputs multiply
exactly on CUDA cores, or with `PRECISION="tf32"` rounded to TF32 on tensor cores
(mma.sync.m16n8k8).

`linear_relu` fuses an epilogue: bias and ReLU on the float32 accumulator, one rounding to
bfloat16 at the store, which leaves through the loop's shared memory (free once the loop is
done) in 16-byte rows.

Run: python examples/matmul.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel(num_threads=256)
def matmul(a, b, c, K, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, PRECISION: tl.Constant = "ieee"):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK)):  # a runtime loop: traced once, acc is loop-carried
        x = tl.load(a, index=(i, k), shape=(BM, BK))  # out-of-bounds elements read as 0 and add nothing
        y = tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(x, y, acc, precision=PRECISION)  # float16 x float16 -> float32 accumulator
    tl.store(c, acc, index=(i, j))


@tl.tile_kernel(num_threads=256, num_stages=4)
def linear_relu(x, w, bias, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """out = relu(x @ w.T + bias), ``w`` (N, K) as torch.nn.Linear stores it."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BK)):
        acc = tl.dot(tl.load(x, index=(i, k), shape=(BM, BK)), tl.load(w, index=(j, k), shape=(BN, BK)).T, acc)
    y = acc + tl.load(bias, index=(j,), shape=(BN,)).astype(tl.float32)[None, :]
    tl.store(out, tl.maximum(y, 0.0).astype(out.dtype), index=(i, j))


def launch(a, b, BM=128, BN=128, BK=32, precision="ieee"):
    (M, K), (_, N) = a.shape, b.shape
    c = np.empty((M, N), np.float32)
    matmul[tl.cdiv(M, BM), tl.cdiv(N, BN)](a, b, c, K, BM=BM, BN=BN, BK=BK, PRECISION=precision)
    return c


def check(c, a64, b64, what):
    """Each of the K float32 additions rounds with relative error <= eps, so |c - expected| <=
    K * eps * (|a| @ |b|) (the classic bound) where the products are exact in float32."""
    K = a64.shape[1]
    error = np.abs(c - a64 @ b64)
    if not np.all(error <= K * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))):
        raise AssertionError(f"matmul ({what}): error {error.max():.3g} exceeds the rounding-error bound")
    print(f"matmul {a64.shape[0]}x{K} @ {K}x{b64.shape[1]} ({what}) matches NumPy: max error {error.max():.2g}")


def main(explain=False):
    M, N, K = 255, 193, 321  # not multiples of the 128x128x32 tiles
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = launch(a, b)
    check(c, a.astype(np.float64), b.astype(np.float64), "float16 -> float32")  # (products of halves: exact)

    # float32 rounded to TF32 (10 mantissa bits): the products of the rounded values are exact
    x, y = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    check(launch(x, y, precision="tf32"), tf32_rounded(x), tf32_rounded(y), "float32 as TF32")
    # the fused epilogue, to bfloat16: within the float32 bound, then half a bfloat16 ulp (2^-9 relative).
    # Rows of 16-byte multiples (K, N multiples of 8): the program for aligned arrays, whose store is staged
    N, K = 192, 320
    x = np.ascontiguousarray(a[:, :K])
    w, bias = rng.standard_normal((N, K)).astype(np.float16), rng.standard_normal(N).astype(np.float16)
    out = np.empty((M, N), tl.bfloat16.np)
    linear_relu[tl.cdiv(M, 128), tl.cdiv(N, 128)](x, w, bias, out, BM=128, BN=128, BK=64)
    a64, w64 = x.astype(np.float64), w.astype(np.float64).T
    want = np.maximum(a64 @ w64 + bias.astype(np.float64), 0)
    bound = K * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(w64) + 1) + 2.0**-8 * np.abs(want)
    error = np.abs(out.astype(np.float64) - want)
    if not np.all(error <= bound):
        raise AssertionError(f"linear_relu: error {error.max():.3g} exceeds the rounding-error bound")
    print(f"relu(x @ w.T + bias) {M}x{K} @ {K}x{N} (float16 -> bfloat16) matches NumPy: max error {error.max():.2g}")
    if explain:
        print(tl.explain(matmul, a, b, c, K, BM=128, BN=128, BK=32))  # the arguments of the launch
        print(tl.explain(linear_relu, x, w, bias, out, BM=128, BN=128, BK=64)["thread_ir"])


def tf32_rounded(x):
    """float32s rounded to TF32 as ``cvt.rna.tf32.f32`` does (to nearest, ties away from zero),
    in float64."""
    bits = (x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
