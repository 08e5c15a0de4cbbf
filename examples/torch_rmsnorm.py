"""RMSNorm as a PyTorch operator written in tilelang: forward and backward kernels, autograd,
torch.compile, and a small training loop checked against torch's own ``rms_norm``. Also the
norm with the residual stream's add fused in (``add_rms_norm``: what a pre-norm model's
norms read is ``h + delta``), as torch.compile fuses it into torch's own norm.

Run: python examples/torch_rmsnorm.py      (needs torch; CUDA when a GPU is present, else
the CPU backend on CPU tensors)

    y = x * rstd * weight,   rstd = 1 / sqrt(mean(x**2) + eps)      (per row, in float32)
    dx = rstd * (dy * weight) - x * rstd**3 * mean(dy * weight * x)
    dweight = sum over rows of dy * x * rstd
    add_rms_norm: h = x + residual (rounded to x's dtype), y = rms_norm(h); dx = dresidual =
    dh + rms_norm's dx (dh: the gradient of h, from the residual stream's later use)
"""

from __future__ import annotations

import functools
import time

import torch

import tilelang as tl


def normalize_row(i, t, weight, out, rstd, N, eps, BLOCK_N):
    """Row ``i`` of the output from its float32 values ``t`` (a (1, BLOCK_N) tile), and its rstd."""
    r = tl.rsqrt(tl.sum(t * t, axis=1, keepdims=True) / N + eps)
    w = tl.load(weight, index=(0,), shape=(BLOCK_N,)).astype(tl.float32)
    tl.store(out, (t * r * w[None, :]).astype(out.dtype), index=(i, 0))
    tl.store(rstd, r.reshape((1,)), index=(i,))


@tl.tile_kernel
def rms_norm_forward(x, weight, out, rstd, N, eps, BLOCK_N: tl.Constant):
    """One row per block: out = x * rstd * weight, and the row's rstd for the backward."""
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK_N)).astype(tl.float32)  # padded with 0
    normalize_row(i, t, weight, out, rstd, N, eps, BLOCK_N)


@tl.tile_kernel
def add_rms_norm_forward(x, residual, weight, h, out, rstd, N, eps, BLOCK_N: tl.Constant):
    """One row per block: h = x + residual (one dtype), rounded to it as torch's add does;
    out and rstd of that h."""
    i = tl.block_id(0)
    s = tl.load(x, index=(i, 0), shape=(1, BLOCK_N)) + tl.load(residual, index=(i, 0), shape=(1, BLOCK_N))
    s = s.astype(h.dtype)
    tl.store(h, s, index=(i, 0))
    normalize_row(i, s.astype(tl.float32), weight, out, rstd, N, eps, BLOCK_N)


@tl.tile_kernel
def rms_norm_backward(
    dy, dh, x, weight, rstd, dx, dweight_parts, N, BLOCK_M: tl.Constant, BLOCK_N: tl.Constant, ADD_DH: tl.Constant
):  # fmt: skip
    """Block b takes the BLOCK_M-row tiles b, b + blocks, ...: their dx (plus ``dh``'s rows
    where ``ADD_DH``: add_rms_norm's gradient; else ``dh`` is not read), and its share of
    dweight (one row of ``dweight_parts``, summed by the next kernel: no atomics, the same
    result every run). Rows past the end load as 0, so they add nothing and store nothing."""
    b = tl.block_id(0)
    w = tl.load(weight, index=(0,), shape=(BLOCK_N,)).astype(tl.float32)[None, :]
    part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in tl.range(b, tl.cdiv(x.shape[0], BLOCK_M), tl.num_blocks(0)):
        t = tl.load(x, index=(k, 0), shape=(BLOCK_M, BLOCK_N)).astype(tl.float32)
        g = tl.load(dy, index=(k, 0), shape=(BLOCK_M, BLOCK_N)).astype(tl.float32)
        r = tl.load(rstd, index=(k,), shape=(BLOCK_M,)).reshape((BLOCK_M, 1))
        gw = g * w
        c = tl.sum(gw * t, axis=1, keepdims=True) / N
        grad = r * gw - t * (r * r * r * c)
        if ADD_DH:
            grad += tl.load(dh, index=(k, 0), shape=(BLOCK_M, BLOCK_N)).astype(tl.float32)
        tl.store(dx, grad.astype(dx.dtype), index=(k, 0))
        part += g * t * r
    tl.store(dweight_parts, tl.sum(part, axis=0, keepdims=True), index=(b, 0))


