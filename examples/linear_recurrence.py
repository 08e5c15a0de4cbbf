"""A linear recurrence along time, h[t] = a[t] * h[t-1] + x[t] (the scan of gated RNNs and
state-space models such as Mamba's, and exponential moving averages), in parallel over
time with ``tl.associative_scan``: the pairs (a, x) are maps ``h -> a*h + x``, and
composing two maps is associative (not commutative), so a scan of the compositions gives
every h[t] at once. Each block runs down one tile of channels, a chunk of time steps an
iteration, carrying the state h between chunks; ``reverse=True`` runs the same recurrence
from the end (h[t] = a[t] * h[t+1] + x[t], the backward pass's).

Run: python examples/linear_recurrence.py [--explain]
"""

import sys

import numpy as np

import tilelang as tl


def compose(a1, x1, a2, x2):  # h -> a1*h + x1, then h -> a2*h + x2
    return a1 * a2, x1 * a2 + x2


def first(p, q):
    return p


def last(p, q):
    return q


@tl.tile_kernel
def recurrence(a, x, h, T: tl.Constant, C: tl.Constant, REVERSE: tl.Constant = False):
    """h[t, c] for a (time, channels) array, from h = 0 before the first step."""
    j = tl.block_id(0)
    steps = tl.cdiv(a.shape[0], T)
    state = tl.zeros((1, C), tl.float32)  # h at the end of the previous chunk
    for k in tl.range(0, steps):
        chunk = steps - 1 - k if REVERSE else k
        ak = tl.load(a, index=(chunk, j), shape=(T, C), padding=1.0)
        xk = tl.load(x, index=(chunk, j), shape=(T, C))
        gain, hk = tl.associative_scan((ak, xk), 0, compose, reverse=REVERSE)
        hk = hk + gain * state  # the carried state through each step's product of gains
        tl.store(h, hk, index=(chunk, j))
        state = tl.reduce(hk, 0, first if REVERSE else last, keepdims=True)  # (padding steps keep h: a=1, x=0)


def reference(a, x, reverse=False):
    h, state = np.empty_like(x), np.zeros(x.shape[1], np.float64)
    for t in range(x.shape[0])[::-1] if reverse else range(x.shape[0]):
        state = a[t] * state + x[t]
        h[t] = state
    return h


def main(explain=False):
    rng = np.random.default_rng(0)
    steps, channels, tile_t, tile_c = 3000, 100, 64, 32
    a = rng.uniform(0.8, 1.0, (steps, channels)).astype(np.float32)  # decays: the state stays bounded
    x = rng.standard_normal((steps, channels)).astype(np.float32)
    for reverse in (False, True):
        h = np.zeros_like(x)
        recurrence[tl.cdiv(channels, tile_c)](a, x, h, T=tile_t, C=tile_c, REVERSE=reverse)
        np.testing.assert_allclose(h, reference(a, x, reverse), rtol=1e-4, atol=1e-4)
    print(f"linear recurrence over {steps} steps x {channels} channels, both directions, matches NumPy")
    if explain:
        print(tl.explain(recurrence, "f32[:, :]", "f32[:, :]", "f32[:, :]", T=tile_t, C=tile_c))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
