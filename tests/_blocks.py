"""Reference helpers for tiled kernels in the tests."""

import numpy as np

import tilelang as tl


def padded_blocks(x, tile, pad):
    """``x`` padded with ``pad`` to whole tiles, as an array of shape (GM, GN, BM, BN)."""
    (m, n), (bm, bn) = x.shape, tile
    gm, gn = tl.cdiv(m, bm), tl.cdiv(n, bn)
    xp = np.full((gm * bm, gn * bn), pad, dtype=x.dtype)
    xp[:m, :n] = x
    return xp.reshape(gm, bm, gn, bn).transpose(0, 2, 1, 3)
