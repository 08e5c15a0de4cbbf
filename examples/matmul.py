"""Tiled matrix multiply: float16 inputs, float32 accumulation, a runtime loop over K.

On tensor cores: on Hopper (sm_90a, also what the CPU backend runs without a GPU) the 2
warpgroups of the 256 threads each multiply a 64x128 half of the 128x128 block with wgmma,
straight from swizzled shared memory; before Hopper (`arch="sm_80"`) each of the 8 warps
computes a 32x64 share with mma.sync from ldmatrix fragments. Either way the loop's tiles
are copied to shared memory with cp.async two iterations ahead (`--explain` prints the
thread program that says so).

Run: python examples/matmul.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel(num_threads=256)
def matmul(a, b, c, K, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK)):  # a runtime loop: traced once, acc is loop-carried
        x = tl.load(a, index=(i, k), shape=(BM, BK))  # out-of-bounds elements read as 0 and add nothing
        y = tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(x, y, acc)  # float16 x float16 -> float32 accumulator
    tl.store(c, acc, index=(i, j))


def launch(a, b, BM=128, BN=128, BK=32):
    (M, K), (_, N) = a.shape, b.shape
    c = np.empty((M, N), np.float32)
    matmul[tl.cdiv(M, BM), tl.cdiv(N, BN)](a, b, c, K, BM=BM, BN=BN, BK=BK)
    return c


def main(explain=False):
    M, N, K = 255, 193, 321  # not multiples of the 128x128x32 tiles
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = launch(a, b)

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = a64 @ b64
    # Products of float16 values are exact in float32; each of the K float32 additions rounds
    # with relative error <= eps, so |c - expected| <= K * eps * (|a| @ |b|) (the classic bound).
    bound = K * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))
    error = np.abs(c - expected)
    if not np.all(error <= bound):
        raise AssertionError(f"matmul: error {error.max():.3g} exceeds the rounding-error bound")
    print(f"matmul {M}x{K} @ {K}x{N} (float16 -> float32) matches NumPy: max error {error.max():.2g}")
    if explain:
        print(tl.explain(matmul, a, b, c, K, BM=128, BN=128, BK=32))  # the arguments of the launch


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
