"""Matmul benchmarks: tilelang's tl.dot against cuBLAS (torch) and Triton, same run.

    python benchmarks/matmul.py [--quick] [--out results.md]

Each case checks tilelang's result against torch (float64 reference) on random inputs,
output poisoned first, then times every implementation with CUDA events (median, run.py's
``time_ms``) and reports TFLOP/s (2 M N K flops). Square fp16 and bf16 products at 4096^3
(every config) and 8192^3 (the autotuned kernel and the peers: issue 14's sizes), the
linear+bias+relu epilogue, an irregular shape, float32. benchmarks/run.py runs it too.
"""

from __future__ import annotations

import argparse
import functools

from timing import time_ms

import tilelang as tl


def grouped_tile(rows, cols, GROUP):
    """The (row, column) of the result tile of this block: blocks take GROUP rows of tiles
    at a time, column by column (the rows' tiles of ``a`` stay in L2)."""
    pid = tl.block_id(0)
    first = pid // (GROUP * cols) * GROUP
    size = tl.minimum(rows - first, GROUP)
    return first + pid % size, (pid % (GROUP * cols)) // size


def matmul(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, GROUP: tl.Constant,
           PRECISION: tl.Constant = "ieee"):  # fmt: skip
    """c = a @ b, blocks grouped GROUP rows of tiles at a time (tiles of a stay in L2);
    float32 operands exact, or rounded to TF32 with ``PRECISION="tf32"``."""
    i, j = grouped_tile(tl.cdiv(a.shape[0], BM), tl.cdiv(b.shape[1], BN), GROUP)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        x, y = tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(x, y, acc, precision=PRECISION)
    tl.store(c, acc.astype(c.dtype), index=(i, j))


def matmul_nt(a, w, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, GROUP: tl.Constant):
    """c = a @ w.T, ``w`` (N, K): both operands K-major, as float8 tensor cores read them (the
    float8 GEMM's usual form; ``torch._scaled_mm`` takes its b so too); blocks grouped as
    :func:`matmul`'s."""
    i, j = grouped_tile(tl.cdiv(a.shape[0], BM), tl.cdiv(w.shape[0], BN), GROUP)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(w, index=(j, k), shape=(BN, BK)).T, acc)
    tl.store(c, acc.astype(c.dtype), index=(i, j))


