"""Mixture-of-experts routing: for each token, a softmax over its router logits, the top K
experts and their weights renormalized to sum to 1, in one kernel. ``tl.topk`` keeps each
row's K largest probabilities (a stable sort, descending, cut to K columns) with the expert
ids moving along, so equal probabilities keep the lower expert id first, as NumPy's stable
argsort and ``torch.topk`` on distinct values.

Run: python examples/moe_routing.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel
def route(logits, weights, experts, K: tl.Constant, E: tl.Constant, ROWS: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(logits, index=(i, 0), shape=(ROWS, E), padding=float("-inf")).astype(tl.float32)
    p = tl.exp(t - tl.max(t, axis=1, keepdims=True))
    p = p / tl.sum(p, axis=1, keepdims=True)
    top, ids = tl.topk((p, tl.arange(0, E)[None, :]), K, axis=1)
    tl.store(weights, top / tl.sum(top, axis=1, keepdims=True), offset=(i * ROWS, 0))
    tl.store(experts, ids, offset=(i * ROWS, 0))


def reference(logits, k):
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(p, ids, axis=1)
    return top / top.sum(axis=1, keepdims=True), ids


def main(explain=False):
    rng = np.random.default_rng(0)
    tokens, num_experts, k, rows = 4099, 60, 2, 16
    logits = rng.standard_normal((tokens, num_experts)).astype(np.float32)
    weights, experts = np.zeros((tokens, k), np.float32), np.zeros((tokens, k), np.int32)
    route[tl.cdiv(tokens, rows)](logits, weights, experts, K=k, E=64, ROWS=rows)
    want_weights, want_experts = reference(logits.astype(np.float64), k)
    np.testing.assert_array_equal(experts, want_experts)
    np.testing.assert_allclose(weights, want_weights, rtol=1e-5, atol=1e-6)
    print(f"top-{k} routing of {tokens} tokens over {num_experts} experts matches NumPy")
    if explain:
        print(tl.explain(route, "f32[:, :]", "f32[:, :]", "i32[:, :]", K=k, E=64, ROWS=rows))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
