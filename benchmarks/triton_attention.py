"""A fused attention forward written the way Triton's tutorial writes it, the peer
benchmarks/attention.py compares examples/attention.py with (issue 15: >= 1.0x it).

One program per (query block, batch x head); an online softmax in exp2 with the scale
folded in; the key blocks every query of the block sees whole in a loop without masks, the
rest (the sequence's end, the causal diagonal) in a masked one; tuned over configs of the
tutorial's kind. Needs triton (imported here, at the top).
"""

from __future__ import annotations

import math

import triton
import triton.language as tt


@triton.jit
def _key_block(m, total, acc, q, K, V, base, start, rows, cols, L, scale2, D: tt.constexpr, BN: tt.constexpr,
               MASKED: tt.constexpr, CAUSAL: tt.constexpr):  # fmt: skip
    """The online softmax over the keys ``start .. start + BN``."""
    keys = start + tt.arange(0, BN)
    if MASKED:
        kt = tt.load(K + base + keys[None, :] * D + cols[:, None], mask=keys[None, :] < L, other=0.0)
        vt = tt.load(V + base + keys[:, None] * D + cols[None, :], mask=keys[:, None] < L, other=0.0)
    else:
        kt = tt.load(K + base + keys[None, :] * D + cols[:, None])
        vt = tt.load(V + base + keys[:, None] * D + cols[None, :])
    s = tt.dot(q, kt) * scale2
    if MASKED:
        shown = keys[None, :] < L
        if CAUSAL:
            shown = shown & (keys[None, :] <= rows[:, None])
        s = tt.where(shown, s, float("-inf"))
    m_new = tt.maximum(m, tt.max(s, 1))
    p = tt.math.exp2(s - m_new[:, None])
    alpha = tt.math.exp2(m - m_new)
    total = total * alpha + tt.sum(p, 1)
    acc = tt.dot(p.to(vt.dtype), vt, acc * alpha[:, None])
    return m_new, total, acc


@triton.autotune(
    [
        triton.Config({"BM": bm, "BN": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 4))
    ],
    key=["L", "D", "CAUSAL"],
)
@triton.jit
def _forward(Q, K, V, O, scale, L, D: tt.constexpr, CAUSAL: tt.constexpr, BM: tt.constexpr, BN: tt.constexpr):
    i, bh = tt.program_id(0), tt.program_id(1)
    base = bh.to(tt.int64) * L * D
    rows, cols = i * BM + tt.arange(0, BM), tt.arange(0, D)
    q = tt.load(Q + base + rows[:, None] * D + cols[None, :], mask=rows[:, None] < L, other=0.0)
    m = tt.full((BM,), float("-inf"), tt.float32)
    total = tt.zeros((BM,), tt.float32)
    acc = tt.zeros((BM, D), tt.float32)
    scale2 = scale * 1.4426950408889634  # log2(e)
    whole = L // BN * BN  # keys every query here sees, whole blocks of them
    end = L
    if CAUSAL:
        whole = tt.minimum(L, i * BM + 1) // BN * BN
        end = tt.minimum(L, (i + 1) * BM)
    for start in range(0, whole, BN):
        m, total, acc = _key_block(m, total, acc, q, K, V, base, start, rows, cols, L, scale2, D, BN, False, CAUSAL)
    for start in range(whole, end, BN):
        m, total, acc = _key_block(m, total, acc, q, K, V, base, start, rows, cols, L, scale2, D, BN, True, CAUSAL)
    out = acc / total[:, None]
    tt.store(O + base + rows[:, None] * D + cols[None, :], out.to(O.dtype.element_ty), mask=rows[:, None] < L)


def attention(q, k, v, causal=False):
    """softmax(q @ k.T / sqrt(D) [causal mask]) @ v for contiguous (batch, heads, L, D) tensors."""
    batch, heads, length, d = q.shape
    out = q.new_empty(q.shape)
    grid = lambda meta: (triton.cdiv(length, meta["BM"]), batch * heads)  # noqa: E731
    _forward[grid](q, k, v, out, 1 / math.sqrt(d), length, D=d, CAUSAL=causal)
    return out