def linear_relu(x, w, bias, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """out = relu(x @ w.T + bias), ``w`` (N, K) as torch.nn.Linear stores it: the epilogue on
    the accumulator, before the one store."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BK)):
        acc = tl.dot(tl.load(x, index=(i, k), shape=(BM, BK)), tl.load(w, index=(j, k), shape=(BN, BK)).T, acc)
    y = acc + tl.load(bias, index=(0, j), shape=(1, BN)).astype(tl.float32)
    tl.store(out, tl.maximum(y, 0.0).astype(out.dtype), index=(i, j))


CONFIGS = [(128, 128, 32, 256), (128, 256, 32, 512), (64, 128, 32, 128), (128, 128, 64, 256), (64, 64, 32, 128)]
KERNELS = {
    t: (tl.tile_kernel(matmul, num_threads=t), tl.tile_kernel(linear_relu, num_threads=t)) for t in (128, 256, 512)
}
# the best measured Hopper config (H200, 2026-12-03: 128x256x64, 4 stages), for the epilogue and irregular cases
WIDE = tuple(tl.tile_kernel(fn, num_threads=256, num_stages=4) for fn in (matmul, linear_relu))
MMA_SYNC = tl.tile_kernel(matmul, num_threads=256, arch="sm_80")  # the pre-Hopper path, for comparison
# float8 x @ w.T: (BM, BN, BK, threads, stages); the first the best on the H100 (2026-12-05, 1173 TFLOP/s)
FLOAT8_CONFIGS = [(128, 256, 128, 256, 4), (128, 256, 128, 256, 3), (256, 128, 128, 256, 3), (128, 256, 64, 256, 4)]
FLOAT8 = {(t, s): tl.tile_kernel(matmul_nt, num_threads=t, num_stages=s) for *_, t, s in FLOAT8_CONFIGS}


# The autotuner over the default dot configs: its choice should time within 5% of the best
# of CONFIGS above (issue 16); a second run of this script finds it in the cache.
AUTOTUNED = tl.autotune(key=["a", "b"])(tl.tile_kernel(matmul))


def triton_matmul(triton):
    import triton.language as tt

    @triton.jit
    def kernel(
        A, B, C, M, N, K, BM: tt.constexpr, BN: tt.constexpr, BK: tt.constexpr, GROUP: tt.constexpr,
        PRECISION: tt.constexpr = "tf32", BT: tt.constexpr = False,
    ):  # fmt: skip
        """The Triton tutorial's matmul (grouped block order, rows and columns past the end
        wrapped, masked K tail); ``PRECISION`` of float32 inputs: "ieee" or "tf32" (Triton's
        default); ``BT``: ``A @ B.T``, B given (N, K) (float8 dots on Hopper read both K-major)."""
        pid = tt.program_id(0)
        rows, cols = tt.cdiv(M, BM), tt.cdiv(N, BN)
        group = pid // (GROUP * cols)
        first = group * GROUP
        size = min(rows - first, GROUP)
        pm, pn = first + (pid % size), (pid % (GROUP * cols)) // size
        rm, rn, rk = pm * BM + tt.arange(0, BM), pn * BN + tt.arange(0, BN), tt.arange(0, BK)
        a = A + (rm % M)[:, None] * K + rk[None, :]
        if BT:
            b = B + (rn % N)[None, :] * K + rk[:, None]
        else:
            b = B + rk[:, None] * N + (rn % N)[None, :]
        acc = tt.zeros((BM, BN), dtype=tt.float32)
        for k in range(0, tt.cdiv(K, BK)):
            x = tt.load(a, mask=rk[None, :] < K - k * BK, other=0.0)
            y = tt.load(b, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tt.dot(x, y, acc, input_precision=PRECISION)
            a += BK
            if BT:
                b += BK
            else:
                b += BK * N
        c = C + rm[:, None] * N + rn[None, :]
        tt.store(c, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    return kernel


def _launcher(kernel, grid, args, **constants):
    return lambda: kernel[grid](*args, **constants)


def bench_matmul(torch, time_ms, quick=False) -> str:
    """Every matmul case, checked and timed (``time_ms(fn, torch)``: run.py's CUDA-event
    median); returns the results as a markdown table."""
    try:
        import triton

        tk = triton_matmul(triton)
    except Exception:
        tk = None
    rows = []

    def report(case, impl, ms, flops, ok=""):
        tflops = flops / ms / 1e9
        rows.append((case, impl, ms, tflops, ok))
        print(f"{case:32s} {impl:30s} {ms:9.4f} ms {tflops:8.1f} TFLOP/s {ok}", flush=True)

    def check(got, want, k):
        err = ((got.double() - want).abs() / (want.abs() + k**0.5)).max().item()
        return "ok" if err < 1e-2 else f"WRONG (err {err:.1e})"

    sizes = (1024,) if quick else (4096, 8192)  # every config at the first; the autotuned kernel and the peers at each
    for n in sizes:
        for dtype in (torch.float16, torch.bfloat16):
            _square(torch, time_ms, report, check, tk, n, dtype, configs=n == sizes[0])
    n = sizes[0]

    # Linear + bias + ReLU, fp16, two configs
    x, w = (torch.randn(n, n, device="cuda").half() for _ in range(2))
    bias = torch.randn(1, n, device="cuda").half()
    want = torch.relu(x.double() @ w.double().T + bias.double())
    out = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float16)
    case = f"linear+bias+relu {n}^3 f16"
    for kernel, (bm, bn, bk), label in ((KERNELS[256][1], (128, 128, 32), "3 st"), (WIDE[1], (128, 256, 64), "4 st")):
        run = _launcher(kernel, (tl.cdiv(n, bm), tl.cdiv(n, bn)), (x, w, bias, out), BM=bm, BN=bn, BK=bk)
        run()
        report(case, f"tilelang {bm}x{bn}x{bk} {label}", time_ms(run, torch), 2 * n**3, check(out, want, n))
    report(case, "torch", time_ms(lambda: torch.relu(torch.nn.functional.linear(x, w, bias[0])), torch), 2 * n**3)

    # An irregular fp16 shape: K odd, so rows of `a` are not 16-byte aligned (no TMA, no 16-byte copies)
    m, n_, k = (1025, 737, 1481) if quick else (8205, 2949, 5921)
    a, b = torch.randn(m, k, device="cuda").half(), torch.randn(k, n_, device="cuda").half()
    want, case, flops = a.double() @ b.double(), f"matmul {m}x{n_}x{k} f16", 2 * m * n_ * k
    c = torch.full((m, n_), float("nan"), device="cuda", dtype=torch.float16)
    run = _launcher(WIDE[0], tl.cdiv(m, 128) * tl.cdiv(n_, 256), (a, b, c), BM=128, BN=256, BK=64, GROUP=8)
    run()
    report(case, "tilelang 128x256x64 4 st", time_ms(run, torch), flops, check(c, want, k))
    report(case, "torch (cuBLAS)", time_ms(functools.partial(torch.matmul, a, b), torch), flops)
    if tk is not None:
        c = torch.empty((m, n_), device="cuda", dtype=torch.float16)
        run = _launcher(tk, (tl.cdiv(m, 128) * tl.cdiv(n_, 256),), (a, b, c, m, n_, k), BM=128, BN=256, BK=64, GROUP=8,
                        num_warps=8, num_stages=3)  # fmt: skip
        run()
        report(case, "triton 128x256x64 8w 3s", time_ms(run, torch), flops, check(c, want, k))

    bench_float32(torch, time_ms, report, tk, quick)
    bench_float8(torch, time_ms, report, quick)
    table = "| case | implementation | ms | TFLOP/s | check |\n|---|---|---|---|---|\n"
    return table + "".join(f"| {c} | {i} | {ms:.4f} | {f:.1f} | {ok} |\n" for c, i, ms, f, ok in rows)


def _square(torch, time_ms, report, check, tk, n, dtype, configs):
    """matmul n^3 of ``dtype``: the configs of CONFIGS and mma.sync (``configs``), the
    autotuned kernel, cuBLAS and Triton's 128x256x64 (3 and 4 stages) and 128x128x32."""
    a, b = (torch.randn(n, n, device="cuda").to(dtype) for _ in range(2))
    want = a.double() @ b.double()
    case = f"matmul {n}^3 {str(dtype)[6:]}"
    flops = 2 * n**3
    if configs:
        for bm, bn, bk, t in CONFIGS:
            c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
            run = _launcher(KERNELS[t][0], tl.cdiv(n, bm) * tl.cdiv(n, bn), (a, b, c), BM=bm, BN=bn, BK=bk, GROUP=8)
            run()
            report(case, f"tilelang {bm}x{bn}x{bk} {t} thr", time_ms(run, torch), flops, check(c, want, n))
        c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
        run = _launcher(MMA_SYNC, tl.cdiv(n, 128) ** 2, (a, b, c), BM=128, BN=128, BK=32, GROUP=8)
        run()
        report(case, "tilelang mma.sync 128x128x32", time_ms(run, torch), flops, check(c, want, n))
    c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
    grid = lambda args: (tl.cdiv(n, args["BM"]) * tl.cdiv(n, args["BN"]),)  # noqa: E731
    run, tunings = functools.partial(AUTOTUNED[grid], a, b, c, GROUP=8), len(AUTOTUNED.tunings)
    run()  # tunes (or finds the choice in the cache): the times of every config are in AUTOTUNED.tunings
    record = AUTOTUNED.tunings[-1] if len(AUTOTUNED.tunings) > tunings else None
    tuned = f"tuned in {record['seconds']:.1f} s: {record['chosen']}" if record else "cached"
    if record:  # (each config's time, for the log: which ones the choice was between)
        print(f"{case}: autotune ms {record['times_ms']}", flush=True)
    report(case, f"tilelang autotuned ({tuned})", time_ms(run, torch), flops, check(c, want, n))
    report(case, "torch (cuBLAS)", time_ms(functools.partial(torch.matmul, a, b), torch), flops)
    if tk is not None:
        c = torch.empty((n, n), device="cuda", dtype=dtype)
        for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 32, 4, 4)):
            grid = (tl.cdiv(n, bm) * tl.cdiv(n, bn),)
            run = _launcher(tk, grid, (a, b, c, n, n, n), BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps,
                            num_stages=stages)  # fmt: skip
            run()
            report(case, f"triton {bm}x{bn}x{bk} {warps}w {stages}s", time_ms(run, torch), flops, check(c, want, n))


