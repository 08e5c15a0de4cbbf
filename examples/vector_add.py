"""Add two vectors of 10 million float32 elements, one 1024-element tile per block.

Run: python examples/vector_add.py [--explain] [-n N] [--backend NAME]

On a GPU the kernel is timed on arrays already on the GPU (CUDA events, after a warm-up,
median of many launches), the way kernels are used; copying NumPy arrays to the GPU and
back is timed separately. On the CPU backend it runs on NumPy arrays, to show the result
is right without a GPU: that backend exists for testing, not for speed.
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


def median_time(fn, repeat=5):
    """The median wall time of ``repeat`` runs of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def gpu_time(fn, repeat=100):
    """The median time of ``fn`` on the GPU (CUDA events around each run), in seconds."""
    from numba import cuda

    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def run_on_gpu(x, y, out, grid, tile, numpy_time):
    from numba import cuda

    def to_gpu():
        return cuda.to_device(x), cuda.to_device(y), cuda.device_array_like(out)

    upload = median_time(lambda: (to_gpu(), cuda.synchronize()))
    dx, dy, dout = to_gpu()
    kernel = gpu_time(lambda: add[grid](dx, dy, dout, TILE=tile))
    download = median_time(lambda: dout.copy_to_host(out))
    gbps = 3 * x.nbytes / kernel / 1e9
    print(
        f"cuda kernel on GPU arrays: {kernel * 1e3:.3f} ms ({gbps:,.0f} GB/s), median of 100; "
        f"NumPy on the CPU: {numpy_time * 1e3:.1f} ms -> {numpy_time / kernel:,.0f}x faster"
    )
    print(
        f"(copying the inputs to the GPU takes {upload * 1e3:.1f} ms and the result back {download * 1e3:.1f} ms: "
        "keep data on the GPU between kernels)"
    )


def main(n=10_000_000, tile=1024, backend=None, explain=False):
    backend = backend or default_backend()
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.full_like(x, np.nan)  # unwritten elements would fail the check
    grid = tl.cdiv(n, tile)
    expected = np.full_like(x, np.nan)
    numpy_time = median_time(lambda: np.add(x, y, out=expected))

    start = time.perf_counter()
    add[grid](x, y, out, TILE=tile, backend=backend)  # the first launch traces and compiles
    first = time.perf_counter() - start
    np.testing.assert_array_equal(out, expected)  # one float32 add per element: exactly NumPy's result
    print(f"backend: {backend}")
    print(f"{n:,} float32 elements in {grid:,} blocks of {tile}: the result equals NumPy's exactly")
    print(f"the first launch, which also traces and compiles: {first:.3f} s")
    if backend == "cuda":
        run_on_gpu(x, y, out, grid, tile, numpy_time)
        np.testing.assert_array_equal(out, expected)
    else:
        run = median_time(lambda: add[grid](x, y, out, TILE=tile, backend=backend), repeat=3)
        what = {
            "cpu": "runs the GPU's thread program on the CPU, to test kernels without a GPU",
            "interpret": "runs the tile IR block by block with NumPy: the reference semantics",
        }[backend]
        print(
            f"{backend} backend: {run:.3f} s (NumPy: {numpy_time * 1e3:.1f} ms). This backend {what}; it is not fast."
        )
    if explain:
        print(tl.explain(add, "f32[:]", "f32[:]", "f32[:]", TILE=tile, backend=backend))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000_000, help="number of elements")
    parser.add_argument("--backend", help="cuda, cpu or interpret (default: cuda with a GPU, else cpu)")
    parser.add_argument("--explain", action="store_true", help="print tl.explain of the kernel")
    args = parser.parse_args()
    main(n=args.n, backend=args.backend, explain=args.explain)
