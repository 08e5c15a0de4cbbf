"""Stream compaction: the elements of x above a threshold, packed at the front of out, with
their indices, in one pass. Each block counts what it keeps and takes its place in the
output with one atomic ticket (``tl.atomic_add`` returns the count before its add); within
the block an exclusive prefix sum places each kept element. Blocks land in the order their
tickets came, so the output is x's kept elements block by block in an order that may change
from run to run; sorting by index gives NumPy's ``x[x > threshold]``.

Run: python examples/compaction.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel
def compact(x, out, where_from, count, threshold, TILE: tl.Constant):
    i = tl.block_id(0)
    offs = i * TILE + tl.arange(0, TILE)
    t = tl.load(x, index=(i,), shape=(TILE,))
    keep = (t > threshold) & (offs < x.shape[0])
    ones = keep.astype(tl.int32)
    base = tl.atomic_add(count, 0, tl.sum(ones))  # this block's first place in out
    at = base + tl.cumsum(ones) - ones  # and each kept element's
    tl.scatter(out, at, t, mask=keep)
    tl.scatter(where_from, at, offs, mask=keep)


def main(explain=False):
    rng = np.random.default_rng(0)
    n, tile, threshold = 1_000_003, 1024, 1.5
    x = rng.standard_normal(n).astype(np.float32)
    out, where_from, count = np.empty_like(x), np.empty(n, np.int32), np.zeros(1, np.int32)
    compact[tl.cdiv(n, tile)](x, out, where_from, count, threshold, TILE=tile)

    kept = int(count[0])
    order = np.argsort(where_from[:kept])
    np.testing.assert_array_equal(where_from[:kept][order], np.flatnonzero(x > threshold))
    np.testing.assert_array_equal(out[:kept][order], x[x > threshold])
    print(f"compaction of {n} elements (x > {threshold}) matches NumPy: {kept} kept, one atomic a block")
    if explain:
        print(tl.explain(compact, "f32[:]", "f32[:]", "i32[:]", "i32[:]", "f32", TILE=tile))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
