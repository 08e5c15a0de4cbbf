"""A 256-bin histogram of int32 values: each block counts its share of the tiles in shared
memory (tl.histogram), then adds its counts to the result with one atomic per bin.

Run: python examples/histogram.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel
def histogram(x, counts, TILE: tl.Constant, BINS: tl.Constant):
    acc = tl.zeros((BINS,), tl.int32)
    # a strided share of the tiles per block: few blocks, so few atomics on the result
    for k in tl.range(tl.block_id(0), tl.cdiv(x.shape[0], TILE), tl.num_blocks(0)):
        # the last tile reads past the end: -1 is outside [0, BINS), so the padding is not counted
        acc += tl.histogram(tl.load(x, index=(k,), shape=(TILE,), padding=-1), BINS)
    tl.atomic_add(counts, tl.arange(0, BINS), acc)


def main(explain=False):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=1_000_003).astype(np.int32)
    x[::7] = rng.integers(0, 4, size=x[::7].size)  # a few bins far more frequent than the rest
    counts = np.zeros(256, np.int32)
    histogram[64](x, counts, TILE=4096, BINS=256)
    np.testing.assert_array_equal(counts, np.bincount(x, minlength=256))
    print(f"256-bin histogram of {x.size} int32 values matches NumPy (np.bincount, exactly)")
    if explain:
        print(tl.explain(histogram, "i32[:]", "i32[:]", TILE=4096, BINS=256))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