# float32 on CUDA cores: 8 x 8 results a thread, two blocks an SM (H200 sweep, 2026-12-03)
FLOAT32 = {t: tl.tile_kernel(matmul, num_threads=t) for t in (128, 256)}


def bench_float32(torch, time_ms, report, tk, quick):
    """float32 matmuls, exact against cuBLAS (no TF32) and Triton's "ieee" dot, and with
    ``precision="tf32"`` against cuBLAS's and Triton's TF32: 4096^3 and an irregular shape
    (K odd: rows not 16-byte aligned). Checked within 1e-5 of the largest float64 result
    (K roundings of float32 sums), TF32 against float64 sums of the rounded operands."""
    for m, n, k in ((1024, 1024, 1024), (1025, 737, 1481)) if quick else ((4096, 4096, 4096), (8205, 2949, 5921)):
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        want, case, flops = a.double() @ b.double(), f"matmul {m}x{n}x{k} f32", 2 * m * n * k

        def check(c, want=want, tolerance=1e-5):
            err = ((c.double() - want).abs().max() / want.abs().max()).item()
            return "ok" if err < tolerance else f"WRONG (err {err:.1e})"

        for bm, bn, bk, t in ((128, 128, 32, 256), (64, 128, 16, 128)):
            c = torch.full((m, n), float("nan"), device="cuda")
            run = _launcher(FLOAT32[t], tl.cdiv(m, bm) * tl.cdiv(n, bn), (a, b, c), BM=bm, BN=bn, BK=bk, GROUP=8)
            run()
            report(case, f"tilelang {bm}x{bn}x{bk} {t} thr", time_ms(run, torch), flops, check(c))
        rounded = [(x.view(torch.int32) + 0x1000).bitwise_and(-0x2000).view(torch.float32).double() for x in (a, b)]
        want_tf32 = rounded[0] @ rounded[1]  # (TF32 operands, float64 sums: within float32 sums' error)
        for bm, bn, bk, t in ((128, 128, 32, 256), (64, 128, 32, 128)):
            c = torch.full((m, n), float("nan"), device="cuda")
            run = _launcher(FLOAT32[t], tl.cdiv(m, bm) * tl.cdiv(n, bn), (a, b, c), BM=bm, BN=bn, BK=bk, GROUP=8,
                            PRECISION="tf32")  # fmt: skip
            run()
            # (tensor-core float32 sums are less exact than FFMA's: 1.2e-5 and 1.7e-5 of the largest, H200)
            report(case, f"tilelang tf32 {bm}x{bn}x{bk} {t} thr", time_ms(run, torch), flops, check(c, want_tf32, 1e-4))
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            label = f"torch (cuBLAS{', TF32' if tf32 else ''})"
            report(case, label, time_ms(functools.partial(torch.matmul, a, b), torch), flops)
        torch.backends.cuda.matmul.allow_tf32 = False
        for precision in ("ieee", "tf32") if tk is not None else ():
            c = torch.empty((m, n), device="cuda")
            for bm, bn, bk, warps, stages in ((128, 128, 32, 8, 3), (128, 64, 32, 4, 4)):
                run = _launcher(tk, (tl.cdiv(m, bm) * tl.cdiv(n, bn),), (a, b, c, m, n, k), BM=bm, BN=bn, BK=bk,
                                GROUP=8, PRECISION=precision, num_warps=warps, num_stages=stages)  # fmt: skip
                run()
                label = f"triton {precision} {bm}x{bn}x{bk} {warps}w {stages}s"
                report(case, label, time_ms(run, torch), flops, check(c) if precision == "ieee" else "")


