"""Flash-attention forward: softmax(q @ k.T * scale) @ v in one kernel, never storing the scores.

Each block takes BM queries of one (batch, head) and walks the keys BN at a time with an
online softmax: a running row maximum ``m``, the running sum of exponentials ``l`` and an
unnormalised output ``acc``, rescaled by ``exp2(m_old - m_new)`` whenever the maximum grows.
Both products run on tensor cores (16-bit q, k, v; float32 scores and accumulators);
``k.T`` is read transposed from shared memory at no cost. Features it uses, all general:

- ``causal=True``: the key loop stops at the block's last query (``tl.range`` with a bound
  computed from the block id), and the diagonal block masks ``key > query`` with an
  ``arange`` comparison;
- the mask only where a key may be hidden: one step of the online softmax is a Python
  function, called by a loop over the key blocks every query sees whole (no mask) and by one
  over the rest (the end of the sequence, the diagonal);
- grouped-query attention: ``k`` and ``v`` may have fewer heads than ``q`` (each serves
  ``q_heads // kv_heads`` query heads);
- any sequence length: keys past the end are masked, queries past it are not stored.

Run: python examples/attention.py [--explain]
"""

import math
import sys

import numpy as np

import tilelang as tl

LOG2E = 1.4426950408889634


def visible(rows, cols, length, causal):
    """Which (query, key) scores exist: the key before the sequence's end and, when causal, not
    after the query (``rows`` and ``cols``: positions, a column and a row)."""
    return (cols <= rows) & (cols < length) if causal else cols < length


