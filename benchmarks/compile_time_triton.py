"""Triton's cold first launch of the kernels of compile_time.py, written the Triton way.

    TRITON_CACHE_DIR=<empty dir> python benchmarks/compile_time_triton.py NAME

Prints the seconds of the first launch (compile, launcher build and the run itself, after
the CUDA context and the inputs are made), or "no triton" without Triton or a GPU.
"""

import sys
import time

try:
    import torch
    import triton
    import triton.language as tlang

    assert torch.cuda.is_available()
except Exception:
    print("no triton")
    sys.exit(0)


@triton.jit
def vector_add(x, y, out, n, TILE: tlang.constexpr):
    offs = tlang.program_id(0) * TILE + tlang.arange(0, TILE)
    tlang.store(out + offs, tlang.load(x + offs, mask=offs < n) + tlang.load(y + offs, mask=offs < n), mask=offs < n)


@triton.jit
def softmax_rows(x, out, n, BLOCK: tlang.constexpr):
    cols = tlang.arange(0, BLOCK)
    t = tlang.load(x + tlang.program_id(0) * n + cols, mask=cols < n, other=-float("inf"))
    e = tlang.exp(t - tlang.max(t, 0))
    tlang.store(out + tlang.program_id(0) * n + cols, e / tlang.sum(e, 0), mask=cols < n)


@triton.jit
def layernorm_rows(x, w, b, out, n, eps, BLOCK: tlang.constexpr):
    cols = tlang.arange(0, BLOCK)
    row = tlang.program_id(0) * n
    t = tlang.load(x + row + cols, mask=cols < n, other=0.0).to(tlang.float32)
    mean = tlang.sum(t, 0) / n
    d = tlang.where(cols < n, t - mean, 0.0)
    rstd = 1 / tlang.sqrt(tlang.sum(d * d, 0) / n + eps)
    y = d * rstd * tlang.load(w + cols, mask=cols < n).to(tlang.float32) + tlang.load(b + cols, mask=cols < n)
    tlang.store(out + row + cols, y.to(out.dtype.element_ty), mask=cols < n)


@triton.jit
def matmul(a, b, c, M, N, K, BM: tlang.constexpr, BN: tlang.constexpr, BK: tlang.constexpr):
    rm = tlang.program_id(0) * BM + tlang.arange(0, BM)
    rn = tlang.program_id(1) * BN + tlang.arange(0, BN)
    rk = tlang.arange(0, BK)
    acc = tlang.zeros((BM, BN), tlang.float32)
    for k in range(0, tlang.cdiv(K, BK)):
        kk = k * BK + rk
        x = tlang.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tlang.load(b + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tlang.dot(x, y, acc)
    tlang.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attention_forward(q, k, v, out, L, scale, BM: tlang.constexpr, BN: tlang.constexpr, D: tlang.constexpr):
    h, i = tlang.program_id(1), tlang.program_id(0)
    rm, rd = i * BM + tlang.arange(0, BM), tlang.arange(0, D)
    base = h * L * D
    qt = tlang.load(q + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < L, other=0.0)
    m = tlang.full((BM,), float("-inf"), tlang.float32)
    s_sum = tlang.zeros((BM,), tlang.float32)
    acc = tlang.zeros((BM, D), tlang.float32)
    for j in range(0, tlang.cdiv(L, BN)):
        rn = j * BN + tlang.arange(0, BN)
        kt = tlang.load(k + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < L, other=0.0)
        vt = tlang.load(v + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < L, other=0.0)
        s = tlang.where(rn[None, :] < L, tlang.dot(qt, tlang.trans(kt)) * scale, float("-inf"))
        m_new = tlang.maximum(m, tlang.max(s, 1))
        p = tlang.exp(s - m_new[:, None])
        alpha = tlang.exp(m - m_new)
        s_sum = s_sum * alpha + tlang.sum(p, 1)
        acc = tlang.dot(p.to(tlang.float16), vt, acc * alpha[:, None])
        m = m_new
    tlang.store(out + base + rm[:, None] * D + rd[None, :], (acc / s_sum[:, None]).to(tlang.float16),
                mask=rm[:, None] < L)  # fmt: skip


@triton.jit
def middle_sum(x, out, A, B, C, BA: tlang.constexpr, BB: tlang.constexpr, BC: tlang.constexpr):
    ra = tlang.program_id(0) * BA + tlang.arange(0, BA)
    rb, rc = tlang.arange(0, BB), tlang.program_id(1) * BC + tlang.arange(0, BC)
    at = ra[:, None, None] * B * C + rb[None, :, None] * C + rc[None, None, :]
    mask = (ra[:, None, None] < A) & (rb[None, :, None] < B) & (rc[None, None, :] < C)
    t = tlang.sum(tlang.load(x + at, mask=mask, other=0.0), 1)
    tlang.store(out + ra[:, None] * C + rc[None, :], t, mask=(ra[:, None] < A) & (rc[None, :] < C))


def _launch(name):
    cuda = torch.device("cuda")

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=cuda, dtype=dtype)

    if name == "vector_add":
        x = r(4096)
        return lambda: vector_add[(4,)](x, x, torch.empty_like(x), 4096, TILE=1024)
    if name == "softmax_1x4096":
        x = r(8, 4096)
        return lambda: softmax_rows[(8,)](x, torch.empty_like(x), 4096, BLOCK=4096)
    if name.startswith("layernorm_1x8192"):
        d = torch.bfloat16 if name.endswith("bf16") else torch.float32
        x, w = r(8, 8192, dtype=d), r(8192, dtype=d)
        return lambda: layernorm_rows[(8,)](x, w, w, torch.empty_like(x), 8192, 1e-5, BLOCK=8192)
    if name == "matmul_f16_128x128x32":
        a = r(256, 256, dtype=torch.float16)
        c = torch.empty(256, 256, device=cuda)
        return lambda: matmul[(2, 2)](a, a, c, 256, 256, 256, BM=128, BN=128, BK=32)
    if name.startswith("attention_fwd"):
        d = int(name.rsplit("_d", 1)[1])
        q = r(2, 256, d, dtype=torch.float16)
        return lambda: attention_forward[(4, 2)](q, q, q, torch.empty_like(q), 256, 0.125, BM=64, BN=64, D=d)
    if name == "sum_middle_axis_4x64x64":
        x, out = r(8, 64, 128), torch.empty(8, 128, device=cuda)
        return lambda: middle_sum[(2, 2)](x, out, 8, 64, 128, BA=4, BB=64, BC=64)
    raise SystemExit(f"unknown kernel {name}")


if __name__ == "__main__":
    launch = _launch(sys.argv[1])
    torch.cuda.synchronize()
    start = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    print(time.perf_counter() - start)
