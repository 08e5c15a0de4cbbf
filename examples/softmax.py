"""Row softmax of a 2-D float32 array: each block normalizes BLOCK_M whole rows; and the same
kernel with Triton's faster, less exact numerics (``fast_math=True``).

Run: python examples/softmax.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


def softmax_rows(x, out, BLOCK_M: tl.Constant, BLOCK_N: tl.Constant):
    i = tl.block_id(0)
    # Columns past the end read as -inf, so they add exp(-inf) = 0 to the sum. Rows past the
    # end (in the last block) compute garbage that tl.store never writes.
    t = tl.load(x, index=(i, 0), shape=(BLOCK_M, BLOCK_N), padding=float("-inf"))
    e = tl.exp(t - tl.max(t, axis=1, keepdims=True))  # subtract the row max: exp never overflows
    tl.store(out, e / tl.sum(e, axis=1, keepdims=True), index=(i, 0))


softmax = tl.tile_kernel(softmax_rows)
# exp as exp2(x * log2(e)) and a division within 2 ulps, as Triton's: fewer instructions an
# element (on the H200 a 4096-wide float32 softmax is memory-bound but not free of them)
fast_softmax = tl.tile_kernel(softmax_rows, fast_math=True)


def launch(x, block_m=1, kernel=softmax):
    out = np.empty_like(x)
    block_n = 1 << (x.shape[1] - 1).bit_length()  # one power-of-two tile covers a whole row
    kernel[tl.cdiv(x.shape[0], block_m)](x, out, BLOCK_M=block_m, BLOCK_N=block_n)
    return out


def main(explain=False):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1000, 777)) * 10).astype(np.float32)
    x[0, :] += 1000  # would overflow exp() without the max subtraction
    out = launch(x)

    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    # x - max is rounded to float32 (relative error eps/2 of differences up to ~80 here) and exp
    # turns that into a relative error of up to 80 * 6e-8 ~ 5e-6; the sum and division add a few
    # ulps. Below float32's smallest normal number results lose relative precision: atol covers them.
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=np.finfo(np.float32).tiny)
    print(f"softmax of {x.shape[0]}x{x.shape[1]} float32 matches NumPy (float64 reference, rtol 1e-5)")
    # fast_math: exp's error grows with |x - max| (1.25 * 80 ulps at 80: ~6e-6) plus the division's 2 ulps
    np.testing.assert_allclose(launch(x, kernel=fast_softmax), expected, rtol=2e-5, atol=np.finfo(np.float32).tiny)
    print("with fast_math=True (Triton's exp and division): matches within rtol 2e-5")
    if explain:
        print(tl.explain(softmax, "f32[:, :]", "f32[:, :]", BLOCK_M=1, BLOCK_N=1024))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
