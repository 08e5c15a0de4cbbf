"""Add two vectors of 10 million float32 elements, one 1024-element tile per block.

Run: python examples/vector_add.py [--explain] [-n N] [--backend NAME]
"""

import argparse
import time

import numpy as np

import tilelang as tl
from tilelang.kernel import default_backend


@tl.tile_kernel
def add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    a = tl.load(x, index=(i,), shape=(TILE,))  # the last block reads past the end: padded, not an error
    b = tl.load(y, index=(i,), shape=(TILE,))
    tl.store(out, a + b, index=(i,))  # ... and its out-of-bounds elements are not written


def best_time(fn, repeat=3):
    """The fastest of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(n=10_000_000, tile=1024, backend=None, explain=False):
    backend = backend or default_backend()
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.full_like(x, np.nan)  # unwritten elements would fail the check
    grid = tl.cdiv(n, tile)

    start = time.perf_counter()
    add[grid](x, y, out, TILE=tile, backend=backend)  # the first launch traces and compiles
    first = time.perf_counter() - start
    run = best_time(lambda: add[grid](x, y, out, TILE=tile, backend=backend))
    expected = np.full_like(x, np.nan)
    numpy_time = best_time(lambda: np.add(x, y, out=expected))

    np.testing.assert_array_equal(out, expected)  # one float32 add per element: exactly NumPy's result
    print(f"backend: {backend}")
    print(f"{n:,} float32 elements in {grid:,} blocks of {tile}: the result equals NumPy's exactly")
    print(
        f"{backend} backend: {run:.3f} s for {n / 1e6:g}M elements, best of 3 (NumPy: {numpy_time * 1e3:.1f} ms); "
        f"the first launch, which also traces and compiles: {first:.3f} s"
    )
    if backend == "interpret":
        print("(the interpreter runs the tile IR block by block with NumPy: the reference semantics, not a fast path)")
    if explain:
        print(tl.explain(add, "f32[:]", "f32[:]", "f32[:]", TILE=tile, backend=backend))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000_000, help="number of elements")
    parser.add_argument("--backend", help="cuda, cpu or interpret (default: cuda with a GPU, else cpu)")
    parser.add_argument("--explain", action="store_true", help="print tl.explain of the kernel")
    args = parser.parse_args()
    main(n=args.n, backend=args.backend, explain=args.explain)
