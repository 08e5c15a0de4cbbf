"""GPU benchmarks: tilelang against torch, Triton, CuPy and naive numba, in one run.

    python benchmarks/run.py [--out results.md] [--quick]

Each case checks tilelang's result against torch on random inputs (outputs poisoned
first), then times every available implementation with CUDA events (warm-up, median of
many runs) and reports GB/s from the fewest bytes the operation must move (each input
read once, each output written once). Peers that are not installed are skipped.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys

from axes import bench_axes
from matmul import bench_matmul
from rows import bench_rows
from timing import time_ms

import tilelang as tl

# ------------------------------------------------------------------ tilelang kernels


@tl.tile_kernel
def vector_add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    a = tl.load(x, index=(i,), shape=(TILE,))
    b = tl.load(y, index=(i,), shape=(TILE,))
    tl.store(out, a + b, index=(i,))


def softmax_rows(x, out, BLOCK: tl.Constant):
    row = tl.block_id(0)
    t = tl.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf"))
    e = tl.exp(t - tl.max(t))
    tl.store(out, e / tl.sum(e), index=(row, 0))


# the same kernel with the default threads per block, and with others to compare; and with Triton's
# numerics (fast_math: exp2 of a scaled argument, `/` within 2 ulps, as the Triton kernel's)
SOFTMAX = {None: tl.tile_kernel(softmax_rows), **{t: tl.tile_kernel(softmax_rows, num_threads=t) for t in (128, 256)}}
SOFTMAX["fast_math"] = tl.tile_kernel(softmax_rows, fast_math=True)


@tl.tile_kernel(num_threads=256)  # (a sweep on the H200: 256 threads, 4 blocks an SM, TILE 4096 among the fastest)
def total(x, parts, done, out, n, TILE: tl.Constant, PARTS: tl.Constant):
    """Each block sums a strided share of the tiles and stores its total; the last block to
    finish adds the totals (in block order: the same bits every run) and re-arms the counter.
    One launch, as torch's and CuPy's sums (an atomic add into ``out`` needs it zeroed first)."""
    b = tl.block_id(0)
    acc = tl.zeros((TILE,), tl.float32)
    for k in tl.range(b, tl.cdiv(n, TILE), tl.num_blocks(0)):
        acc += tl.load(x, index=(k,), shape=(TILE,))
    tl.scatter(parts, b, tl.sum(acc))
    last = tl.atomic_add(done, 0, 1, sem="acq_rel") == tl.num_blocks(0) - 1
    for _ in tl.range(0, tl.where(last, 1, 0)):  # the last block only
        tl.scatter(out, 0, tl.sum(tl.load(parts, index=(0,), shape=(PARTS,))))
        tl.scatter(done, 0, 0)


# ------------------------------------------------------------------------ timing


def peers():
    found = {}
    for name in ("triton", "cupy"):
        try:
            found[name] = __import__(name)
        except Exception:
            pass
    return found


def triton_kernels(triton):
    import triton.language as tlang

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tlang.constexpr):
        offs = tlang.program_id(0) * BLOCK + tlang.arange(0, BLOCK)
        mask = offs < n
        tlang.store(out + offs, tlang.load(x + offs, mask=mask) + tlang.load(y + offs, mask=mask), mask=mask)

    @triton.jit
    def softmax_kernel(x, out, n_cols, BLOCK: tlang.constexpr):
        row = tlang.program_id(0)
        cols = tlang.arange(0, BLOCK)
        v = tlang.load(x + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tlang.exp(v - tlang.max(v, axis=0))
        tlang.store(out + row * n_cols + cols, e / tlang.sum(e, axis=0), mask=cols < n_cols)

    return add_kernel, softmax_kernel


def bench_softmax(torch, m, cols, triton_softmax, report):
    a = torch.randn(m, cols, device="cuda") * 4
    block = 1 << (cols - 1).bit_length()
    nbytes = 2 * 4 * m * cols
    case = f"softmax {m}x{cols} f32"
    for threads, kernel in SOFTMAX.items():
        res = torch.full_like(a, float("nan"))
        kernel[m](a, res, BLOCK=block)
        err = (res.double() - torch.softmax(a.double(), dim=1)).abs().max().item()
        ok = "ok" if err < 1e-6 else f"WRONG (max err {err:.2e})"
        name = "tilelang" + (f" {threads}" if isinstance(threads, str) else f" {threads} thr" if threads else "")
        report(case, name, time_ms(lambda k=kernel, r=res: k[m](a, r, BLOCK=block), torch), nbytes, ok)
    report(case, "torch", time_ms(lambda: torch.softmax(a, dim=1), torch), nbytes)
    if triton_softmax is not None:
        report(case, "triton", time_ms(lambda: triton_softmax[(m,)](a, res, cols, BLOCK=block), torch), nbytes)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-matmul", action="store_true", help="the memory-bound cases alone")
    opts = parser.parse_args()
    import torch

    found = peers()
    dev = torch.device("cuda")
    rows = []

    def report(case, impl, ms, nbytes, ok=""):
        gbs = nbytes / ms / 1e6
        rows.append((case, impl, ms, gbs, ok))
        print(f"{case:28s} {impl:18s} {ms:9.4f} ms {gbs:8.0f} GB/s {ok}", flush=True)

    # vector add 2^28 fp32
    n = 1 << (24 if opts.quick else 28)
    x, y = torch.rand(n, device=dev), torch.rand(n, device=dev)
    out = torch.full((n,), float("nan"), device=dev)
    vector_add[tl.cdiv(n, 1024)](x, y, out, TILE=1024)
    ok = "ok" if torch.equal(out, x + y) else "WRONG"
    nbytes = 3 * 4 * n
    case = f"vector add 2^{n.bit_length() - 1} f32"
    report(case, "tilelang", time_ms(lambda: vector_add[tl.cdiv(n, 1024)](x, y, out, TILE=1024), torch), nbytes, ok)
    report(case, "torch", time_ms(lambda: torch.add(x, y, out=out), torch), nbytes)
    if "triton" in found:
        add_k = triton_kernels(found["triton"])[0]
        report(case, "triton", time_ms(lambda: add_k[(tl.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024), torch), nbytes)
    if "cupy" in found:
        cp = found["cupy"]
        cx, cy = cp.asarray(x), cp.asarray(y)
        report(case, "cupy", time_ms(lambda: cp.add(cx, cy), torch), nbytes)
    from numba import cuda

    @cuda.jit
    def naive_add(a, b, c):
        i = cuda.grid(1)
        if i < c.size:
            c[i] = a[i] + b[i]

    nx, ny, nout = cuda.as_cuda_array(x), cuda.as_cuda_array(y), cuda.as_cuda_array(out)
    report(case, "numba naive", time_ms(lambda: naive_add[tl.cdiv(n, 256), 256](nx, ny, nout), torch), nbytes)

    softmax_k = triton_kernels(found["triton"])[1] if "triton" in found else None
    for m, cols in ((4096, 4096), (16384, 4096)) if not opts.quick else ((1024, 4096),):
        bench_softmax(torch, m, cols, softmax_k, report)

    bench_rows(torch, time_ms, report, found, opts.quick)
    bench_axes(torch, time_ms, report, opts.quick)

    # sum of 2^28 fp32
    n = 1 << (24 if opts.quick else 28)
    x = torch.rand(n, device=dev)
    blocks = 4 * torch.cuda.get_device_properties(0).multi_processor_count
    parts, acc = torch.empty(blocks, device=dev), torch.empty(1, device=dev)
    done = torch.zeros(1, device=dev, dtype=torch.int32)  # (zeroed once: the last block re-arms it)
    parts_tile = 1 << (blocks - 1).bit_length()

    def run_sum():
        total[blocks](x, parts, done, acc, n, TILE=4096, PARTS=parts_tile)

    run_sum()
    want = x.double().sum().item()
    ok = "ok" if abs(acc.item() - want) <= 1e-5 * abs(want) else f"WRONG ({acc.item()} vs {want})"
    case = f"sum 2^{n.bit_length() - 1} f32"
    report(case, "tilelang", time_ms(run_sum, torch), 4 * n, ok)
    report(case, "torch", time_ms(lambda: torch.sum(x), torch), 4 * n)
    if "cupy" in found:
        cx = found["cupy"].asarray(x)
        report(case, "cupy", time_ms(lambda: found["cupy"].sum(cx), torch), 4 * n)

    header = (
        f"# tilelang benchmarks\n\n{datetime.date.today()} on {torch.cuda.get_device_name()}; "
        f"torch {torch.__version__}, triton {getattr(found.get('triton'), '__version__', '-')}, "
        f"cupy {getattr(found.get('cupy'), '__version__', '-')}, python {platform.python_version()}\n\n"
        "| case | implementation | ms | GB/s | check |\n|---|---|---|---|---|\n"
    )
    table = header + "".join(f"| {c} | {i} | {ms:.4f} | {g:.0f} | {ok} |\n" for c, i, ms, g, ok in rows)
    if not opts.no_matmul:
        table += "\n## matmul\n\n" + bench_matmul(torch, time_ms, opts.quick)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(table)
    print(table)
    return 0 if all("WRONG" not in r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
