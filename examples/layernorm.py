"""Row layernorm with weight and bias: float16 in and out, mean and variance in float32.

Run: python examples/layernorm.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel
def layernorm(x, weight, bias, out, N, eps, BLOCK_M: tl.Constant, BLOCK_N: tl.Constant):
    i = tl.block_id(0)
    cols = tl.arange(0, BLOCK_N)
    t = tl.load(x, index=(i, 0), shape=(BLOCK_M, BLOCK_N)).astype(tl.float32)  # padded with 0
    mean = tl.sum(t, axis=1, keepdims=True) / N
    d = tl.where(cols[None, :] < N, t - mean, 0.0)  # padding columns must not count in the variance
    var = tl.sum(d * d, axis=1, keepdims=True) / N
    w = tl.load(weight, index=(0,), shape=(BLOCK_N,)).astype(tl.float32)
    b = tl.load(bias, index=(0,), shape=(BLOCK_N,)).astype(tl.float32)
    y = d * tl.rsqrt(var + eps) * w[None, :] + b[None, :]
    tl.store(out, y.astype(out.dtype), index=(i, 0))


def launch(x, weight, bias, eps=1e-5, block_m=1):
    M, N = x.shape
    out = np.empty_like(x)
    block_n = 1 << (N - 1).bit_length()  # one power-of-two tile covers a whole row
    layernorm[tl.cdiv(M, block_m)](x, weight, bias, out, N, eps, BLOCK_M=block_m, BLOCK_N=block_n)
    return out


def main(explain=False):
    M, N = 500, 1000
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((M, N)) * 3 + 1).astype(np.float16)
    weight = rng.standard_normal(N).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    out = launch(x, weight, bias)

    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5) * weight.astype(np.float64) + bias.astype(np.float64)
    # The float32 arithmetic is off by ~1e-6 at most (absolute, on values up to ~10), then the result
    # is rounded to float16 (half an ulp: relative 2**-11). One float16 ulp (rtol 2**-10) plus atol
    # 1e-5 (results near zero, where the float32 error is not small relative to the result) covers both.
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2**-10, atol=1e-5)
    print(f"layernorm of {M}x{N} float16 (float32 statistics) matches NumPy (float64 reference, rtol 2**-10)")
    if explain:
        print(tl.explain(layernorm, "f16[:, :]", "f16[:]", "f16[:]", "f16[:, :]", N, 1e-5, BLOCK_M=1, BLOCK_N=1024))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
