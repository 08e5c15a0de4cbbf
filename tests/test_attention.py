"""examples/attention.py's flash-attention forward against a float64 softmax(q k^T) v: sequence
lengths that are not tile multiples (also under one tile), causal and not, grouped-query
heads, float16 and bfloat16, on every test backend (the CPU backend runs the tensor-core
thread program: ldmatrix and mma.sync as warp collectives)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_examples import _load

import tilelang as tl
from tilelang import testing as tlt

attention = _load("attention")

SHAPES = st.tuples(st.integers(1, 2), st.sampled_from([(1, 1), (2, 1), (4, 2)]), st.integers(1, 140))


def run(backend, q, k, v, causal, D, BM=64, BN=64):
    batch, heads, length, _ = q.shape
    out = np.full_like(q, np.nan)
    grid = (tl.cdiv(length, BM), heads, batch)
    attention.attention_forward[grid](q, k, v, out, 1 / math.sqrt(D), CAUSAL=causal, BM=BM, BN=BN, D=D,
                                      backend=backend)  # fmt: skip
    return out


@pytest.mark.parametrize("backend", tlt.default_backends())
@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@settings(max_examples=4, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 2**31 - 1))
def test_forward_matches_float64(backend, dtype, causal, shape, seed):
    batch, (heads, kv_heads), length = shape
    rng = np.random.default_rng(seed)
    q = (2 * rng.standard_normal((batch, heads, length, 64))).astype(dtype.np)  # scores of a few units
    k, v = (rng.standard_normal((batch, kv_heads, length, 64)).astype(dtype.np) for _ in range(2))
    attention.check(run(backend, q, k, v, causal, 64), q, k, v, causal)


def test_head_dim_32_and_smaller_tiles():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 77, 32)).astype(np.float16) for _ in range(3))
    attention.check(run("cpu", q, k, v, True, 32, BM=32, BN=16), q, k, v, causal=True)


def test_the_check_catches_a_wrong_mask():
    """The bound is tight enough that full attention is not mistaken for causal attention."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 1, 40, 64)).astype(np.float16) for _ in range(3))
    with pytest.raises(AssertionError, match="exceeds its bound"):
        attention.check(run("interpret", q, k, v, False, 64), q, k, v, causal=True)


def test_heads_must_group():
    q, k = np.zeros((1, 3, 8, 64), np.float16), np.zeros((1, 2, 8, 64), np.float16)
    with pytest.raises(ValueError, match="not a multiple"):
        attention.attention(q, k, k)
