"""Flash attention as a PyTorch operator: examples/attention.py's forward and backward kernels
behind ``torch.library``, so ``loss.backward()``, ``torch.compile`` and CUDA graphs work.

Run: python examples/torch_attention.py      (needs torch; CUDA when a GPU is present, else
the CPU backend on CPU tensors at a small size)

The forward saves what the backward needs: ``out`` and each query's log2-sum-exp2 ``lse``
(the softmax's normaliser), so the backward recomputes the probabilities block by block and
never stores a (L, L) matrix either.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys
import time

import torch

import tilelang as tl


def _sibling(name: str):
    """examples/<name>.py as a module (by path: this file is also loaded by path, from tests)."""
    module_name = f"tilelang_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, pathlib.Path(__file__).with_name(f"{name}.py"))
        sys.modules[module_name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[module_name])
    return sys.modules[module_name]


kernels = _sibling("attention")


@tl.torch.custom_op("tilelang_examples::flash_attention", mutates_args=())
def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q @ k.T * scale [causal mask]) @ v for (batch, heads, L, D) tensors (``k``, ``v``
    may have fewer heads: grouped-query attention): (out, lse)."""
    return kernels.attention(q, k, v, causal=causal, scale=scale, with_lse=True)


@tl.torch.custom_op("tilelang_examples::flash_attention_backward", mutates_args=())
def flash_attention_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
    causal: bool, scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(dq, dk, dv) of :func:`flash_attention` for the output gradient ``dout``."""
    return kernels.attention_backward(q, k, v, out, lse, dout, causal=causal, scale=scale)


def _setup_context(ctx, inputs, output):
    q, k, v, ctx.causal, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, *output)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout.contiguous(), ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


flash_attention.register_autograd(_backward, setup_context=_setup_context)


def attention(q, k, v, causal=False, scale=None):
    """The operator's output alone, differentiable: a drop-in for
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale)[0]


def _timed(fn, cuda, repeats=20):
    """Milliseconds per call of ``fn`` (after one warm-up call)."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main():
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, heads, length, d = (2, 8, 1000, 64) if cuda else (1, 2, 100, 64)  # (not a multiple of the tiles)
    gen = torch.Generator(device).manual_seed(0)
    q, k, v, target = (
        torch.randn(batch, heads, length, d, device=device, dtype=torch.float16, generator=gen) for _ in range(4)
    )
    for causal in (False, True):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        loss = (attention(*leaves, causal=causal).float() * target.float()).sum()
        loss.backward()  # dout = target (in float16, as autograd casts it back)
        arrays = [x.detach().cpu().numpy() for x in (q, k, v, target)]
        errors = kernels.check_backward([x.grad.cpu().numpy() for x in leaves], *arrays, causal=causal)
        worst = ", ".join(f"{e:.2g}" for e in errors)
        print(f"{'causal' if causal else 'full'} attention {batch}x{heads}x{length}x{d} float16 on {device}: "
              f"loss.backward()'s gradients match NumPy's float64 (max errors {worst})")  # fmt: skip
    if cuda:  # a training step of attention alone, against torch's
        sdpa = torch.nn.functional.scaled_dot_product_attention
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        for name, fn in (("tilelang", attention), ("torch SDPA", lambda *a, causal: sdpa(*a, is_causal=causal))):
            ms = _timed(lambda fn=fn: fn(*leaves, causal=True).backward(target), cuda)
            print(f"causal forward + backward, {name}: {ms:.3f} ms")


if __name__ == "__main__":
    main()