def bench_float8(torch, time_ms, report, quick):
    """float8_e4m3fn ``x @ w.T``, float32 result, n^3: tilelang's FLOAT8_CONFIGS against
    cuBLAS's float8 GEMM (``torch._scaled_mm``, unit scales: its default accumulation, every
    few k-steps promoted to float32, and its fast one) and Triton's float8 dot. Checked
    within 1e-2 of the largest float64 result (the float8 tensor cores keep ~13 bits of each
    k-step's sum: 4.4e-3 at K = 4096 for tilelang, Triton and cuBLAS's fast accumulation)."""
    n = 1024 if quick else 4096
    x, y = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    a, w = x.to(torch.float8_e4m3fn), y.to(torch.float8_e4m3fn)
    want, case, flops = a.double() @ w.double().T, f"matmul {n}^3 float8_e4m3fn, x @ w.T", 2 * n**3

    def check(c):
        err = ((c.double() - want).abs().max() / want.abs().max()).item()
        return f"ok (err {err:.1e})" if err < 1e-2 else f"WRONG (err {err:.1e})"

    c = torch.empty((n, n), device="cuda")
    for bm, bn, bk, t, s in FLOAT8_CONFIGS:
        c.fill_(float("nan"))
        run = _launcher(FLOAT8[t, s], tl.cdiv(n, bm) * tl.cdiv(n, bn), (a, w, c), BM=bm, BN=bn, BK=bk, GROUP=8)
        run()
        report(case, f"tilelang {bm}x{bn}x{bk} {t} thr {s} st", time_ms(run, torch), flops, check(c))
    one = torch.ones((), device="cuda")
    peers = {
        f"torch._scaled_mm (cuBLAS{', fast accumulation' if fast else ''})": functools.partial(
            torch._scaled_mm, a, w.T, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast
        )
        for fast in (False, True)
    }
    try:
        import triton

        tk = triton_matmul(triton)
        for bm, bn, bk, warps, stages in ((128, 256, 128, 8, 3), (128, 256, 64, 8, 4)):
            grid = (tl.cdiv(n, bm) * tl.cdiv(n, bn),)
            peers[f"triton {bm}x{bn}x{bk} {warps}w {stages}s"] = _launcher(
                tk, grid, (a, w, c, n, n, n), BM=bm, BN=bn, BK=bk, GROUP=8, BT=True, num_warps=warps, num_stages=stages
            )
    except ImportError:
        pass
    for label, run in peers.items():
        try:  # (a peer that fails, an older torch or Triton, is reported, not the end of the run)
            c.fill_(float("nan"))  # (Triton's result lands in c: checked from NaN, not tilelang's)
            out = run()
            report(case, label, time_ms(run, torch), flops, check(out if isinstance(out, torch.Tensor) else c))
        except Exception as err:  # noqa: BLE001
            print(f"{case}: {label} failed: {type(err).__name__}: {str(err)[:200]}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    import torch

    table = bench_matmul(torch, time_ms, opts.quick)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(f"# matmul on {torch.cuda.get_device_name()}\n\n" + table)


if __name__ == "__main__":
    main()
