"""Tiled matrix multiply: float16 inputs, float32 accumulation, a runtime loop over K.

On tensor cores: on Hopper (sm_90a, also what the CPU backend runs without a GPU) the 2
warpgroups of the 256 threads each multiply a 64x128 half of the 128x128 block with wgmma,
straight from swizzled shared memory; before Hopper (`arch="sm_80"`) each of the 8 warps
computes a 32x64 share with mma.sync from ldmatrix fragments. Either way the loop's tiles
are copied to shared memory with cp.async two iterations ahead (`--explain` prints the
thread program that says so). float32 inputs multiply exactly on CUDA cores, or with
`PRECISION="tf32"` rounded to TF32 on tensor cores (mma.sync.m16n8k8).

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
    if explain:
        print(tl.explain(matmul, a, b, c, K, BM=128, BN=128, BK=32))  # the arguments of the launch


def tf32_rounded(x):
    """float32s rounded to TF32 as ``cvt.rna.tf32.f32`` does (to nearest, ties away from zero),
    in float64."""
    bits = (x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
