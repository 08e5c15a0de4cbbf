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


# keys and values copied one block ahead (2 stages; H200, fp16, 64x64 tiles, TFLOP/s: D=64 163 vs 159
# at 3 stages and 115 not copied ahead; D=128 173 vs 114 and 127)
@tl.tile_kernel(num_threads=128, num_stages=2)
def attention_forward(q, k, v, out, scale, CAUSAL: tl.Constant, BM: tl.Constant, BN: tl.Constant, D: tl.Constant):
    """q, out: (batch, heads, L, D); k, v: (batch, kv_heads, L, D). Grid: (cdiv(L, BM), heads, batch)."""
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
            visible = (cols <= rows) & (cols < length) if CAUSAL else cols < length
            s = tl.where(visible, s, float("-inf"))
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


# The fastest block shape depends on the head dim and the GPU (H200, fp16: 64 x 64 tiles at D = 64,
# 128 query rows over two warpgroups at D = 128): timed once per shape where a GPU runs it, the
# choice cached on disk (on the CPU the first config is taken). A config that does not fit the
# shared memory (64 x 128 tiles at D = 128) is skipped.
CONFIGS = [tl.Config(BM=bm, BN=bn, num_threads=2 * bm, num_stages=2) for bm, bn in ((64, 64), (128, 64), (64, 128))]
attention_tuned = tl.autotune(CONFIGS, key=["q", "k", "CAUSAL"])(attention_forward)


def attention(q, k, v, causal=False, scale=None, BM=None, BN=64):
    """softmax(q @ k^T * scale [+ causal mask]) @ v for (batch, heads, L, D) arrays (NumPy,
    or GPU arrays: torch, CuPy); returns an array of q's kind and dtype. Tile shapes: the
    tuned ones unless ``BM`` (and ``BN``) are given."""
    batch, heads, length, d = q.shape
    if heads % k.shape[1]:
        raise ValueError(f"attention: {heads} query heads are not a multiple of {k.shape[1]} key/value heads")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = q.new_empty(q.shape) if hasattr(q, "new_empty") else np.empty_like(q)
    if BM is None:
        grid = lambda args: (tl.cdiv(length, args["BM"]), heads, batch)  # noqa: E731
        attention_tuned[grid](q, k, v, out, scale, CAUSAL=causal, D=d)
    else:
        attention_forward[tl.cdiv(length, BM), heads, batch](q, k, v, out, scale, CAUSAL=causal, BM=BM, BN=BN, D=d)
    return out


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
    for causal in (False, True):
        error = check(attention(q, k, v, causal=causal), q, k, v, causal)
        print(f"attention {'causal' if causal else 'full'} {batch}x{heads}x{length}x{d} float16, {kv_heads} kv heads: "
              f"matches NumPy's float64 (max error {error:.2g})")  # fmt: skip
    if explain:
        out = np.empty_like(q)
        print(tl.explain(attention_forward, q, k, v, out, 0.125, CAUSAL=True, BM=64, BN=64, D=d))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
