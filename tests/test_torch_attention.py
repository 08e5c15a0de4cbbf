"""examples/torch_attention.py: flash attention as a torch operator, where torch is installed
(skipped otherwise). On the host (CPU backend, small sizes): ``torch.library.opcheck``,
``loss.backward()`` against the float64 gradients, ``torch.compile(fullgraph=True)`` with no
graph break. On a GPU (marked ``gpu``): gradients against SDPA's and a CUDA-graph replay.
"""

from __future__ import annotations

import pytest
from test_examples import _load

from tilelang._runtime import gpu_available

torch = pytest.importorskip("torch")
example = _load("torch_attention")


def inputs(shape, kv_heads, device, dtype=torch.float16, seed=0):
    batch, heads, length, d = shape
    g = torch.Generator(device).manual_seed(seed)
    q = torch.randn(batch, heads, length, d, device=device, dtype=dtype, generator=g)
    k, v = (torch.randn(batch, kv_heads, length, d, device=device, dtype=dtype, generator=g) for _ in range(2))
    return q, k, v


def test_the_ops_pass_opcheck():
    q, k, v = inputs((1, 2, 40, 64), 1, "cpu")
    torch.library.opcheck(example.flash_attention.op, (q, k, v, True, 0.125))
    out, lse = example.flash_attention(q, k, v, True, 0.125)
    dout = torch.randn_like(q)
    torch.library.opcheck(example.flash_attention_backward.op, (q, k, v, out, lse, dout, True, 0.125))


@pytest.mark.parametrize("causal", [False, True])
def test_loss_backward_matches_float64_on_the_cpu_backend(causal):
    """Grouped-query heads, a length that is not a multiple of the tiles."""
    q, k, v = inputs((1, 4, 70, 64), 2, "cpu", seed=1)
    dout = torch.randn_like(q)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    example.attention(*leaves, causal=causal).backward(dout)
    arrays = [x.numpy() for x in (q, k, v, dout)]
    example.kernels.check_backward([x.grad.numpy() for x in leaves], *arrays, causal=causal)


def test_compiles_with_no_graph_break():
    q, k, v = inputs((1, 2, 40, 64), 2, "cpu", seed=2)

    def step(q, k, v):
        return example.attention(q, k, v, causal=True).float().square().sum()

    explained = torch._dynamo.explain(step)(q, k, v)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    torch.compile(step, fullgraph=True)(*leaves).backward()
    eager = [x.clone().requires_grad_() for x in (q, k, v)]
    step(*eager).backward()
    for got, want in zip(leaves, eager):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


# ------------------------------------------------------------------ on a GPU

cuda_only = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (gpu_available() and torch.cuda.is_available()), reason="needs torch with CUDA"),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape, kv_heads", [((2, 8, 1000, 64), 8), ((1, 8, 777, 128), 2), ((2, 4, 4096, 64), 1)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_gradients_match_sdpa_on_cuda(shape, kv_heads, causal, dtype, mark):
    """Against torch's SDPA in float32 (keys and values repeated for the grouped heads): the
    16-bit roundings of the probabilities and dscores bound the difference."""
    q, k, v = inputs(shape, kv_heads, "cuda", getattr(torch, dtype), seed=3)
    dout = torch.randn_like(q)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = example.attention(*leaves, causal=causal)
    out.backward(dout)
    group = shape[1] // kv_heads
    ref = [x.float().requires_grad_() for x in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(
        ref[0], *(x.repeat_interleave(group, dim=1) for x in ref[1:]), is_causal=causal
    )
    want.backward(dout.float())
    eps = 2.0**-10 if dtype == "float16" else 2.0**-7
    for got, expected in zip([out, *(x.grad for x in leaves)], [want, *(x.grad for x in ref)]):
        scale = expected.abs().max().item()
        assert (got.float() - expected).abs().max().item() <= 16 * eps * scale, (got.shape, dtype)


@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_forward_and_backward_replay_in_a_cuda_graph(mark):
    q, k, v = inputs((1, 4, 300, 64), 2, "cuda", seed=4)
    dout = torch.randn_like(q)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def step():
        for x in leaves:
            x.grad = None
        out = example.attention(*leaves, causal=True)
        out.backward(dout)
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compiles and tunes) outside the capture
        eager = step().clone(), *(x.grad.clone() for x in leaves)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    graph.replay()
    for got, want in zip((out, *(x.grad for x in leaves)), eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