# keys and values copied one block ahead (2 stages; H200, fp16, 64x64 tiles, TFLOP/s: D=64 163 vs 159
# at 3 stages and 115 not copied ahead; D=128 173 vs 114 and 127)
@tl.tile_kernel(num_threads=128, num_stages=2)
def attention_forward(q, k, v, out, lse, scale, CAUSAL: tl.Constant, BM: tl.Constant, BN: tl.Constant, D: tl.Constant):
    """q, out: (batch, heads, L, D); k, v: (batch, kv_heads, L, D); lse: (batch, heads, L) float32, each
    query's log2-sum-exp2 of its scaled scores (the backward pass's softmax). Grid: (cdiv(L, BM), heads, batch)."""
    i, h, b = tl.block_id(0), tl.block_id(1), tl.block_id(2)
    length = q.shape[2]
    kv = h // (q.shape[1] // k.shape[1])  # the key/value head this query head reads
    qt = tl.load(q, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    rows = i * BM + tl.arange(0, BM)[:, None]  # each query's position
    m = tl.full((BM,), float("-inf"), tl.float32)
    l_sum = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    scale2 = scale * LOG2E  # exp(x * scale) = exp2(x * scale * log2(e))

    def key_block(j, m, l_sum, acc, masked):
        """The online softmax over key block ``j``; ``masked``: some of its keys are hidden
        (past the end, or after a query on the diagonal), else none is (no compare, no select)."""
        kt = tl.load(k, index=(b, kv, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        vt = tl.load(v, index=(b, kv, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        s = tl.dot(qt, kt.T)
        if masked:
            cols = j * BN + tl.arange(0, BN)[None, :]  # each key's position
            s = tl.where(visible(rows, cols, length, CAUSAL), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1) * scale2)  # (scale2 > 0: the maximum of the scaled scores)
        p = tl.exp2(s * scale2 - m_new[:, None], flush_to_zero=True)  # an fma and an ex2 a score
        alpha = tl.exp2(m - m_new, flush_to_zero=True)  # (0 on the first block: m is -inf)
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        return m_new, l_sum, tl.dot(p.astype(qt.dtype), vt, acc * alpha[:, None])

    # the key blocks every query here sees whole, then the others (the end, the diagonal)
    whole = (tl.minimum(length, i * BM + 1) if CAUSAL else length) // BN
    last = tl.minimum(length, (i + 1) * BM) if CAUSAL else length  # keys any query here may see
    for j in tl.range(0, whole):
        m, l_sum, acc = key_block(j, m, l_sum, acc, masked=False)
    for j in tl.range(whole, tl.cdiv(last, BN)):
        m, l_sum, acc = key_block(j, m, l_sum, acc, masked=True)
    o = (acc / l_sum[:, None]).astype(out.dtype).reshape((1, 1, BM, D))
    tl.store(out, o, index=(b, h, i, 0))
    tl.store(lse, (m + tl.log2(l_sum)).reshape((1, 1, BM)), index=(b, h, i))


# ------------------------------------------------------------------ backward
# The scores are recomputed from q and k (never stored), the probabilities from them and the
# forward's lse; two kernels: dq (and delta = rowsum(dout * out), per query block), then dk
# and dv (per key block, over the query blocks and the query heads that read it).


def probabilities(s, lse, scale2, shown=None):
    """The forward's softmax over one key block of its scores ``s``, from each query's
    log2-sum-exp2 ``lse`` (0 where not ``shown``, when given)."""
    s = s * scale2 - lse[:, None]
    return tl.exp2(s if shown is None else tl.where(shown, s, float("-inf")), flush_to_zero=True)


# Neither kernel masks the sequence's end: rows of q, dout, k, v (and lse, delta) past it load
# as 0, so what they meet adds 0 to every gradient (dout = 0 makes dv's and ds's terms 0, k = 0
# dq's), and the rows of dk, dv past it are not stored. Only the causal diagonal is masked.


@tl.tile_kernel(num_threads=128, num_stages=2)
def attention_backward_dq(q, k, v, out, dout, lse, delta, dq, scale, CAUSAL: tl.Constant, BM: tl.Constant,
                          BN: tl.Constant, D: tl.Constant):  # fmt: skip
    """dq of one (head, query block), and its rows' delta. Grid: (cdiv(L, BM), heads, batch)."""
    i, h, b = tl.block_id(0), tl.block_id(1), tl.block_id(2)
    length, scale2 = q.shape[2], scale * LOG2E
    kv = h // (q.shape[1] // k.shape[1])
    qt = tl.load(q, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    do = tl.load(dout, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    ot = tl.load(out, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    dlt = tl.sum(do.astype(tl.float32) * ot.astype(tl.float32), axis=1)  # = rowsum(p * dp)
    tl.store(delta, dlt.reshape((1, 1, BM)), index=(b, h, i))
    lse_i = tl.load(lse, index=(b, h, i), shape=(1, 1, BM)).reshape((BM,))
    rows = i * BM + tl.arange(0, BM)[:, None]

    def key_block(j, dq_acc, masked):
        """dq's terms from key block ``j`` (``masked``: on the causal diagonal)."""
        kt = tl.load(k, index=(b, kv, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        vt = tl.load(v, index=(b, kv, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        s = tl.dot(qt, kt.T)
        dp = tl.dot(do, vt.T)  # (the tensor cores run it while the probabilities are computed)
        shown = visible(rows, j * BN + tl.arange(0, BN)[None, :], length, CAUSAL) if masked else None
        p = probabilities(s, lse_i, scale2, shown)
        ds = p * (dp - dlt[:, None])  # d(loss)/d(score), over scale
        return tl.dot(ds.astype(qt.dtype), kt, dq_acc)

    dq_acc = tl.zeros((BM, D), tl.float32)
    ends = tl.cdiv(tl.minimum(length, (i + 1) * BM), BN) if CAUSAL else tl.cdiv(length, BN)
    whole = (i * BM + 1) // BN if CAUSAL else ends  # key blocks before the diagonal
    for j in tl.range(0, whole):
        dq_acc = key_block(j, dq_acc, masked=False)
    for j in tl.range(whole, ends):
        dq_acc = key_block(j, dq_acc, masked=True)
    tl.store(dq, (dq_acc * scale).astype(dq.dtype).reshape((1, 1, BM, D)), index=(b, h, i, 0))


@tl.tile_kernel(num_threads=128, num_stages=2)
def attention_backward_dkdv(q, k, v, dout, lse, delta, dk, dv, scale, CAUSAL: tl.Constant, BM: tl.Constant,
                            BN: tl.Constant, D: tl.Constant):  # fmt: skip
    """dk, dv of one (key/value head, key block), summed over the query heads of its group and
    their query blocks (those before the block see none of it when causal). Grid:
    (cdiv(L, BN), kv_heads, batch)."""
    j, hk, b = tl.block_id(0), tl.block_id(1), tl.block_id(2)
    length, scale2, group = q.shape[2], scale * LOG2E, q.shape[1] // k.shape[1]
    kt = tl.load(k, index=(b, hk, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
    vt = tl.load(v, index=(b, hk, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
    cols = j * BN + tl.arange(0, BN)[None, :]

    def query_block(h, i, dk_acc, dv_acc, masked):
        """dk's and dv's terms from query block ``i`` of head ``h`` (``masked``: on the diagonal)."""
        qt = tl.load(q, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
        do = tl.load(dout, index=(b, h, i, 0), shape=(1, 1, BM, D)).reshape((BM, D))
        lse_i = tl.load(lse, index=(b, h, i), shape=(1, 1, BM)).reshape((BM,))
        dlt = tl.load(delta, index=(b, h, i), shape=(1, 1, BM)).reshape((BM,))
        s = tl.dot(qt, kt.T)
        dp = tl.dot(do, vt.T)  # (the tensor cores run it while the probabilities are computed)
        shown = visible(i * BM + tl.arange(0, BM)[:, None], cols, length, CAUSAL) if masked else None
        p = probabilities(s, lse_i, scale2, shown)
        dv_acc = tl.dot(p.T.astype(qt.dtype), do, dv_acc)
        ds = p * (dp - dlt[:, None])
        return tl.dot(ds.T.astype(qt.dtype), qt, dk_acc), dv_acc

    dk_acc = tl.zeros((BN, D), tl.float32)
    dv_acc = tl.zeros((BN, D), tl.float32)
    blocks = tl.cdiv(length, BM)
    first = j * BN // BM if CAUSAL else 0  # (causal: the blocks before see none of these keys)
    whole = tl.minimum(tl.cdiv((j + 1) * BN - 1, BM), blocks) if CAUSAL else 0  # from here past the diagonal
    for g in tl.range(0, group):
        for i in tl.range(first, whole):
            dk_acc, dv_acc = query_block(hk * group + g, i, dk_acc, dv_acc, masked=True)
        for i in tl.range(whole, blocks):
            dk_acc, dv_acc = query_block(hk * group + g, i, dk_acc, dv_acc, masked=False)
    tl.store(dk, (dk_acc * scale).astype(dk.dtype).reshape((1, 1, BN, D)), index=(b, hk, j, 0))
    tl.store(dv, dv_acc.astype(dv.dtype).reshape((1, 1, BN, D)), index=(b, hk, j, 0))


# Backward block shapes, tuned as the forward's are (H200, fp16, 8 x heads x 4096, ms, 2026-12-04): dq
# over 128 query rows (two warpgroups) and 64 keys at D = 64 (full 3.01 vs 3.09 at 64 x 64; causal
# 64 x 64 wins, 1.74 vs 2.06), 128 keys at D = 128 (2.67 vs 2.81); dk/dv over 128 keys and 128 queries
# at D = 64 (5.31 vs 5.62 at 64 x 64), 128 keys and 64 queries at D = 128 (4.67 vs 5.81 at 64 x 64;
# both timed while dk/dv spilled, before k and v were stored once, before the loop over the query heads).
# On the CPU the first config is taken.
DQ_CONFIGS = [tl.Config(BM=m, BN=n, num_threads=2 * m, num_stages=2) for m, n in ((128, 64), (64, 64), (128, 128))]
DKDV_CONFIGS = [tl.Config(BM=m, BN=n, num_threads=2 * n, num_stages=2) for m, n in ((64, 64), (64, 128), (128, 128))]
backward_dq_tuned = tl.autotune(DQ_CONFIGS, key=["q", "k", "CAUSAL"])(attention_backward_dq)
backward_dkdv_tuned = tl.autotune(DKDV_CONFIGS, key=["q", "k", "CAUSAL"])(attention_backward_dkdv)


def attention_backward(q, k, v, out, lse, dout, causal=False, scale=None):
    """(dq, dk, dv): the gradients of ``sum(attention(q, k, v) * dout)``, from the forward's
    ``out`` and ``lse`` (``attention(..., with_lse=True)``); arrays of q's kind and dtype."""
    batch, heads, length, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dq, dk, dv = _empty_like(q, q.shape), _empty_like(k, k.shape), _empty_like(v, v.shape)
    delta = _empty_like(q, q.shape[:3], "float32")
    grid = lambda args: (tl.cdiv(length, args["BM"]), heads, batch)  # noqa: E731
    backward_dq_tuned[grid](q, k, v, out, dout, lse, delta, dq, scale, CAUSAL=causal, D=d)
    grid = lambda args: (tl.cdiv(length, args["BN"]), k.shape[1], batch)  # noqa: E731
    backward_dkdv_tuned[grid](q, k, v, dout, lse, delta, dk, dv, scale, CAUSAL=causal, D=d)
    return dq, dk, dv


# The fastest block shape depends on the head dim and the GPU (H200: 128 query rows over two
# warpgroups, 64 keys a block at D = 64 and 128 at D = 128, TFLOP/s fp16 full 483.6 vs 444.9 at 64,
# causal 439.1 vs 397.7): timed once per shape where a GPU runs it, the choice cached on disk (on
# the CPU the first config is taken). A config a shape cannot take (64 x 128 tiles at D = 128:
# 128 elements of a key block a thread) is skipped. The key loop's copies come after q @ k.T (its
# wait completes the iteration before's p @ v, left in flight across the iteration's end), or
# first in the iteration (``copies_first``: longer to land, the two products apart): H200, fp16,
# TFLOP/s, after vs first, D = 64 64 x 128 full 436 vs 426, causal 447 vs 353; D = 128
# 128 x 128 full 480 vs 525, causal 446 vs 448.
CONFIGS = [
    tl.Config(BM=bm, BN=bn, num_threads=2 * bm, num_stages=2) for bm, bn in ((64, 64), (128, 64), (64, 128), (128, 128))
] + [tl.Config(BM=128, BN=128, num_threads=256, num_stages=2, copies_first=True)]
attention_tuned = tl.autotune(CONFIGS, key=["q", "k", "CAUSAL"])(attention_forward)


def attention(q, k, v, causal=False, scale=None, BM=None, BN=64, with_lse=False):
    """softmax(q @ k^T * scale [+ causal mask]) @ v for (batch, heads, L, D) arrays (NumPy,
    or GPU arrays: torch, CuPy); returns an array of q's kind and dtype (and, ``with_lse``,
    the float32 (batch, heads, L) log2-sum-exp2 the backward pass takes). Tile shapes: the
    tuned ones unless ``BM`` (and ``BN``) are given."""
    batch, heads, length, d = q.shape
    if heads % k.shape[1]:
        raise ValueError(f"attention: {heads} query heads are not a multiple of {k.shape[1]} key/value heads")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out, lse = _empty_like(q, q.shape), _empty_like(q, q.shape[:3], "float32")
    if BM is None:
        grid = lambda args: (tl.cdiv(length, args["BM"]), heads, batch)  # noqa: E731
        attention_tuned[grid](q, k, v, out, lse, scale, CAUSAL=causal, D=d)
    else:
        grid = (tl.cdiv(length, BM), heads, batch)
        attention_forward[grid](q, k, v, out, lse, scale, CAUSAL=causal, BM=BM, BN=BN, D=d)
    return (out, lse) if with_lse else out


def _empty_like(x, shape, dtype=None):
    """An uninitialised array of ``x``'s kind (NumPy, CuPy, torch) and dtype, or ``dtype`` (a name)."""
    if hasattr(x, "new_empty"):  # torch
        import torch

        return x.new_empty(shape, dtype=getattr(torch, dtype) if dtype else x.dtype)
    xp = sys.modules[type(x).__module__.split(".")[0]]  # numpy or cupy
    return xp.empty(shape, dtype or x.dtype)


def reference(q, k, v, causal=False, scale=None):
    """The float64 attention, and the float64 magnitude |softmax| @ |v| that bounds its rounding."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ np.swapaxes(k, -1, -2) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        length = q.shape[2]
        s = np.where(np.tril(np.ones((length, length), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v, p @ np.abs(v)


def reference_backward(q, k, v, dout, causal=False, scale=None):
    """float64 (dq, dk, dv) of ``sum(attention(q, k, v) * dout)``, and for each the float64
    magnitude of its terms (absolute values throughout) that bounds its rounding."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    group, length = q.shape[1] // k.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kx, vx = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ np.swapaxes(kx, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones((length, length), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = do @ np.swapaxes(vx, -1, -2)
    delta = (do * (p @ vx)).sum(axis=-1, keepdims=True)
    # (delta is computed from the 16-bit rounded output: its error is eps * rowsum(|do| * |out|))
    ds, ds_size = p * (dp - delta), p * (np.abs(dp) + (np.abs(do) * np.abs(p @ vx)).sum(axis=-1, keepdims=True))
    pt, dst, dst_size = (np.swapaxes(x, -1, -2) for x in (p, ds, ds_size))

    def per_kv_head(x):  # the query heads of a group add into their key/value head
        return x.reshape(x.shape[0], -1, group, *x.shape[2:]).sum(axis=2)

    grads = (ds @ kx * scale, per_kv_head(dst @ q * scale), per_kv_head(pt @ do))
    sizes = (ds_size @ np.abs(kx) * scale, per_kv_head(dst_size @ np.abs(q) * scale), per_kv_head(pt @ np.abs(do)))
    return grads, sizes


def check_backward(got, q, k, v, dout, causal=False):
    """Raises unless each of ``got`` (dq, dk, dv) is within the rounding of 16-bit operands:
    the probabilities and dscores rounded to q's dtype before their products (relative eps
    each), the result rounded once, float32 sums (negligible); returns the largest errors."""
    eps = float(np.finfo(np.float16).eps) if q.dtype == np.float16 else 2.0**-7  # (bfloat16)
    errors = []
    for name, g, want, size in zip(("dq", "dk", "dv"), got, *reference_backward(q, k, v, dout, causal)):
        error = np.abs(np.asarray(g, np.float64) - want)
        bound = 8 * eps * (size + np.abs(want)) + 1e-6
        if not np.all(error <= bound):
            worst = np.unravel_index(np.argmax(error - bound), error.shape)
            raise AssertionError(
                f"attention {name}: error {error[worst]:.3g} at {worst} exceeds its bound {bound[worst]:.3g}"
            )
        errors.append(float(error.max()))
    return errors


def check(got, q, k, v, causal=False):
    """Raises unless ``got`` is within the rounding of 16-bit inputs to 16-bit output:
    probabilities rounded to q's dtype before the second product (relative eps each), the
    output rounded once (eps of |out|), float32 sums (negligible next to them)."""
    want, magnitude = reference(q, k, v, causal)
    eps = float(np.finfo(np.float16).eps) if q.dtype == np.float16 else 2.0**-7  # (bfloat16)
    error = np.abs(np.asarray(got, np.float64) - want)
    bound = 4 * eps * (magnitude + np.abs(want)) + 1e-6
    if not np.all(error <= bound):
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        raise AssertionError(f"attention: error {error[worst]:.3g} at {worst} exceeds its bound {bound[worst]:.3g}")
    return float(error.max())


def main(explain=False):
    rng = np.random.default_rng(0)
    batch, heads, kv_heads, length, d = 1, 4, 2, 100, 64  # 100: not a multiple of the 64-row tiles
    q = rng.standard_normal((batch, heads, length, d)).astype(np.float16)
    k, v = (rng.standard_normal((batch, kv_heads, length, d)).astype(np.float16) for _ in range(2))
    dout = rng.standard_normal(q.shape).astype(np.float16)
    for causal in (False, True):
        out, lse = attention(q, k, v, causal=causal, with_lse=True)
        error = check(out, q, k, v, causal)
        print(f"attention {'causal' if causal else 'full'} {batch}x{heads}x{length}x{d} float16, {kv_heads} kv heads: "
              f"matches NumPy's float64 (max error {error:.2g})")  # fmt: skip
        errors = check_backward(attention_backward(q, k, v, out, lse, dout, causal=causal), q, k, v, dout, causal)
        print(f"  its dq, dk, dv match NumPy's float64 gradients (max errors {', '.join(f'{e:.2g}' for e in errors)})")
    if explain:
        out, lse = np.empty_like(q), np.empty(q.shape[:3], np.float32)
        print(tl.explain(attention_forward, q, k, v, out, lse, 0.125, CAUSAL=True, BM=64, BN=64, D=d))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