@tl.tile_kernel
def column_sum(parts, out, BLOCK_M: tl.Constant, BLOCK_N: tl.Constant):
    """out[j] = sum over i of parts[i, j], for BLOCK_N columns per block."""
    j = tl.block_id(0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in tl.range(0, tl.cdiv(parts.shape[0], BLOCK_M)):
        acc += tl.load(parts, index=(k, j), shape=(BLOCK_M, BLOCK_N))
    tl.store(out, tl.sum(acc, axis=0).astype(out.dtype), index=(j,))


def _block(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()  # one power-of-two tile covers a row (int(): a symbolic size, fixed)


@tl.torch.custom_op("tilelang_examples::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last axis of ``x`` (rows of any leading shape): (y, rstd)."""
    rows = _rows(x)
    out, rstd = torch.empty_like(rows), rows.new_empty(rows.shape[0], dtype=torch.float32)
    rms_norm_forward[rows.shape[0]](rows, weight, out, rstd, rows.shape[1], eps, BLOCK_N=_block(rows.shape[1]))
    return _shaped(out, x), rstd


@tl.torch.custom_op("tilelang_examples::add_rms_norm", mutates_args=())
def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``h = x + residual`` and its RMSNorm over the last axis, one kernel: (h, y, rstd)."""
    if residual.shape != x.shape or residual.dtype != x.dtype:  # (h is x's dtype: torch's add would promote)
        got, want = (f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in (residual, x))
        raise ValueError(f"add_rms_norm: residual {got} is not of x's shape and dtype, {want}")
    rows = _rows(x)
    h, out = torch.empty_like(rows), torch.empty_like(rows)
    rstd = rows.new_empty(rows.shape[0], dtype=torch.float32)
    forward = add_rms_norm_forward[rows.shape[0]]
    forward(rows, _rows(residual), weight, h, out, rstd, rows.shape[1], eps, BLOCK_N=_block(rows.shape[1]))
    return _shaped(h, x), _shaped(out, x), rstd


@tl.torch.custom_op("tilelang_examples::rms_norm_backward", mutates_args=())
def rms_norm_grad(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of :func:`rms_norm`."""
    return _gradients(_rows(dy), None, x, weight, rstd)


@tl.torch.custom_op("tilelang_examples::add_rms_norm_backward", mutates_args=())
def add_rms_norm_grad(
    dy: torch.Tensor, dh: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of :func:`add_rms_norm` (dx is also the residual's gradient)."""
    return _gradients(_rows(dy), _rows(dh), h, weight, rstd)


def _gradients(dy, dh, x, weight, rstd):
    """dx of the rows of ``x`` (plus ``dh`` unless it is None) from the rows ``dy``, and dweight."""
    rows, n = _rows(x), x.shape[-1]
    block_n = _block(n)
    # two short rows a step: more loads in flight (H200: 1941 -> 2162 GB/s); long rows fill the GPU with
    # fewer blocks (16384 x 4096 bf16: 127 -> 126 us, 4096 x 8192: 77 -> 73 us; fewer parts to sum)
    block_m, per_processor = (2, 4) if block_n <= 1024 else (1, 2)
    blocks = min(rows.shape[0], per_processor * _processors(x.device))
    dx = torch.empty_like(rows)
    parts = rows.new_empty(blocks, n, dtype=torch.float32)
    added = dh is not None  # (else dy stands in for it, unread)
    backward = rms_norm_backward[blocks]
    backward(dy, dh if added else dy, rows, weight, rstd, dx, parts, n, BLOCK_M=block_m, BLOCK_N=block_n, ADD_DH=added)
    dweight = torch.empty_like(weight)
    # tall, narrow tiles: 32 columns a block, more blocks (H200, 528 x 1024 parts: 5.1 -> 2.9 us; 32 x 64 before)
    column_sum[tl.cdiv(n, 32)](parts, dweight, BLOCK_M=128, BLOCK_N=32)
    return _shaped(dx, x), dweight


def _rows(x):
    """``x`` as a matrix of rows (itself when it is one: a reshape and a view cost ~1.5 us each)."""
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


def _shaped(rows, x):
    """A result computed as rows, in ``x``'s shape."""
    return rows if x.dim() == 2 else rows.view(x.shape)


@functools.cache
def _processors(device) -> int:
    """Blocks enough to fill the GPU (streaming multiprocessors), or a few on the host."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])  # (the backward takes no gradient of rstd: none flows through it)


def _backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = rms_norm_grad(dy.contiguous(), x, weight, rstd)
    return dx, dweight, None


def _setup_add_context(ctx, inputs, output):
    ctx.save_for_backward(output[0], inputs[2], output[2])  # h (the norm's input), the weight, rstd
    ctx.mark_non_differentiable(output[2])


def _add_backward(ctx, dh, dy, _drstd):
    # (dh is zeros where h is unused: autograd fills in the gradient of an unused output)
    h, weight, rstd = ctx.saved_tensors
    dx, dweight = add_rms_norm_grad(dy.contiguous(), dh.contiguous(), h, weight, rstd)
    return dx, dx, dweight, None  # h = x + residual: both take h's gradient


rms_norm.register_autograd(_backward, setup_context=_setup_context)
add_rms_norm.register_autograd(_add_backward, setup_context=_setup_add_context)


class RMSNorm(torch.nn.Module):
    """``torch.nn.RMSNorm`` (a weight, no bias) on tilelang's kernels."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x):
        return rms_norm(x.contiguous(), self.weight, self.eps)[0]

    def add_and_norm(self, h, delta):
        """The residual stream's next value ``h + delta`` (``h`` where delta is None) and its norm."""
        h = h if delta is None else h + delta
        return h, self(h)


class TorchRMSNorm(RMSNorm):
    """The same module on ``torch.nn.functional.rms_norm``, to compare against."""

    def forward(self, x):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class AddRMSNorm(RMSNorm):
    """:class:`RMSNorm` whose ``add_and_norm`` is one kernel, :func:`add_rms_norm` (as
    torch.compile fuses the add into torch's norm: a model on :class:`RMSNorm` launches the
    add as a kernel of its own, forward and backward)."""

    def add_and_norm(self, h, delta):
        if delta is None:
            return h, self(h)
        h, y, _ = add_rms_norm(h.contiguous(), delta.contiguous(), self.weight, self.eps)
        return h, y


class Block(torch.nn.Module):
    """A pre-norm MLP block: takes the residual stream and what the block before adds to it,
    returns the stream and what this block adds, ``W2 gelu(W1 norm(h))``."""

    def __init__(self, dim, norm, device=None, dtype=None):
        super().__init__()
        self.norm = norm(dim, device=device, dtype=dtype)
        self.up = torch.nn.Linear(dim, 4 * dim, device=device, dtype=dtype)
        self.down = torch.nn.Linear(4 * dim, dim, device=device, dtype=dtype)

    def forward(self, carry):
        h, y = self.norm.add_and_norm(*carry)
        return h, self.down(torch.nn.functional.gelu(self.up(y)))


class Model(torch.nn.Module):
    """``depth`` (>= 1) blocks on a residual stream (each adds to it), then a norm of the stream."""

    def __init__(self, dim, depth, norm, device=None, dtype=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(dim, norm, device, dtype) for _ in range(depth)])
        self.norm = norm(dim, device=device, dtype=dtype)

    def forward(self, x):
        carry = (x, None)
        for block in self.blocks:
            carry = block(carry)
        h, delta = carry
        return self.norm(h + delta)  # (not add_and_norm: the unused last h would take a zero gradient)


def model(dim, depth, norm, device, dtype, seed=0):
    torch.manual_seed(seed)
    return Model(dim, depth, norm, device, dtype)


def train_step(net, optimizer, x, target):
    optimizer.zero_grad(set_to_none=False)  # (the gradients stay where a CUDA graph captured them)
    loss = torch.nn.functional.mse_loss(net(x).float(), target)
    loss.backward()
    optimizer.step()
    return loss.detach()


def main():
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    tokens, dim, depth, steps = (8192, 1024, 4, 20) if cuda else (64, 96, 2, 5)
    x = torch.randn(tokens, dim, device=device, dtype=dtype)
    target = torch.randn(tokens, dim, device=device)

    # one call of each op against torch: values and gradients
    xr = x[:100].float().requires_grad_()
    res = torch.randn_like(xr).requires_grad_()
    w = torch.randn(dim, device=device, requires_grad=True)
    h, y, _ = add_rms_norm(xr, res, w, 1e-6)
    y_plain = rms_norm(xr, w, 1e-6)[0]
    h_ref = xr + res
    y_ref, y_plain_ref = (torch.nn.functional.rms_norm(t, (dim,), w, 1e-6) for t in (h_ref, xr))
    dh, dy = torch.randn_like(h), torch.randn_like(y)
    got = [h, y, y_plain, *torch.autograd.grad((h, y), (xr, res, w), (dh, dy))]
    got += torch.autograd.grad(y_plain, (xr, w), dy)
    want = [h_ref, y_ref, y_plain_ref, *torch.autograd.grad((h_ref, y_ref), (xr, res, w), (dh, dy))]
    want += torch.autograd.grad(y_plain_ref, (xr, w), dy)
    for a, b in zip(got, want):  # float32 sums of up to 1024 terms
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    print(f"rms_norm and add_rms_norm, forward and backward, match torch (float32, {len(xr)}x{dim}, on {device})")

    # a training loop, compiled, with tilelang's norms and with torch's
    losses, times = {}, {}
    norms = (("tilelang", AddRMSNorm), ("tilelang, add unfused", RMSNorm), ("torch", TorchRMSNorm))
    for name, norm in norms:
        net = model(dim, depth, norm, device, dtype)
        optimizer = torch.optim.SGD(net.parameters(), lr=1e-2)
        compiled = torch.compile(net, fullgraph=True)  # forward and backward: one graph each
        losses[name] = [float(train_step(compiled, optimizer, x, target)) for _ in range(3)]  # (compiles)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            train_step(compiled, optimizer, x, target)
        if cuda:
            torch.cuda.synchronize()
        times[name] = (time.perf_counter() - start) / steps * 1e3
    for name, _ in norms:  # bfloat16 activations: the norms round differently, the losses agree to ~1e-2
        torch.testing.assert_close(losses[name], losses["torch"], rtol=2e-2 if cuda else 1e-4, atol=0)
    print("training loss, 3 compiled steps: " + ", ".join(f"{name} {losses[name]}" for name, _ in norms))
    print(
        f"ms per training step ({tokens} tokens, dim {dim}, {depth} blocks, {dtype}, torch.compile): "
        + ", ".join(f"{name} {times[name]:.3f}" for name, _ in norms)
    )


if __name__ == "__main__":
    main()
