"""Row-wise memory-bound cases for benchmarks/run.py: layernorm, rmsnorm and softmax over
rows in float32 and bfloat16, each against torch and a Triton kernel written here in the
style of Triton's tutorials (one program per row, the whole row in one block, the
tutorial's num_warps rule), also over rows of 4095 elements (not 16-byte aligned: tilelang
runs its kernel for any array, Triton its code for strides not divisible by 16); a per-row
cross-entropy and a row cumsum against torch; a linear recurrence along rows (a scan of
(a, x) pairs by a combine function) against Triton's tl.associative_scan; examples/
fp8_quantize.py's row-scaled float8 quantization against torch (eager and compiled) and Triton.
"""

from __future__ import annotations

from example_module import load_example

import tilelang as tl

# ------------------------------------------------------------------ tilelang kernels


def layernorm(x, w, b, out, N, eps, BLOCK: tl.Constant):
    i = tl.block_id(0)
    cols = tl.arange(0, BLOCK)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    mean = tl.sum(t, axis=1, keepdims=True) / N
    d = tl.where(cols[None, :] < N, t - mean, 0.0)
    var = tl.sum(d * d, axis=1, keepdims=True) / N
    wt = tl.load(w, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    bt = tl.load(b, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    tl.store(out, (d * tl.rsqrt(var + eps) * wt[None, :] + bt[None, :]).astype(out.dtype), index=(i, 0))


def rmsnorm_rows(x, w, out, N, eps, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    ms = tl.sum(t * t, axis=1, keepdims=True) / N
    wt = tl.load(w, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    tl.store(out, (t * tl.rsqrt(ms + eps) * wt[None, :]).astype(out.dtype), index=(i, 0))


@tl.tile_kernel
def row_cumsum(x, out, BLOCK: tl.Constant):
    """Running sums along rows longer than a tile: the carry is the sum of the tiles before."""
    i = tl.block_id(0)
    carry = tl.zeros((1, 1), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BLOCK)):
        t = tl.load(x, index=(i, k), shape=(1, BLOCK))
        tl.store(out, tl.cumsum(t, axis=1) + carry, index=(i, k))
        carry += tl.sum(t, axis=1, keepdims=True)


def _compose(a1, x1, a2, x2):  # h -> a1*h + x1, then h -> a2*h + x2
    return a1 * a2, x1 * a2 + x2


@tl.tile_kernel
def recurrence_rows(a, x, h, BLOCK: tl.Constant):
    """h[i, t] = a[i, t] * h[i, t-1] + x[i, t] along each row (one block a row): a scan of the
    composed maps (examples/linear_recurrence.py carries the state across chunks)."""
    i = tl.block_id(0)
    at = tl.load(a, index=(i, 0), shape=(1, BLOCK), padding=1.0)
    xt = tl.load(x, index=(i, 0), shape=(1, BLOCK))
    _, ht = tl.associative_scan((at, xt), 1, _compose)
    tl.store(h, ht, index=(i, 0))


@tl.tile_kernel
def cross_entropy(x, target, loss, BLOCK: tl.Constant):
    """loss[i] = logsumexp(x[i]) - x[i, target[i]], one row per block."""
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK), padding=float("-inf"))
    m = tl.max(t)
    lse = m + tl.log(tl.sum(tl.exp(t - m)))
    goal = tl.load(target, index=(i,), shape=(1,)).astype(tl.int32)
    picked = tl.sum(tl.where(tl.arange(0, BLOCK)[None, :] == goal[:, None], t, 0.0))
    tl.store(loss, (lse - picked)[None], index=(i,))


def softmax(x, out, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK), padding=float("-inf")).astype(tl.float32)
    e = tl.exp(t - tl.max(t))
    tl.store(out, (e / tl.sum(e)).astype(out.dtype), index=(i, 0))


# each kernel with the default threads per block, and variants to compare
KERNELS = {
    name: {None: tl.tile_kernel(fn), **{f"{t} thr": tl.tile_kernel(fn, num_threads=t) for t in (256, 512)}}
    for name, fn in (("layernorm", layernorm), ("rmsnorm", rmsnorm_rows), ("softmax", softmax))
}
KERNELS["softmax"]["fast_math"] = tl.tile_kernel(softmax, fast_math=True)  # Triton's exp and `/`


