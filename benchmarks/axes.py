"""Cases for benchmarks/run.py beyond rows: a column sum, a sum and an argmax over the
middle axis of a 3-d array, a 2-d transpose and a 256-bin histogram; against torch.
"""

from __future__ import annotations

import tilelang as tl


@tl.tile_kernel
def column_sum(x, out, ROWS_PER_BLOCK: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    """Block (j, s) sums rows [s * ROWS_PER_BLOCK, ...) of columns [j * BN, ...): a tile of
    partial sums over the loop, one reduction at the end, then one atomic add per column."""
    j, s = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    first = s * (ROWS_PER_BLOCK // BM)
    for k in tl.range(first, first + ROWS_PER_BLOCK // BM):
        acc += tl.load(x, index=(k, j), shape=(BM, BN))
    cols = j * BN + tl.arange(0, BN)
    tl.atomic_add(out, cols, tl.sum(acc, axis=0), mask=cols < x.shape[1])


@tl.tile_kernel
def middle_sum(x, out, BB: tl.Constant, BC: tl.Constant):
    """out[a, c] = sum over b of x[a, b, c]: block (j, a) walks the middle axis in tiles (the
    column tiles of a slice next to each other in launch order: they read whole rows together)."""
    j, a = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((1, BB, BC), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BB)):
        acc += tl.load(x, index=(a, k, j), shape=(1, BB, BC))
    tl.store(out, tl.sum(acc, axis=1), index=(a, j))


@tl.tile_kernel
def middle_argmax(x, out, BB: tl.Constant, BC: tl.Constant):
    """out[a, c] = argmax over b of x[a, b, c] (the first on ties): each element of a (BB, BC)
    tile keeps the best value it has seen and where; the tile is reduced once, at the end.
    Block (j, a), as middle_sum."""
    j, a = tl.block_id(0), tl.block_id(1)
    best = tl.full((1, BB, BC), float("-inf"), tl.float32)
    where = tl.zeros((1, BB, BC), tl.int32)
    rows = tl.arange(0, BB)[None, :, None]
    for k in tl.range(0, tl.cdiv(x.shape[1], BB)):
        t = tl.load(x, index=(a, k, j), shape=(1, BB, BC), padding=float("-inf"))
        take = t > best
        best, where = tl.where(take, t, best), tl.where(take, rows + (k * BB).astype(tl.int32), where)
    top = tl.max(best, axis=1, keepdims=True)
    tl.store(out, tl.min(tl.where(best == top, where, x.shape[1]), axis=1), index=(a, j))


@tl.tile_kernel
def transpose(x, out, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    tl.store(out, tl.transpose(tl.load(x, index=(i, j), shape=(BM, BN))), index=(j, i))


@tl.tile_kernel
def histogram(x, counts, TILE: tl.Constant, BINS: tl.Constant):
    """Each block counts a strided share of the tiles in shared memory, then adds its counts."""
    acc = tl.zeros((BINS,), tl.int32)
    for k in tl.range(tl.block_id(0), tl.cdiv(x.shape[0], TILE), tl.num_blocks(0)):
        acc += tl.histogram(tl.load(x, index=(k,), shape=(TILE,), padding=-1), BINS)
    tl.atomic_add(counts, tl.arange(0, BINS), acc)


def bench_axes(torch, time_ms, report, quick=False):
    # column sum 16384x8192 f32
    m, n = (2048, 8192) if quick else (16384, 8192)
    x = torch.randn(m, n, device="cuda")
    out = torch.zeros(n, device="cuda")
    rows, bm, bn = 1024, 32, 128

    def ours():
        out.zero_()
        column_sum[tl.cdiv(n, bn), tl.cdiv(m, rows)](x, out, ROWS_PER_BLOCK=rows, BM=bm, BN=bn)

    ours()
    err = ((out.double() - x.double().sum(dim=0)).abs().max() / m**0.5).item()
    case, nbytes = f"column sum {m}x{n} f32", 4 * (m * n + n)
    report(case, "tilelang", time_ms(ours, torch), nbytes, "ok" if err < 1e-4 else f"WRONG (err {err:.1e})")
    report(case, "torch", time_ms(lambda: torch.sum(x, dim=0), torch), nbytes)

    # sum over the middle axis of (128, 4096, 4095) f32
    shape = (16, 4096, 4095) if quick else (128, 4096, 4095)
    x = torch.randn(*shape, device="cuda")
    out = torch.full((shape[0], shape[2]), float("nan"), device="cuda")
    # 64 x 256 tiles, column tiles first in launch order: the fastest of 14 on the H100 (.prof/mid3.py,
    # 2026-12-05: 2.926 ms, torch 3.018; blocks (a, j), as before, 3.059 at best, with 32 x 512)
    bb, bc = 64, 256
    grid = (tl.cdiv(shape[2], bc), shape[0])
    middle_sum[grid](x, out, BB=bb, BC=bc)
    err = ((out.double() - x.double().sum(dim=1)).abs().max() / shape[1] ** 0.5).item()
    case, nbytes = f"middle-axis sum {shape[0]}x{shape[1]}x{shape[2]} f32", 4 * (x.numel() + out.numel())
    ok = "ok" if err < 1e-4 else f"WRONG (err {err:.1e})"
    report(case, "tilelang", time_ms(lambda: middle_sum[grid](x, out, BB=bb, BC=bc), torch), nbytes, ok)
    for vb, vc in ((32, 512), (32, 256)):  # other tiles (rows of 4095: the kernel for any array), unchecked
        g = (tl.cdiv(shape[2], vc), shape[0])
        run = lambda g=g, vb=vb, vc=vc: middle_sum[g](x, out, BB=vb, BC=vc)  # noqa: E731
        report(case, f"tilelang {vb}x{vc}", time_ms(run, torch), nbytes)
    report(case, "torch", time_ms(lambda: torch.sum(x, dim=1), torch), nbytes)

    # argmax over the middle axis of the same array
    out = torch.full((shape[0], shape[2]), -1, device="cuda", dtype=torch.int64)
    bb, bc = 32, 128  # (H100: 2.919 ms, torch 3.224; blocks (a, j) 3.180 at best)
    grid = (tl.cdiv(shape[2], bc), shape[0])
    middle_argmax[grid](x, out, BB=bb, BC=bc)
    ok = "ok" if torch.equal(out, torch.argmax(x, dim=1)) else "WRONG"
    case, nbytes = f"middle-axis argmax {shape[0]}x{shape[1]}x{shape[2]} f32", 4 * x.numel() + 8 * out.numel()
    report(case, "tilelang", time_ms(lambda: middle_argmax[grid](x, out, BB=bb, BC=bc), torch), nbytes, ok)
    report(case, "torch", time_ms(lambda: torch.argmax(x, dim=1), torch), nbytes)

    # transpose 16384x8192 f32
    m, n = (2048, 8192) if quick else (16384, 8192)
    x = torch.randn(m, n, device="cuda")
    out = torch.full((n, m), float("nan"), device="cuda")
    bm = bn = 64
    grid = (tl.cdiv(m, bm), tl.cdiv(n, bn))
    transpose[grid](x, out, BM=bm, BN=bn)
    ok = "ok" if torch.equal(out, x.t()) else "WRONG"
    case, nbytes = f"transpose {m}x{n} f32", 2 * 4 * m * n
    report(case, "tilelang", time_ms(lambda: transpose[grid](x, out, BM=bm, BN=bn), torch), nbytes, ok)
    report(case, "torch", time_ms(lambda: out.copy_(x.t()), torch), nbytes)
    report(case, "copy (same bytes)", time_ms(lambda: out.view(m, n).copy_(x), torch), nbytes)

    # 256-bin histogram of 2^26 int32
    n = 1 << (22 if quick else 26)
    x = torch.randint(0, 256, (n,), device="cuda", dtype=torch.int32)
    counts = torch.zeros(256, device="cuda", dtype=torch.int32)

    def ours():
        counts.zero_()
        histogram[132 * 8](x, counts, TILE=4096, BINS=256)

    ours()
    ok = "ok" if torch.equal(counts.long(), torch.bincount(x, minlength=256)) else "WRONG"
    case = f"histogram 256 bins 2^{n.bit_length() - 1} i32"
    report(case, "tilelang", time_ms(ours, torch), 4 * n, ok)
    report(case, "torch", time_ms(lambda: torch.bincount(x, minlength=256), torch), 4 * n)
