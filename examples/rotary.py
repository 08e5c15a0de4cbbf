"""Rotary position embedding (RoPE) of queries or keys, in both of its layouts: each pair of
features of a head is rotated by its token's angle. GPT-J pairs neighbours (x[2j], x[2j+1]):
``tl.split`` takes a row apart into its even and odd features and ``tl.join`` puts the
rotated pairs back, each pair staying in one thread's registers. GPT-NeoX and Llama pair the
two halves (x[j], x[j + D/2]): slices of the tile take them, and two stores write them back.

Run: python examples/rotary.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


@tl.tile_kernel
def rope(x, cos, sin, out, H: tl.Constant, D: tl.Constant, INTERLEAVED: tl.Constant):
    """x, out: (tokens, H, D); cos, sin: (tokens, D/2), the angles of each token's pairs."""
    i = tl.block_id(0)  # one token, all its heads
    t = tl.load(x, index=(i, 0, 0), shape=(1, H, D)).reshape((H, D)).astype(tl.float32)
    c = tl.load(cos, index=(i, 0), shape=(1, D // 2))
    s = tl.load(sin, index=(i, 0), shape=(1, D // 2))
    if INTERLEAVED:
        a, b = tl.split(t.reshape((H, D // 2, 2)))
        rotated = tl.join(a * c - b * s, a * s + b * c).reshape((1, H, D))
        tl.store(out, rotated.astype(out.dtype), index=(i, 0, 0))
    else:
        a, b = t[:, : D // 2], t[:, D // 2 :]
        tl.store(out, (a * c - b * s)[None].astype(out.dtype), offset=(i, 0, 0))
        tl.store(out, (a * s + b * c)[None].astype(out.dtype), offset=(i, 0, D // 2))


def reference(x, cos, sin, interleaved):
    x = x.astype(np.float64)
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else np.split(x, 2, axis=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    p, q = a * c - b * s, a * s + b * c
    return np.stack([p, q], axis=-1).reshape(x.shape) if interleaved else np.concatenate([p, q], axis=-1)


def main(explain=False):
    rng = np.random.default_rng(0)
    tokens, heads, dim = 300, 8, 128
    x = rng.standard_normal((tokens, heads, dim)).astype(np.float32)
    angles = np.arange(tokens)[:, None] * 10000.0 ** (-np.arange(dim // 2) / (dim // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    for interleaved in (True, False):
        out = np.zeros_like(x)
        rope[tokens](x, cos, sin, out, H=heads, D=dim, INTERLEAVED=interleaved)
        np.testing.assert_allclose(out, reference(x, cos, sin, interleaved), rtol=1e-5, atol=1e-5)
    print(f"rotary embedding of {tokens} tokens x {heads} heads x {dim}, both pairings, matches NumPy")
    if explain:
        print(
            tl.explain(rope, "f32[:, :, :]", "f32[:, :]", "f32[:, :]", "f32[:, :, :]", H=heads, D=dim, INTERLEAVED=True)
        )


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
