"""examples/attention.py's flash-attention forward against a float64 softmax(q k^T) v: sequence
lengths that are not tile multiples (also under one tile), causal and not, grouped-query
heads, float16 and bfloat16, on every test backend (the CPU backend runs the tensor-core
thread program: ldmatrix and mma.sync as warp collectives)."""

import math
import os
import re
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_examples import _load

import tilelang as tl
from tilelang import testing as tlt

attention = _load("attention")

HEADS = st.sampled_from([(1, 1), (2, 1), (4, 2)])  # (query heads, key/value heads)
SHAPES = st.tuples(st.integers(1, 2), HEADS, st.integers(1, 140))


def run(backend, q, k, v, causal, D, BM=64, BN=64):
    batch, heads, length, _ = q.shape
    out = np.full_like(q, np.nan)
    grid = (tl.cdiv(length, BM), heads, batch)
    lse = np.full(q.shape[:3], np.nan, np.float32)
    attention.attention_forward[grid](q, k, v, out, lse, 1 / math.sqrt(D), CAUSAL=causal, BM=BM, BN=BN, D=D,
                                      backend=backend)  # fmt: skip
    return out, lse


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
    out, lse = run(backend, q, k, v, causal, 64)
    attention.check(out, q, k, v, causal)
    # lse: each query's log2-sum-exp2 of its scaled scores (the backward's softmax)
    s = q.astype(np.float64) @ np.swapaxes(np.repeat(k, heads // kv_heads, axis=1).astype(np.float64), -1, -2) / 8
    if causal:
        s = np.where(np.tril(np.ones((length, length), bool)), s, -np.inf)
    top = s.max(axis=-1)
    want = (top + np.log(np.exp(s - top[..., None]).sum(axis=-1))) / math.log(2)
    np.testing.assert_allclose(lse, want, rtol=0, atol=1e-3)


def test_head_dim_32_and_smaller_tiles():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 77, 32)).astype(np.float16) for _ in range(3))
    attention.check(run("cpu", q, k, v, True, 32, BM=32, BN=16)[0], q, k, v, causal=True)


def test_the_check_catches_a_wrong_mask():
    """The bound is tight enough that full attention is not mistaken for causal attention."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 1, 40, 64)).astype(np.float16) for _ in range(3))
    with pytest.raises(AssertionError, match="exceeds its bound"):
        attention.check(run("interpret", q, k, v, False, 64)[0], q, k, v, causal=True)


def test_heads_must_group():
    q, k = np.zeros((1, 3, 8, 64), np.float16), np.zeros((1, 2, 8, 64), np.float16)
    with pytest.raises(ValueError, match="not a multiple"):
        attention.attention(q, k, k)


def gradients(backend, q, k, v, dout, causal):
    """The example's forward (for out and lse), then its backward, on ``backend``."""
    length, d = q.shape[2], q.shape[3]
    out, lse = np.full_like(q, np.nan), np.full(q.shape[:3], np.nan, np.float32)
    grid = (tl.cdiv(length, 64), q.shape[1], q.shape[0])
    attention.attention_forward[grid](q, k, v, out, lse, 1 / math.sqrt(d), CAUSAL=causal, BM=64, BN=64, D=d,
                                      backend=backend)  # fmt: skip
    with mock.patch.dict(os.environ, {"TILELANG_BACKEND": backend}):  # (the backward's launches take the default)
        return attention.attention_backward(q, k, v, out, lse, dout, causal=causal)


# the CPU backend compiles three kernels per dtype and mask (~40 s on 2 cores): float16 there,
# both dtypes on the interpreter
BACKWARD_CASES = [(b, d) for b in tlt.default_backends() for d in (tl.float16, tl.bfloat16)
                  if b == "interpret" or d == tl.float16]  # fmt: skip


