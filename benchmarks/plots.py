"""Sweeps of tilelang against its peers over sizes, for the plots in docs/performance.md.

    python benchmarks/plots.py --out DIR         # on the GPU machine: times, DIR/sweeps.json
    python benchmarks/plots.py --draw DIR        # anywhere with matplotlib: DIR/*.png

Each sweep is :func:`tilelang.testing.sweep` (CUDA events, median of 100 runs): vector add
(GB/s over array sizes) and fp16 matmul (TFLOP/s over square sizes), each implementation
checked once against torch at every size before it is timed.
"""

from __future__ import annotations

import argparse
import json
import os

from matmul import KERNELS, triton_matmul
from run import triton_kernels, vector_add

import tilelang as tl
from tilelang.testing import sweep
from tilelang.testing.timing import draw


def _checked(run, out, want, tol=0.0):
    run()
    err = float((out.float() - want.float()).abs().max())
    if not err <= tol:  # (a NaN too)
        raise AssertionError(f"wrong result (max error {err:.3g})")
    return run


def vector_add_sweep(torch, triton, **shown):
    def arrays(n):
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        return x, y, torch.full((n,), float("nan"), device="cuda"), x + y

    def ours(n):
        x, y, out, want = arrays(n)
        return _checked(lambda: vector_add[tl.cdiv(n, 1024)](x, y, out, TILE=1024), out, want)

    def theirs(n):
        x, y, out, want = arrays(n)
        add = triton_kernels(triton)[0]
        return _checked(lambda: add[(tl.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024), out, want)

    def torch_add(n):
        x, y, out, _ = arrays(n)
        return lambda: torch.add(x, y, out=out)

    sizes = [1 << k for k in range(16, 30, 2)]
    impls = {"tilelang": ours, "torch": torch_add} | ({"triton": theirs} if triton else {})
    return sizes, sweep(sizes, impls, metric=lambda n, ms: 12 * n / ms / 1e6, **shown)


def matmul_sweep(torch, triton, **shown):
    def operands(n):
        a, b = (torch.randn(n, n, device="cuda").half() for _ in range(2))
        return a, b, torch.full((n, n), float("nan"), device="cuda").half(), a.float() @ b.float()

    def ours(bm, bn, bk, threads):
        def make(n):
            a, b, c, want = operands(n)
            grid = tl.cdiv(n, bm) * tl.cdiv(n, bn)
            run = lambda: KERNELS[threads][0][grid](a, b, c, BM=bm, BN=bn, BK=bk, GROUP=8)  # noqa: E731
            return _checked(run, c, want, tol=0.05 * n**0.5)

        return make

    def theirs(n):
        a, b, c, want = operands(n)
        kernel, grid = triton_matmul(triton), (tl.cdiv(n, 128) * tl.cdiv(n, 256),)
        run = lambda: kernel[grid](a, b, c, n, n, n, BM=128, BN=256, BK=64, GROUP=8, num_warps=8, num_stages=3)  # noqa: E731
        return _checked(run, c, want, tol=0.05 * n**0.5)

    def cublas(n):
        a, b, _, _ = operands(n)
        return lambda: torch.matmul(a, b)

    sizes = [512, 1024, 2048, 4096]
    impls = {"tilelang 128x128x32": ours(128, 128, 32, 256), "tilelang 64x64x32": ours(64, 64, 32, 128),
             "cuBLAS": cublas} | ({"triton 128x256x64": theirs} if triton else {})  # fmt: skip
    return sizes, sweep(sizes, impls, metric=lambda n, ms: 2 * n**3 / ms / 1e9, **shown)


SWEEPS = {
    "vector_add": (vector_add_sweep, "GB/s", "vector add, fp32"),
    "matmul": (matmul_sweep, "TFLOP/s", "matmul, fp16"),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="directory for sweeps.json (timing needs a GPU)")
    parser.add_argument("--draw", help="directory holding sweeps.json: draw its PNGs there")
    opts = parser.parse_args()
    if opts.draw:
        with open(os.path.join(opts.draw, "sweeps.json")) as f:
            saved = json.load(f)
        for name, (_, unit, title) in SWEEPS.items():
            sizes, results = saved["sweeps"][name]
            draw(sizes, results, unit, f"{title} on {saved['device']}", os.path.join(opts.draw, f"{name}.png"))
        return
    import torch

    try:
        import triton
    except ImportError:
        triton = None
    saved = {"device": torch.cuda.get_device_name(), "sweeps": {}}
    os.makedirs(opts.out or ".", exist_ok=True)
    for name, (run, unit, title) in SWEEPS.items():
        saved["sweeps"][name] = run(torch, triton, unit=unit, title=title)
        with open(os.path.join(opts.out or ".", "sweeps.json"), "w") as f:  # after each: a cut run keeps its sweeps
            json.dump(saved, f, indent=1)


if __name__ == "__main__":
    main()
