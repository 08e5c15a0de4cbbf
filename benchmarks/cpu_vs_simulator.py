"""The CPU backend against numba's CUDA simulator, on the same generated kernels.

    python benchmarks/cpu_vs_simulator.py [-n 100000]

Both run the thread program the compiler lowers a kernel to: the CPU backend as a
``numba.njit`` program (phases between barriers as loops over threads), the simulator as
the CUDA backend's numba-cuda source with one Python thread per CUDA thread. Two kernels:
a vector add of ``n`` float32 elements and a row sum of an ``(n // 4, 4)`` float32 array
(a reduction within each thread's registers: the simulator has no warp shuffles).
Compilation is excluded on both sides: each kernel is run once first (the simulator on a
tiny input of the same specialization), then timed (CPU: best of 20; simulator: one run,
it takes seconds). The simulator runs in a subprocess: ``NUMBA_ENABLE_CUDASIM`` is read
when numba is imported. Results are checked against NumPy. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

import tilelang as tl

TILE = 1024  # vector add: elements per block
ROWS = 256  # row sum: rows per block, 4 columns (one row per thread's registers)


@tl.tile_kernel
def vector_add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


@tl.tile_kernel
def row_sum(x, out, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.sum(tl.load(x, index=(i, 0), shape=(BM, BN)), axis=1), index=(i,))


def cases(n):
    """(name, kernel, grid, args, constants, check) for ``n`` elements."""
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    m = rng.random((n // 4, 4), dtype=np.float32)
    sums = np.zeros(n // 4, np.float32)
    return [
        (f"vector add, {n:,} float32", vector_add, tl.cdiv(n, TILE), (x, y, out), {"TILE": TILE},
         lambda: np.testing.assert_array_equal(out, x + y)),
        (f"row sum, ({n // 4:,}, 4) float32", row_sum, tl.cdiv(n // 4, ROWS), (m, sums), {"BM": ROWS, "BN": 4},
         lambda: np.testing.assert_allclose(sums, m.sum(axis=1), rtol=1e-6)),
    ]  # fmt: skip


def time_cpu(n):
    times = {}
    for name, kernel, grid, args, constants, check in cases(n):
        kernel[grid](*args, backend="cpu", **constants)  # compile (and run once)
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            kernel[grid](*args, backend="cpu", **constants)
            best = min(best, time.perf_counter() - start)
        check()
        times[name] = best
    return times


def time_simulator(n):
    """In a process started with NUMBA_ENABLE_CUDASIM=1."""
    from tilelang._backends.cuda import simulate

    times = {}
    for (name, kernel, grid, args, constants, check), (_, _, _, small, _, _) in zip(cases(n), cases(64)):
        kernel_ = simulate(kernel, 1, *small, **constants)  # compile: the same specialization, one block
        start = time.perf_counter()
        simulate(kernel, grid, *args, **constants)
        times[name] = time.perf_counter() - start
        check()
        times[name + " threads"] = [grid, kernel_.program.num_threads]
    return times


def numba_versions() -> str:
    from importlib.metadata import version

    return f"{version('numba')}, numba-cuda {version('numba-cuda')}"


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores, {platform.system()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="elements per kernel (default 100,000)")
    parser.add_argument("--simulator", action="store_true", help=argparse.SUPPRESS)  # the subprocess's part
    opts = parser.parse_args()
    if opts.simulator:
        print(json.dumps(time_simulator(opts.n)))
        return
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, __file__, "--simulator", "-n", str(opts.n)], env=env,
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
    simulated = json.loads(proc.stdout.splitlines()[-1])
    cpu = time_cpu(opts.n)
    import numba

    print(f"{datetime.date.today()}; {machine()}; Python {platform.python_version()}, numba {numba_versions()}")
    try:
        print(f"numba threading layer (for the CPU backend's parallel blocks): {numba.threading_layer()}")
    except ValueError:  # no parallel launch happened
        pass
    print(f"command: python benchmarks/cpu_vs_simulator.py -n {opts.n}\n")
    print("| kernel | grid x threads | CPU backend | CUDA simulator | simulator / CPU |")
    print("|---|---|---|---|---|")
    for name, t in cpu.items():
        grid, threads = simulated[name + " threads"]
        s = simulated[name]
        print(f"| {name} | {grid} x {threads} | {t * 1e3:.2f} ms | {s:.1f} s | {s / t:,.0f}x |")


if __name__ == "__main__":
    main()
