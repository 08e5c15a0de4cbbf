"""Host microseconds per launch of a small 3-array kernel, tilelang against its peers,
and the first call of a kernel in a fresh process: cold (compiled) and warm (disk cache).

    python benchmarks/launch.py

Each implementation launches ``REPS`` times back to back on 1024-element arrays (so the
host, not the GPU, is the bottleneck); the implementations take turns for ``ROUNDS``
rounds (the host is shared and its speed drifts), and the median and the best round's
wall time per launch are reported. Peers that are not installed are skipped.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import tilelang as tl

REPS = 2000
ROUNDS = 7


@tl.tile_kernel
def add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


def per_launch_us(fn, sync):
    for _ in range(50):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(REPS):
        fn()
    sync()
    return (time.perf_counter() - start) / REPS * 1e6


FIRST_CALL = """
import sys, time
sys.path.insert(0, {here!r})
import torch
from cuda.core import Device
x, y, out = (torch.rand(1024, device="cuda") for _ in range(3))
Device(0).set_current()  # the CUDA context exists before the clock starts
torch.cuda.synchronize()
from launch import add
start = time.perf_counter()
add[1](x, y, out, TILE=1024)
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def first_calls():
    """Seconds of the first launch in a fresh process, with an empty and then a filled cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TILELANG_CACHE_DIR=cache)
        script = FIRST_CALL.format(here=os.path.dirname(os.path.abspath(__file__)))
        run = [sys.executable, "-c", script]
        return [float(subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout) for _ in "cw"]


def main():
    import torch
    from numba import cuda

    n = 1024
    x, y, out = (torch.rand(n, device="cuda") for _ in range(3))
    nx, ny, nout = (cuda.as_cuda_array(t) for t in (x, y, out))
    sync = torch.cuda.synchronize
    rows = {
        "tilelang, torch tensors": lambda: add[1](x, y, out, TILE=1024),
        "tilelang, numba arrays": lambda: add[1](nx, ny, nout, TILE=1024),
        "torch.add": lambda: torch.add(x, y, out=out),
    }

    @cuda.jit
    def numba_add(a, b, c):
        i = cuda.grid(1)
        if i < c.size:
            c[i] = a[i] + b[i]

    rows["numba dispatcher"] = lambda: numba_add[4, 256](nx, ny, nout)
    try:
        import cupy as cp

        raw = cp.RawKernel(
            r"""extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }""",
            "add",
        )
        cx, cy, cout = (cp.asarray(t) for t in (x, y, out))
        rows["tilelang, cupy arrays"] = lambda: add[1](cx, cy, cout, TILE=1024)
        rows["cupy RawKernel"] = lambda: raw((4,), (256,), (cx, cy, cout, cp.int32(n)))
    except ImportError:
        pass
    try:
        import triton
        import triton.language as tlang

        @triton.jit
        def triton_add(a, b, c, n, BLOCK: tlang.constexpr):
            offs = tlang.program_id(0) * BLOCK + tlang.arange(0, BLOCK)
            m = offs < n
            tlang.store(c + offs, tlang.load(a + offs, mask=m) + tlang.load(b + offs, mask=m), mask=m)

        rows["triton"] = lambda: triton_add[(1,)](x, y, out, n, BLOCK=1024)
    except ImportError:
        pass
    times = {name: [] for name in rows}
    for _ in range(ROUNDS):
        for name, fn in rows.items():
            times[name].append(per_launch_us(fn, sync))
    print(f"{'':26s} median   best (us per launch, {ROUNDS} rounds of {REPS})")
    for name, us in times.items():
        print(f"{name:26s} {statistics.median(us):6.1f} {min(us):6.1f}")
    cold, warm = first_calls()
    print(f"first call in a fresh process: cold (compile) {cold * 1e3:.0f} ms, warm (disk cache) {warm * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
