"""Fused dropout and residual add, y = residual + dropout(x, p), with its backward: the mask
is not stored, it is made again from the seed (tl.rand is a pure function of the seed and
each element's offset).

Run: python examples/dropout.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


def keep_mask(seed, p, offsets):
    """Which elements dropout keeps: the same in the forward and the backward."""
    return tl.rand(seed, offsets) >= p


@tl.tile_kernel
def dropout_add(x, residual, out, seed, p, TILE: tl.Constant):
    i = tl.block_id(0)
    offs = i * TILE + tl.arange(0, TILE)
    t = tl.load(x, index=(i,), shape=(TILE,))
    kept = tl.where(keep_mask(seed, p, offs), t / (1 - p), 0.0)
    tl.store(out, kept + tl.load(residual, index=(i,), shape=(TILE,)), index=(i,))


@tl.tile_kernel
def dropout_backward(dy, dx, seed, p, TILE: tl.Constant):
    """dx = dy where the forward kept the element (scaled as it was), 0 where it dropped it."""
    i = tl.block_id(0)
    offs = i * TILE + tl.arange(0, TILE)
    g = tl.load(dy, index=(i,), shape=(TILE,))
    tl.store(dx, tl.where(keep_mask(seed, p, offs), g / (1 - p), 0.0), index=(i,))


def main(explain=False):
    rng = np.random.default_rng(0)
    n, p, seed, tile = 1_000_003, 0.25, 2026, 1024
    x, residual, dy = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    out, dx = np.empty_like(x), np.empty_like(x)
    dropout_add[tl.cdiv(n, tile)](x, residual, out, seed, p, TILE=tile)
    dropout_backward[tl.cdiv(n, tile)](dy, dx, seed, p, TILE=tile)

    # the backward's mask (dy is never 0 here) explains the forward's output: it is the same mask
    kept, scale = dx != 0, np.float32(1 - p)
    np.testing.assert_array_equal(out[~kept], residual[~kept])
    np.testing.assert_allclose(out[kept], residual[kept] + x[kept] / scale, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx[kept], dy[kept] / scale, rtol=1e-6)
    share = kept.mean()
    assert abs(share - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n), share  # within five standard deviations
    print(f"dropout(p={p}) + residual on {n} elements matches NumPy, by the backward's mask ({share:.4f} kept)")
    if explain:
        print(tl.explain(dropout_add, "f32[:]", "f32[:]", "f32[:]", "i64", "f32", TILE=tile))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