@pytest.mark.parametrize("backend, dtype", BACKWARD_CASES, ids=[f"{b}-{d.name}" for b, d in BACKWARD_CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@settings(max_examples=2, deadline=None)
@given(shape=st.tuples(st.just(1), HEADS, st.integers(1, 140)), seed=st.integers(0, 2**31 - 1))
def test_backward_matches_float64(backend, dtype, causal, shape, seed):
    """dq, dk, dv against float64 gradients: lengths that are not tile multiples, key/value
    heads shared by groups of query heads (their dk, dv summed), causal and not."""
    batch, (heads, kv_heads), length = shape
    rng = np.random.default_rng(seed)
    q = (2 * rng.standard_normal((batch, heads, length, 64))).astype(dtype.np)
    k, v = (rng.standard_normal((batch, kv_heads, length, 64)).astype(dtype.np) for _ in range(2))
    dout = rng.standard_normal((batch, heads, length, 64)).astype(dtype.np)
    attention.check_backward(gradients(backend, q, k, v, dout, causal), q, k, v, dout, causal)


def test_the_backward_check_catches_a_wrong_mask():
    """Full attention's gradients are not mistaken for causal attention's."""
    rng = np.random.default_rng(3)
    q, k, v, dout = (rng.standard_normal((1, 1, 40, 64)).astype(np.float16) for _ in range(4))
    with pytest.raises(AssertionError, match="exceeds its bound"):
        attention.check_backward(gradients("interpret", q, k, v, dout, False), q, k, v, dout, causal=True)


def test_the_backward_compiles_to_warpgroup_tensor_cores():
    """sm_90 PTX with no GPU: every product of both backward kernels (the transposed ``p.T``
    and ``ds.T`` too; each kernel has two loops, the diagonal's and the rest) is a wgmma, and
    none is serialized by a subroutine call."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    for kernel, args, dots in ((attention.attention_backward_dq, (q, q, q, q, q, lse, lse, q), 2 * 3),
                               (attention.attention_backward_dkdv, (q, q, q, q, lse, lse, q, q), 2 * 4)):  # fmt: skip
        e = tl.explain(kernel, *args, 0.125, CAUSAL=True, BM=64, BN=64, D=64, backend="cuda")
        assert e["layouts"].count("tensor cores, wgmma") == dots, e["layouts"]
        assert "wgmma.mma_async" in e["ptx"] and "serialized" not in e["resources"], e["resources"]


def test_the_backward_keeps_its_tiles_in_registers():
    """At D = 128 the dq kernel unpacks three 64-slot 16-bit tiles in one loop over slots: cut
    where NVVM would leave it rolled (it did: 1664 bytes of local memory), it has no stack."""
    q, lse = np.zeros((1, 2, 256, 128), np.float16), np.zeros((1, 2, 256), np.float32)
    e = tl.explain(attention.attention_backward_dq, q, q, q, q, q, lse, lse, q, 0.125, CAUSAL=True, BM=64, BN=64,
                   D=128, backend="cuda")  # fmt: skip
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def test_the_forward_loops_share_one_pipeline():
    """The unmasked and the masked key loop run one after the other over the same copies: the
    first's copies run on into the second's iterations (one ring, one set of mbarriers, no
    drain or prologue between), so 128 x 128 tiles at D = 128 fit (two 2-stage rings of 32 KB
    tiles and ``q``: 160 KB; with a ring each, 288 KB: refused)."""
    q, lse = np.zeros((1, 2, 256, 128), np.float16), np.zeros((1, 2, 256), np.float32)
    kernel = tl.tile_kernel(attention.attention_forward.fn, num_threads=256, num_stages=2)
    e = tl.explain(kernel, q, q, q, q, lse, 0.125, CAUSAL=True, BM=128, BN=128, D=128, backend="cuda")
    program = e["thread_ir"]
    header = next(line for line in program.splitlines() if line.startswith("thread_program"))
    assert header.count("swizzled_uint32_") == 3 and header.count(":u32[16384]") == 2, header
    assert program.count("tma ") == 1 + 2, program  # (the prologue's, then each loop's body's)
    assert program.count("] init") == 1 and program.count("] inval") == 1, program
    masked = program.split("for k")[2]  # (the second loop's body, on)
    assert "parity=phase" in masked and "=stage" in program.split("for k")[2].splitlines()[0], masked
    assert "shared memory per block 163856 bytes" in e["resources"], e["resources"]


def test_the_first_keys_are_copied_while_the_queries_load():
    """The loop's first copies (TMA) are issued before ``q`` (loaded before the loop, read by
    the tensor cores in it) is stored to its swizzled tile, which waits for q's load: the two
    latencies overlap instead of adding up."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    e = tl.explain(attention.attention_forward, q, q, q, q, lse, 0.125, CAUSAL=True, BM=64, BN=64, D=64)
    before = e["thread_ir"].split("for k")[0]
    assert "load q[" in before and before.index("tma ") < before.index("shared swizzled_uint32_2["), before


def _products_and_waits(thread_ir: str) -> str:
    """The wgmma products (P) and waits (w) of a thread program, in order."""
    return "".join("P" if "= wgmma[" in line else "w" for line in thread_ir.splitlines() if "wgmma" in line)


def test_the_backward_copies_each_tile_ahead_once():
    """dk/dv: ``q`` and ``dout`` copied ahead by TMA, one box each, read by two products each;
    ``k`` and ``v`` stored for the tensor cores once per query head, not per query block; the
    row statistics loaded in the layout their use wants (no conversion). dq: ``k`` copied once
    for its two products."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    dkdv = tl.explain(attention.attention_backward_dkdv, q, q, q, q, lse, lse, q, q, 0.125, CAUSAL=True, BM=64, BN=64,
                      D=64)  # fmt: skip
    inner = dkdv["thread_ir"].split("for k")[-1]  # the query blocks' loop, to the end
    assert inner.count(" tma ") == 1 and inner.count("= map") == 2, inner
    assert inner.count("= wgmma") == 4 and inner.count("proxy_fence") == 2, inner  # (p.T and ds.T stored)
    # the iteration before's dk and dv complete at the top (left in flight across its end); the scores'
    # product, dp's in flight while the probabilities are computed, dv's while ds is; the last dk and dv
    # complete after the loop
    assert _products_and_waits(inner) == "wwPPwPwPww" and inner.count("wgmma_wait 1") == 2, inner
    assert "convert_layout" not in dkdv["layouts"]
    dq = tl.explain(attention.attention_backward_dq, q, q, q, q, q, lse, lse, q, 0.125, CAUSAL=True, BM=64, BN=64, D=64)
    inner = dq["thread_ir"].split("for k")[-1]
    assert inner.count(" tma ") == 1 and inner.count("= map") == 2, inner  # (k and v)
    # dp's product in flight while p is computed; dq's from one iteration into the next
    assert _products_and_waits(inner) == "wPPwwPw" and "wgmma_wait 1" in inner, inner
    assert "convert_layout" not in dq["layouts"].split("range_loop")[-1]


def test_the_forward_runs_p_at_v_into_the_next_iteration():
    """``acc = p @ v + acc * alpha`` stays in flight across the iteration's end: the next
    iteration issues ``q @ k.T``, then one wait completes both (ptxas follows no wait_group
    around a loop: none is left in flight there), and only then are the keys and values two
    iterations on copied into the stage p @ v read; the last product completes after the loop.
    ptxas serializes nothing."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    e = tl.explain(attention.attention_forward, q, q, q, q, lse, 0.125, CAUSAL=True, BM=64, BN=64, D=64)
    for body in e["thread_ir"].split("for k")[1:]:
        lines = [line.strip() for line in body.splitlines() if "wgmma" in line or "tma" in line or "barrier" in line]
        assert lines[0].startswith("mbarrier_wait") and "= wgmma[" in lines[1], lines
        assert lines[2].startswith("wgmma_wait 0 c") and lines[3].startswith("wgmma_wait 0 acc"), lines
        assert lines[4] == "barrier" and lines[5].startswith("tma refill"), lines
        assert "= wgmma[" in lines[6] and lines[7].startswith("wgmma_wait 0 c"), lines  # (the exit's)
    assert "wgmma.wait_group.sync.aligned 1;" not in e["ptx"] and "by ptxas" not in e["resources"], e["resources"]


def test_copies_first_issues_them_at_the_top_of_each_iteration():
    """``copies_first=True`` (a config the tuner tries): the iteration before's p @ v completes
    after the tiles' mbarrier wait, then the barrier and the copies, then q @ k.T; tuned configs
    keep the option (and the kernel's arch)."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    config = tl.Config(BM=64, BN=64, num_threads=128, num_stages=2, copies_first=True)
    assert config.label() == "BM=64 BN=64 threads=128 stages=2 copies first" and config != tl.Config(**config.constants)
    kernel = attention.attention_tuned.variant(config)
    assert kernel.copies_first and kernel.arch == attention.attention_forward.arch
    e = tl.explain(kernel, q, q, q, q, lse, 0.125, CAUSAL=True, D=64, **config.constants)
    for body in e["thread_ir"].split("for k")[1:]:
        lines = [line.strip() for line in body.splitlines() if "wgmma" in line or "tma" in line or "barrier" in line]
        assert lines[0].startswith("mbarrier_wait") and lines[1].startswith("wgmma_wait 0 c"), lines
        assert lines[2] == "barrier" and lines[3].startswith("tma refill") and "= wgmma[" in lines[4], lines
    assert "by ptxas" not in e["resources"], e["resources"]


def test_the_dkdv_kernel_stores_keys_and_values_once_before_its_loops():
    """``k`` and ``v``, loaded before the loop over a group's query heads and read by the tensor
    cores in the loops nested in it, are stored to their swizzled tiles once, before that loop:
    stored in it, their loaded registers stayed live through the query loops (D = 128, 64 x 128
    tiles: 255 registers and 156 bytes spilled)."""
    q, lse = np.zeros((1, 2, 256, 128), np.float16), np.zeros((1, 2, 256), np.float32)
    kernel = tl.tile_kernel(attention.attention_backward_dkdv.fn, num_threads=256, num_stages=2)
    e = tl.explain(kernel, q, q, q, q, lse, lse, q, q, 0.125, CAUSAL=True, BM=64, BN=128, D=128, backend="cuda")
    before, loops = e["thread_ir"].split("for k", 1)
    stored_before = set(re.findall(r"shared (swizzled_\w+)\[", before))
    assert len(stored_before) == 2 and not stored_before & set(re.findall(r"shared (swizzled_\w+)\[", loops)), before
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def test_the_queries_reach_shared_memory_as_loaded():
    """The forward's ``q`` goes from its load to its swizzled tile as the words loaded: no
    float16 value is widened to float32 and rounded back (32 ``cvt.f32.f16`` and 16
    ``cvt.rn.f16x2.f32`` a thread in the prologue before), in 16-byte stores (a thread's 8
    elements of a row are one chunk of the swizzled tile: 4 stores, not 16 of a word each,
    with the swizzle of each word computed)."""
    q, lse = np.zeros((1, 2, 256, 64), np.float16), np.zeros((1, 2, 256), np.float32)
    e = tl.explain(attention.attention_forward, q, q, q, q, lse, 0.125, CAUSAL=True, BM=64, BN=64, D=64)
    assert "cvt.f32.f16" not in e["ptx"]
    assert re.search(r"shared swizzled_\w+\[\w+\] = \w+ mask=\S+ lanes=4", e["thread_ir"]), e["thread_ir"]
    assert e["ptx"].count("st.shared.v4.u32") == 4 and "st.shared.u32" not in e["ptx"].split("wgmma.mma_async")[0]
