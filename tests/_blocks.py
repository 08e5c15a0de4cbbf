"""Reference helpers for tiled kernels in the tests."""

import numpy as np

import tilelang as tl


def paths(thread_ir: str) -> set:
    """Which cross-thread mechanisms a thread program uses: shuffles within a warp, shared
    memory across warps."""
    return {name for name, key in (("shuffle", "shuffle_xor"), ("shared", "= shared ")) if key in thread_ir}


def padded_blocks(x, tile, pad):
    """``x`` padded with ``pad`` to whole tiles, as an array of shape (GM, GN, BM, BN)."""
    (m, n), (bm, bn) = x.shape, tile
    gm, gn = tl.cdiv(m, bm), tl.cdiv(n, bn)
    xp = np.full((gm * bm, gn * bn), pad, dtype=x.dtype)
    xp[:m, :n] = x
    return xp.reshape(gm, bm, gn, bn).transpose(0, 2, 1, 3)


def from_blocks(blocks, shape=None):
    """The inverse of :func:`padded_blocks`: per-block tiles (GM, GN, R, C) side by side, cut to
    ``shape`` where given (as a kernel stores them into an array of that shape)."""
    gm, gn, r, c = blocks.shape
    whole = blocks.transpose(0, 2, 1, 3).reshape(gm * r, gn * c)
    return whole if shape is None else whole[: shape[0], : shape[1]]


@tl.tile_kernel
def tiled_matmul(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, PRECISION: tl.Constant = "ieee"):
    """``c = a @ b`` in (BM, BN) blocks, accumulated in float32 over BK-wide slices of k."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        x, y = tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(x, y, acc, precision=PRECISION)
    tl.store(c, acc, index=(i, j))


def repeated_matmul(a, b, c, TIMES: tl.Constant, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = TIMES * (a @ b)``, the pipelined loop inside another: its prologue refills the ring
    (and, with TMA, makes its mbarriers valid again) each time round."""
    i, j = tl.block_id(0), tl.block_id(1)
    total = tl.zeros((BM, BN), tl.float32)
    for _ in tl.range(0, TIMES):
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
            acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
        total = total + acc
    tl.store(c, total, index=(i, j))


def split_matmul(a, b, c, split, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = a[:, :s] @ b[:s] + 2 * (a[:, s:] @ b[s:])``, ``s = split * BK``: k's slices in two
    loops, the second starting where the first ends (one pipeline running on into the next)."""
    i, j, split = tl.block_id(0), tl.block_id(1), split.astype(tl.int64)  # (both loops' index int64)
    first, second = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, split):
        first = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), first)
    for k in tl.range(split, tl.cdiv(a.shape[1], BK)):
        second = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), second)
    tl.store(c, first + 2 * second, index=(i, j))


def matmul_then_reused_ring(a, b, c, d, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = a @ b`` in 16 bits (staged through its loop's retired ring), then ``d = a @ (2 b)``
    in a second loop that takes that ring again while a computed operand needs a buffer too."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc.astype(c.dtype), index=(i, j))
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        y = tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), y + y, acc)
    tl.store(d, acc, index=(i, j))


def matmul_to_a_carried_end(a, b, c, split, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``split_matmul``'s two loops, the second ending where a count carried through the first
    does (``split + 1``): its end is not known before the first loop runs."""
    i, j, split = tl.block_id(0), tl.block_id(1), split.astype(tl.int64)
    first, second, n = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32), split - split + 1
    for k in tl.range(0, split):
        first = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), first)
        n = n + 1
    for k in tl.range(split, n):
        second = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), second)
    tl.store(c, first + 2 * second, index=(i, j))


def matmul_two_widths(a, b, c, BM: tl.Constant, BN: tl.Constant):
    """``c = 2 (a @ b)``: over 24-column slices of k (padded to 32: copied by cp.async), then over
    32-column ones (TMA boxes on sm_90a), into the ring the first loop drained."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], 24)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, 24)), tl.load(b, index=(k, j), shape=(24, BN)), acc)
    for k in tl.range(0, tl.cdiv(a.shape[1], 32)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, 32)), tl.load(b, index=(k, j), shape=(32, BN)), acc)
    tl.store(c, acc, index=(i, j))


def three_part_matmul(a, b, c, split, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = A0 + 2 A1 + 3 A2``, the products of k's slices before ``split``, up to halfway to
    the end, and the rest: three loops, each from the last one's end."""
    i, j, split = tl.block_id(0), tl.block_id(1), split.astype(tl.int64)
    n = tl.cdiv(a.shape[1], BK)
    mid = (split + n) // 2
    p0, p1, p2 = (tl.zeros((BM, BN), tl.float32) for _ in range(3))
    for k in tl.range(0, split):
        p0 = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), p0)
    for k in tl.range(split, mid):
        p1 = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), p1)
    for k in tl.range(mid, n):
        p2 = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), p2)
    tl.store(c, p0 + 2 * p1 + 3 * p2, index=(i, j))


def split_matmul_twice(a, b, c, split, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``2 * split_matmul``: its two loops inside another, run twice (each time round the first
    loop's prologue refills the ring, its mbarriers made valid again)."""
    i, j, split = tl.block_id(0), tl.block_id(1), split.astype(tl.int64)
    total = tl.zeros((BM, BN), tl.float32)
    for _ in tl.range(0, 2):
        first, second = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, split):
            first = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), first)
        for k in tl.range(split, tl.cdiv(a.shape[1], BK)):
            x, y = tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN))
            second = tl.dot(x, y, second)
        total = total + first + 2 * second
    tl.store(c, total, index=(i, j))


def rounded_matmul(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = a @ b`` accumulated in float32, rounded to ``c``'s dtype once, at the store."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc.astype(c.dtype), index=(i, j))