# ---------------------------------------------------------------- Triton kernels


def triton_kernels(triton):
    import triton.language as tt

    @triton.jit
    def layernorm_k(X, W, B, Y, stride, N, eps, BLOCK: tt.constexpr):
        row = tt.program_id(0)
        cols = tt.arange(0, BLOCK)
        mask = cols < N
        x = tt.load(X + row * stride + cols, mask=mask, other=0.0).to(tt.float32)
        mean = tt.sum(x, axis=0) / N
        d = tt.where(mask, x - mean, 0.0)
        rstd = 1 / tt.sqrt(tt.sum(d * d, axis=0) / N + eps)
        w = tt.load(W + cols, mask=mask).to(tt.float32)
        b = tt.load(B + cols, mask=mask).to(tt.float32)
        tt.store(Y + row * stride + cols, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def rmsnorm_k(X, W, Y, stride, N, eps, BLOCK: tt.constexpr):
        row = tt.program_id(0)
        cols = tt.arange(0, BLOCK)
        mask = cols < N
        x = tt.load(X + row * stride + cols, mask=mask, other=0.0).to(tt.float32)
        rstd = 1 / tt.sqrt(tt.sum(x * x, axis=0) / N + eps)
        w = tt.load(W + cols, mask=mask).to(tt.float32)
        tt.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def softmax_k(X, Y, stride, N, BLOCK: tt.constexpr):
        row = tt.program_id(0)
        cols = tt.arange(0, BLOCK)
        x = tt.load(X + row * stride + cols, mask=cols < N, other=-float("inf")).to(tt.float32)
        e = tt.exp(x - tt.max(x, axis=0))
        tt.store(Y + row * stride + cols, (e / tt.sum(e, axis=0)).to(Y.dtype.element_ty), mask=cols < N)

    @triton.jit
    def compose_k(a1, x1, a2, x2):
        return a1 * a2, x1 * a2 + x2

    @triton.jit
    def recurrence_k(A, X, H, stride, N, BLOCK: tt.constexpr):
        row = tt.program_id(0)
        cols = tt.arange(0, BLOCK)
        a = tt.load(A + row * stride + cols, mask=cols < N, other=1.0)
        x = tt.load(X + row * stride + cols, mask=cols < N, other=0.0)
        _, h = tt.associative_scan((a, x), 0, compose_k)
        tt.store(H + row * stride + cols, h, mask=cols < N)

    @triton.jit
    def quantize_k(X, Q, S, stride, N, BLOCK: tt.constexpr):
        row = tt.program_id(0)
        cols = tt.arange(0, BLOCK)
        x = tt.load(X + row * stride + cols, mask=cols < N, other=0.0).to(tt.float32)
        largest = tt.maximum(tt.max(tt.abs(x), axis=0), 1e-12)
        tt.store(Q + row * stride + cols, (x * (448.0 / largest)).to(Q.dtype.element_ty), mask=cols < N)
        tt.store(S + row, largest / 448.0)

    return layernorm_k, rmsnorm_k, softmax_k, recurrence_k, quantize_k


def warps_for(block):
    """The Triton tutorials' rule: one warp per 256 elements of the row, 1 to 8."""
    return min(max(block // 256, 1), 8)


# ------------------------------------------------------------------------- cases


def bench_rows(torch, time_ms, report, found, quick=False):
    """Every row case: checked against torch (float64 reference), then timed."""
    tk = triton_kernels(found["triton"]) if "triton" in found else None
    cases = [("layernorm", 4096, 4096, "float32"), ("layernorm", 16384, 8192, "float32"),
             ("layernorm", 16384, 4096, "bfloat16"), ("rmsnorm", 16384, 4096, "bfloat16"),
             ("rmsnorm", 4096, 8192, "bfloat16"), ("softmax", 16384, 4096, "bfloat16"),
             ("layernorm", 16384, 4095, "bfloat16"), ("rmsnorm", 16384, 4095, "bfloat16"),
             ("softmax", 8192, 4095, "float32")]  # fmt: skip
    if quick:
        cases = [(k, 1024, n, d) for k, _, n, d in cases[::2]]
    for kind, m, n, dt in cases:
        _row_case(torch, time_ms, report, tk, kind, m, n, getattr(torch, dt))
    _cross_entropy_case(torch, time_ms, report, quick)
    _recurrence_case(torch, time_ms, report, tk, quick)
    _quantize_case(torch, time_ms, report, tk, quick)
    m, n = (1024, 32768) if quick else (8192, 32768)
    x = torch.randn(m, n, device="cuda")
    out = torch.full_like(x, float("nan"))
    row_cumsum[m](x, out, BLOCK=4096)
    want = torch.cumsum(x.double(), dim=1)
    err = ((out.double() - want).abs() / (want.abs() + n**0.5)).max().item()  # relative to the sums' spread
    ok = "ok" if err < 1e-5 else f"WRONG (err {err:.1e})"
    case, nbytes = f"cumsum rows {m}x{n} f32", 2 * 4 * m * n
    report(case, "tilelang", time_ms(lambda: row_cumsum[m](x, out, BLOCK=4096), torch), nbytes, ok)
    report(case, "torch", time_ms(lambda: torch.cumsum(x, dim=1, out=out), torch), nbytes)


def _recurrence_case(torch, time_ms, report, tk, quick):
    """A linear recurrence along rows (tl.associative_scan of (a, x) pairs), against Triton's
    tl.associative_scan of the same combine; checked against a float64 loop over the columns."""
    m, n = (1024, 4096) if quick else (8192, 4096)
    a, x = torch.rand(m, n, device="cuda") * 0.2 + 0.8, torch.randn(m, n, device="cuda")
    h = torch.full_like(x, float("nan"))
    recurrence_rows[m](a, x, h, BLOCK=n)
    want, state = torch.empty_like(x, dtype=torch.float64), torch.zeros(m, device="cuda", dtype=torch.float64)
    for t in range(n):
        state = a[:, t].double() * state + x[:, t].double()
        want[:, t] = state
    err = ((h.double() - want).abs() / (want.abs() + 1)).max().item()
    ok = "ok" if err < 1e-5 else f"WRONG (err {err:.1e})"
    case, nbytes = f"linear recurrence rows {m}x{n} f32", 3 * 4 * m * n
    report(case, "tilelang", time_ms(lambda: recurrence_rows[m](a, x, h, BLOCK=n), torch), nbytes, ok)
    if tk:
        theirs = lambda: tk[3][(m,)](a, x, h, n, n, BLOCK=n, num_warps=warps_for(n))  # noqa: E731
        report(case, "triton", time_ms(theirs, torch), nbytes)


def _quantize_case(torch, time_ms, report, tk, quick):
    """bfloat16 rows to float8_e4m3fn scaled by their largest magnitude, and the scales: the
    same bits as torch's ``(x.float() * (448 / amax)).to(torch.float8_e4m3fn)`` with ``/``
    divided as IEEE does (torch's ``448.0 / t`` multiplies by ``t.reciprocal()``, and
    ``t / 448.0`` by 1 / 448: the timed peer, as users write it, rounds differently)."""
    m, n = (1024, 4096) if quick else (16384, 4096)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * torch.rand(m, 1, device="cuda", dtype=torch.bfloat16)
    q, scales = torch.zeros(m, n, device="cuda", dtype=torch.float8_e4m3fn), torch.zeros(m, device="cuda")
    ours = load_example("fp8_quantize").quantize_rows
    ours[m](x, q, scales, BLOCK=n)

    def peer():
        largest = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
        return (x.float() * (448.0 / largest)).to(torch.float8_e4m3fn), largest[:, 0] / 448.0

    largest = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
    exactly = torch.full_like(largest, 448.0)
    want_q, want_scales = (x.float() * (exactly / largest)).to(torch.float8_e4m3fn), (largest / exactly)[:, 0]
    same = torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(scales, want_scales)
    case, nbytes = f"fp8 quantize rows {m}x{n} bf16", 3 * m * n + 4 * m
    report(case, "tilelang", time_ms(lambda: ours[m](x, q, scales, BLOCK=n), torch), nbytes, "ok" if same else "WRONG")
    report(case, "torch", time_ms(peer, torch), nbytes)
    report(case, "torch.compile", time_ms(torch.compile(peer), torch), nbytes)
    if tk:
        theirs = lambda: tk[4][(m,)](x, q, scales, n, n, BLOCK=n, num_warps=warps_for(n))  # noqa: E731
        report(case, "triton", time_ms(theirs, torch), nbytes)


def _cross_entropy_case(torch, time_ms, report, quick):
    """Per-row cross-entropy of float32 logits with int64 targets (torch's reduction='none')."""
    m, n = (4096, 4096) if quick else (32768, 4096)
    x, target = torch.randn(m, n, device="cuda") * 3, torch.randint(0, n, (m,), device="cuda")
    loss = torch.full((m,), float("nan"), device="cuda")
    cross_entropy[m](x, target, loss, BLOCK=n)
    want = torch.nn.functional.cross_entropy(x.double(), target, reduction="none")
    err = ((loss.double() - want).abs() / (want.abs() + 1)).max().item()  # float32 sums of 4096 terms
    ok = "ok" if err < 1e-5 else f"WRONG (err {err:.1e})"
    case, nbytes = f"cross-entropy {m}x{n} f32", 4 * m * n + 8 * m + 4 * m
    report(case, "tilelang", time_ms(lambda: cross_entropy[m](x, target, loss, BLOCK=n), torch), nbytes, ok)
    peer = lambda: torch.nn.functional.cross_entropy(x, target, reduction="none")  # noqa: E731
    report(case, "torch", time_ms(peer, torch), nbytes)


def _row_case(torch, time_ms, report, tk, kind, m, n, dtype):
    x = (torch.randn(m, n, device="cuda") * 3 + 1).to(dtype)
    w, b = (torch.randn(n, device="cuda").to(dtype) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    block, eps, warps = 1 << (n - 1).bit_length(), 1e-5, warps_for(1 << (n - 1).bit_length())
    x64, w64, b64 = x.double(), w.double(), b.double()
    if kind == "layernorm":
        args = (x, w, b, out, n, eps)
        want = torch.nn.functional.layer_norm(x64, (n,), w64, b64, eps)
        peer = lambda: torch.nn.functional.layer_norm(x, (n,), w, b, eps)  # noqa: E731
        theirs = tk and (lambda: tk[0][(m,)](x, w, b, out, n, n, eps, BLOCK=block, num_warps=warps))
    elif kind == "rmsnorm":
        args = (x, w, out, n, eps)
        want = x64 * torch.rsqrt((x64 * x64).mean(dim=1, keepdim=True) + eps) * w64
        peer = lambda: torch.nn.functional.rms_norm(x, (n,), w, eps)  # noqa: E731
        theirs = tk and (lambda: tk[1][(m,)](x, w, out, n, n, eps, BLOCK=block, num_warps=warps))
    else:
        args = (x, out)
        want = torch.softmax(x64, dim=1)
        peer = lambda: torch.softmax(x, dim=1)  # noqa: E731
        theirs = tk and (lambda: tk[2][(m,)](x, out, n, n, BLOCK=block, num_warps=warps))
    kernels = KERNELS[kind]
    ours = lambda: kernels[None][m](*args, BLOCK=block)  # noqa: E731
    ours()
    # bfloat16: one rounding of float32 arithmetic to the output (2 ulps); float32: the
    # reordered sums of thousands of terms (1e-5 relative)
    rel = 2 * torch.finfo(dtype).eps if dtype is torch.bfloat16 else 1e-5
    tol = rel * (want.abs() + (1 if kind != "softmax" else 1e-3))
    bad = ((out.double() - want).abs() > tol).sum().item()
    ok = "ok" if bad == 0 else f"WRONG ({bad} elements off)"
    case = f"{kind} {m}x{n} {'bf16' if dtype is torch.bfloat16 else 'f32'}"
    nbytes = 2 * m * n * x.element_size()
    report(case, "tilelang", time_ms(ours, torch), nbytes, ok)
    for label, kernel in list(kernels.items())[1:]:  # the variants, unchecked
        other = time_ms(lambda k=kernel: k[m](*args, BLOCK=block), torch)
        report(case, f"tilelang {label}", other, nbytes)
    report(case, "torch", time_ms(peer, torch), nbytes)
    if theirs:
        report(case, "triton", time_ms(theirs, torch), nbytes)
