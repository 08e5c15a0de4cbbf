"""tilelang kernels as torch custom ops (tilelang/torch.py, examples/torch_rmsnorm.py), where
torch is installed (skipped otherwise). On the host: the example's ops on the CPU backend
through ``torch.library.opcheck``, autograd against torch's ``rms_norm`` and
``torch.compile(fullgraph=True)``. On a GPU (marked ``gpu``): the same on CUDA, a CUDA-graph
capture of a training step, and a DDP-wrapped step.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_examples import _load
from test_torch import double

import tilelang as tl
from tilelang._runtime import gpu_available

torch = pytest.importorskip("torch")
example = _load("torch_rmsnorm")


@tl.torch.custom_op("tilelang_tests::double", mutates_args=())
def double_op(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    double[tl.cdiv(x.numel(), 64)](x.reshape(-1), out.view(-1), TILE=64)
    return out


@tl.torch.custom_op("tilelang_tests::double_into", mutates_args=("out",))
def double_into(x: torch.Tensor, out: torch.Tensor) -> None:
    double[tl.cdiv(x.numel(), 64)](x.reshape(-1), out.view(-1), TILE=64)


def devices():
    return ["cpu"] + (["cuda"] if gpu_available() and torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", devices())
def test_ops_pass_opcheck(device):
    x = torch.randn(37, 5, device=device)
    torch.library.opcheck(double_op.op, (x,))
    torch.library.opcheck(double_op.op, (x.T,))  # (docs/pytorch.md's pattern: out.view(-1) of a transposed x failed)
    torch.library.opcheck(double_into.op, (x, torch.empty_like(x)))
    w = torch.randn(5, device=device)
    torch.library.opcheck(example.rms_norm.op, (x, w, 1e-6))
    rstd = example.rms_norm(x, w, 1e-6)[1]
    torch.library.opcheck(example.rms_norm_grad.op, (torch.randn_like(x), x, w, rstd))
    torch.library.opcheck(example.add_rms_norm.op, (x, torch.randn_like(x), w, 1e-6))
    torch.library.opcheck(example.add_rms_norm_grad.op, (torch.randn_like(x), torch.randn_like(x), x, w, rstd))


def test_a_call_needing_no_gradient_goes_straight_to_the_operator():
    x, w = torch.randn(6, 5), torch.randn(5, requires_grad=True)
    y = example.rms_norm(x, w.detach(), 1e-6)[0]
    assert y.grad_fn is None
    with torch.no_grad():
        assert example.rms_norm(x, w, 1e-6)[0].grad_fn is None
    y = example.rms_norm(x, w, eps=1e-6)[0]  # (keywords: the Function takes them positionally)
    assert y.grad_fn is not None
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (5,), w, 1e-6))


def test_keywords_and_defaults_bind_as_in_the_function():
    @tl.torch.custom_op("tilelang_tests::scaled", mutates_args=())
    def scaled(x: torch.Tensor, factor: float = 3.0) -> torch.Tensor:
        out = torch.empty_like(x)
        double[tl.cdiv(x.numel(), 64)](x.reshape(-1), out.view(-1), TILE=64)
        return out * factor

    x = torch.randn(10, requires_grad=True)
    assert torch.equal(scaled(x), 6 * x.detach()) and torch.equal(scaled(x=x, factor=1.0), 2 * x.detach())
    with pytest.raises(TypeError, match="missing arguments"):
        scaled(factor=2.0)
    with pytest.raises(TypeError, match="unexpected or repeated"):
        scaled(x, x=x)


def test_backward_without_register_autograd_is_a_tile_error():
    x = torch.randn(10, requires_grad=True)
    y = double_op(x)  # the forward runs
    with pytest.raises(tl.TileError, match="tilelang_tests::double has no backward"):
        y.sum().backward()
    with pytest.raises(tl.TileError, match="writes its arguments in place"):
        double_into.register_autograd(lambda ctx, g: g)


def test_an_in_place_write_bumps_the_version_autograd_checks():
    x, out = torch.randn(10), torch.zeros(10)
    before = out._version
    double_into(x, out)
    assert out._version > before and torch.equal(out, 2 * x)
    w = torch.randn(10, requires_grad=True)
    y = w * out  # saves out for the backward; writing it again must make the backward refuse
    double_into(x, out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@tl.torch.custom_op("tilelang_tests::double_all_", mutates_args=("outs",))
def double_all_(x: torch.Tensor, outs: list[torch.Tensor]) -> None:
    for out in outs:  # (the kernel itself: a launch tells autograd nothing)
        double[tl.cdiv(x.numel(), 64)](x.reshape(-1), out.view(-1), TILE=64)


def test_writes_into_a_list_of_tensors_bump_each_version():
    x, outs = torch.randn(10), [torch.zeros(10), torch.zeros(10)]
    before = [out._version for out in outs]
    double_all_(x, outs)
    assert all(out._version > b for out, b in zip(outs, before)) and all(torch.equal(out, 2 * x) for out in outs)


def test_defaults_reach_setup_context_and_the_backward():
    seen = []

    @tl.torch.custom_op("tilelang_tests::scaled_twice", mutates_args=())
    def scaled_twice(x: torch.Tensor, factor: float = 3.0) -> torch.Tensor:
        out = torch.empty_like(x)
        double[tl.cdiv(x.numel(), 64)](x.reshape(-1), out.view(-1), TILE=64)
        return out * factor

    def setup_context(ctx, inputs, output):
        seen.append(inputs)
        ctx.factor = inputs[1]

    scaled_twice.register_autograd(lambda ctx, g: (2 * ctx.factor * g, None), setup_context=setup_context)
    x = torch.randn(10, requires_grad=True)
    (grad,) = torch.autograd.grad(scaled_twice(x).sum(), x)
    assert len(seen[0]) == 2 and seen[0][1] == 3.0 and torch.equal(grad, torch.full((10,), 6.0))


def test_arguments_autograd_cannot_follow_are_tile_errors():
    with pytest.raises(tl.TileError, match="keyword-only parameters"):

        @tl.torch.custom_op("tilelang_tests::keyword_only", mutates_args=())
        def keyword_only(x: torch.Tensor, *, factor: float) -> torch.Tensor:
            return x * factor

    @tl.torch.custom_op("tilelang_tests::first_doubled", mutates_args=())
    def first_doubled(xs: list[torch.Tensor]) -> torch.Tensor:
        return double_op(xs[0])

    x = torch.randn(10, requires_grad=True)
    with pytest.raises(tl.TileError, match="lists of tensors are not supported"):
        first_doubled([x])
    assert torch.equal(first_doubled([x.detach()]), 2 * x.detach())


def test_an_op_that_writes_and_returns_has_no_silent_backward():
    @tl.torch.custom_op("tilelang_tests::double_into_and_return", mutates_args=("out",))
    def double_into_and_return(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        result = torch.empty_like(x)  # (kernels, not ops: nothing here tells autograd of the call)
        for target in (out, result):
            double[tl.cdiv(x.numel(), 64)](x.reshape(-1), target.view(-1), TILE=64)
        return result

    x = torch.randn(10, requires_grad=True)
    y = double_into_and_return(x, torch.zeros(10))
    with pytest.raises(tl.TileError, match="has no backward"):
        y.sum().backward()


def test_what_an_op_writes_carries_no_silent_gradient():
    """A write from an input that requires grad reaches the op's (missing) backward; a tensor
    whose history was overwritten no longer reaches its old one."""
    x, out = torch.randn(10, requires_grad=True), torch.zeros(10)
    double_into(x, out)
    assert torch.equal(out, 2 * x.detach())
    with pytest.raises(tl.TileError, match="double_into has no backward"):
        out.sum().backward()
    w = torch.randn(10, requires_grad=True)
    out = w * 1
    double_into(torch.randn(10), out)
    with pytest.raises(tl.TileError, match="double_into has no backward"):
        out.sum().backward()
    with torch.no_grad():
        double_into(x, out)  # (nothing recorded: fine)
    rows = torch.zeros(2, 10)
    double_into(x, rows[0])  # a view written: its own Function (torch takes a written view only as a sole output)
    assert torch.equal(rows[0], 2 * x.detach()) and rows.grad_fn is not None
    with pytest.raises(tl.TileError, match="writes a leaf tensor that requires grad"):
        double_into(torch.randn(10), x)

    @tl.torch.custom_op("tilelang_tests::maybe_into", mutates_args=("out",))
    def maybe_into(x: torch.Tensor, out: torch.Tensor | None) -> None:
        if out is not None:
            double_into(x, out)

    maybe_into(x, None)  # (an optional written argument left out: nothing to give a history)


@tl.torch.custom_op("tilelang_tests::doubled_and_tripled", mutates_args=())
def doubled_and_tripled(x: torch.Tensor) -> list[torch.Tensor]:
    return [double_op(x), double_op(x) * 1.5]


@tl.torch.custom_op("tilelang_tests::sum_and_pair", mutates_args=())
def sum_and_pair(x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    return x.sum(), [double_op(x), double_op(x) * 1.5]


def test_ops_returning_lists_of_tensors_differentiate():
    """The backward gets a list's gradients as a list, as torch.library.custom_op's does (autograd
    tracks only tensors returned directly or in a tuple: they lost their gradient silently)."""
    doubled_and_tripled.register_autograd(lambda ctx, g: 2 * g[0] + 3 * g[1])
    sum_and_pair.register_autograd(lambda ctx, s, g: s + 2 * g[0] + 3 * g[1])
    x = torch.randn(8, requires_grad=True)
    a, b = outputs = doubled_and_tripled(x)
    assert isinstance(outputs, list) and torch.equal(b, 3 * x.detach())
    ((a + b).sum() + x.sum()).backward()
    assert torch.equal(x.grad, torch.full((8,), 6.0))
    total, pair = sum_and_pair(x)
    assert isinstance(pair, list) and len(pair) == 2
    (grad,) = torch.autograd.grad(total + pair[1].sum(), x)
    assert torch.equal(grad, torch.full((8,), 4.0))


def test_an_op_given_a_symbolic_size_compiles_for_every_shape():
    """(Asking a SymInt for requires_grad broke fullgraph once a second shape made sizes dynamic.)"""
    torch._dynamo.reset()
    f = torch.compile(lambda x: double_op(x) * x.shape[0] + scaled_by(x, x.shape[0]), fullgraph=True)
    for n in (5, 9, 12):
        x = torch.randn(n)
        torch.testing.assert_close(f(x), 2 * n * x + n * x)


@tl.torch.custom_op("tilelang_tests::scaled_by", mutates_args=())
def scaled_by(x: torch.Tensor, k: int) -> torch.Tensor:
    return double_op(x) * (k / 2)


def test_meta_tensors_beside_tensors_with_data_are_refused():
    """(A launch with any meta tensor was skipped: the op returned uninitialized memory.)"""
    x, out = torch.randn(8), torch.full((8,), -1.0)
    with pytest.raises(tl.TileArgumentError, match=r"`x` is a meta tensor \(no data\) and `out` has data"):
        double[1](x.to("meta"), out, TILE=8)
    with pytest.raises(tl.TileArgumentError, match="`out` is a meta tensor"):
        double_into(x, out.to("meta"))  # (through an op)
    assert double_op(x.to("meta")).is_meta  # all meta: shapes only, as torch's meta kernels


@pytest.mark.parametrize("device", devices())
def test_tensors_whose_memory_is_not_their_values_are_refused(device):
    """A negated view's memory holds -x (read as is, on CUDA: the wrong sign); a sparse tensor
    has no array of elements (both raised torch's own RuntimeError from inside tilelang)."""
    z = torch.randn(16, dtype=torch.complex64, device=device)
    out = torch.zeros(16, device=device)
    double[1](z.imag, out, TILE=16)  # strided, not negated: a fast path for the strided view
    assert torch.equal(out, 2 * z.imag)
    for negated in [z.conj().imag] * 2 + [z[:1].conj().imag]:  # (the full path, then any fast path; contiguous)
        with pytest.raises(tl.TileTypeError, match=r"argument `x`: a lazily negated tensor .* \.resolve_neg\(\)"):
            double[1](negated, out, TILE=16)
    with pytest.raises(tl.TileTypeError, match=r"argument `x`: a torch.sparse_coo tensor .* \.to_dense\(\)"):
        double[1](torch.randn(16, device=device).to_sparse(), out, TILE=16)


def test_a_kernel_launched_directly_in_compiled_code_runs_eagerly():
    """Not through an op: a graph break, the launch untraced (dynamo went through tilelang's own
    frames, and the kernel's, and failed inside the compiler: InternalTorchDynamoError)."""

    @tl.tile_kernel
    def tripled(x, out, TILE: tl.Constant):  # (new: its first compile happens under torch.compile)
        i = tl.block_id(0)
        tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * 3, index=(i,))

    tuned = tl.autotune(configs=[tl.Config(TILE=32), tl.Config(TILE=64)], key=[])(tripled)

    def plain(x, kernel):
        out = torch.empty_like(x)
        kernel[lambda meta: (tl.cdiv(x.numel(), meta["TILE"]),)](x, out, **({} if kernel is tuned else {"TILE": 64}))
        return out + 1

    torch._dynamo.reset()
    for kernel in (tripled, tuned):
        x = torch.randn(100)
        torch.testing.assert_close(torch.compile(plain)(x, kernel), 3 * x + 1)


def test_launch_errors_are_located_at_the_users_line_with_dynamo_loaded():
    """(The launch runs through torch._dynamo.disable's wrapper then: errors were located in it.)"""
    import torch._dynamo  # noqa: F401

    tuned = tl.autotune(configs=[tl.Config(TILE=16)], key=[])(double)
    x = torch.zeros(16)
    for launch in (lambda: double[1](x, TILE=16), lambda: tuned[1](x, x.clone(), TILE=16)):  # (missing, configured)
        with pytest.raises(tl.TileError) as err:
            launch()
        assert err.value.loc is not None and err.value.loc.file == __file__, err.value


def test_an_op_without_backward_compiles_where_inputs_require_grad():
    x = torch.randn(10, requires_grad=True)
    y = torch.compile(lambda x: double_op(x) + 1, fullgraph=True)(x)
    torch.testing.assert_close(y, 2 * x.detach() + 1)


def test_defining_an_op_again_replaces_it():
    def make(factor):
        @tl.torch.custom_op("tilelang_tests::redefined", mutates_args=())
        def redefined(x: torch.Tensor) -> torch.Tensor:
            return double_op(x) * factor

        return redefined

    x = torch.randn(10)
    first = make(1.0)
    again = make(5.0)  # (a re-run notebook cell, the first still alive)
    assert first is not again and torch.equal(again(x), 10 * x)
    assert torch.equal(torch.ops.tilelang_tests.redefined(x), 10 * x)


def test_the_fake_implementation_gives_shapes_without_launching():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(300, 70, dtype=torch.bfloat16)
        y, rstd = example.rms_norm(x, torch.empty(70, dtype=torch.bfloat16), 1e-6)
    assert (y.shape, y.dtype, rstd.shape, rstd.dtype) == ((300, 70), torch.bfloat16, (300,), torch.float32)


def check_against_torch(rows, n, dtype, device, leading=()):
    """rms_norm's values and gradients against torch's, in float64 for the reference."""
    g = torch.Generator().manual_seed(rows * 1000 + n)
    x = (torch.randn(*leading, rows, n, generator=g) * 3 + 1).to(device, dtype).requires_grad_()
    w = torch.randn(n, generator=g).to(device, dtype).requires_grad_()
    dy = torch.randn(*leading, rows, n, generator=g).to(device, dtype)
    y = example.rms_norm(x, w, 1e-6)[0]
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = torch.nn.functional.rms_norm(x64, (n,), w64, 1e-6)
    dx64, dw64 = torch.autograd.grad(y64, (x64, w64), dy.double())
    # Error bounds from the magnitudes of the terms each result sums (float32 arithmetic:
    # ~2**-24 per operation, sums of up to a few hundred terms), plus the rounding of the
    # result to its dtype: dx of a short row is a near-cancellation of two large terms.
    x64, w64, gw = x64.detach(), w64.detach(), dy.double() * w64.detach()
    r = torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6)
    terms = (
        (y, y64, (x64 * r * w64).abs()),
        (dx, dx64, r * gw.abs() + x64.abs() * r**3 * (gw * x64).abs().mean(-1, keepdim=True)),
        (dw, dw64, (dy.double() * x64 * r).abs().reshape(-1, n).sum(0)),
    )
    info = torch.finfo(dtype)
    rounding = info.eps / 2
    for name, (got, want, magnitude) in zip(("y", "dx", "dweight"), terms):
        assert got.dtype == dtype and got.shape == want.shape
        error = (got.detach().double() - want.detach()).abs()
        bound = 1e-5 * magnitude + 2 * rounding * (want.detach().abs() + magnitude * (dtype != torch.float32))
        bound += info.smallest_normal * info.eps  # the spacing of subnormals (float16's start at 6e-5)
        assert (error <= bound).all(), f"{name}: error {float((error / bound).max()):.3g} x the bound"


def check_add_against_torch(rows, n, dtype, device):
    """add_rms_norm's h (x + residual rounded to the dtype, as torch's add) exactly, its y and
    its gradients within the bounds of :func:`check_against_torch` plus dh's rounding: the
    same checks on the rounded h, whose gradient is dh plus rms_norm's."""
    g = torch.Generator().manual_seed(rows * 1000 + n + 7)
    x, res, dh, dy = (torch.randn(rows, n, generator=g).to(device, dtype) for _ in range(4))
    w = torch.randn(n, generator=g).to(device, dtype)
    x, res, w = (t.requires_grad_() for t in (x, res, w))
    h, y, rstd = example.add_rms_norm(x, res, w, 1e-6)
    assert torch.equal(h, x.detach() + res.detach()) and rstd.dtype == torch.float32
    dx, dres, dw = torch.autograd.grad((h, y), (x, res, w), (dh, dy))
    assert torch.equal(dx, dres)
    h2 = h.detach().requires_grad_()
    y2 = example.rms_norm(h2, w, 1e-6)[0]
    dx2, dw2 = torch.autograd.grad(y2, (h2, w), dy)
    assert torch.equal(y, y2) and torch.equal(dw, dw2)  # (the same kernels' arithmetic on the same h)
    info = torch.finfo(dtype)
    # dx adds dh to rms_norm's gradient in float32 and rounds once; dx2 was rounded to the dtype
    # first, half an ulp of |dx2| that a cancelling dh leaves in a small sum (float16 on the H100:
    # 7 ulps of a 0.28 result)
    ref = dx2.double() + dh.double()
    bound = info.eps * dx2.double().abs() + 2 * info.eps * ref.abs() + info.eps
    assert ((dx.double() - ref).abs() <= bound).all(), ((dx.double() - ref).abs() - bound).max()


@settings(max_examples=12, deadline=None)
@given(
    rows=st.integers(1, 40),
    n=st.integers(1, 300),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    leading=st.sampled_from([(), (2,)]),
)
def test_rms_norm_matches_torch_on_the_cpu_backend(rows, n, dtype, leading):
    check_against_torch(rows, n, getattr(torch, dtype), "cpu", leading)
    check_add_against_torch(rows, n, getattr(torch, dtype), "cpu")


def test_add_rms_norm_refuses_a_residual_of_another_shape_or_dtype():
    """(h takes x's dtype: an f16 x plus an f32 residual of 1e4 overflowed where torch's add promotes)"""
    for residual in (torch.randn(4, 1), torch.randn(4, 8, dtype=torch.float64)):
        with pytest.raises(ValueError, match="residual"):
            example.add_rms_norm(torch.randn(4, 8), residual, torch.randn(8), 1e-6)


@pytest.mark.parametrize("norm", ["RMSNorm", "AddRMSNorm"])
def test_compiled_model_has_no_graph_breaks_and_trains_as_torchs(norm):
    """The model on tilelang's norm (the residual add separate, or fused into the norm) in
    one graph, its losses torch's."""
    norm = getattr(example, norm)
    x, target = torch.randn(48, 64), torch.randn(48, 64)
    explained = torch._dynamo.explain(example.model(64, 2, norm, "cpu", torch.float32))(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    losses = {}
    for each in (norm, example.TorchRMSNorm):
        net = example.model(64, 2, each, "cpu", torch.float32)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        compiled = torch.compile(net, fullgraph=True)
        losses[each] = [float(example.train_step(compiled, optimizer, x, target)) for _ in range(3)]
    assert losses[norm][2] < losses[norm][0]  # it trains
    np.testing.assert_allclose(losses[norm], losses[example.TorchRMSNorm], rtol=1e-5)


# ------------------------------------------------------------------ on a GPU

cuda_only = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (gpu_available() and torch.cuda.is_available()), reason="needs torch with CUDA"),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows, n", [(1, 1), (333, 1000), (4096, 4096), (1000, 8192)])
@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_rms_norm_matches_torch_on_cuda(rows, n, dtype, mark):
    check_against_torch(rows, n, getattr(torch, dtype), "cuda")
    check_add_against_torch(rows, n, getattr(torch, dtype), "cuda")


@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_training_step_replays_in_a_cuda_graph(mark):
    x, target = torch.randn(512, 256, device="cuda"), torch.randn(512, 256, device="cuda")
    results = []
    for graphed in (False, True):
        net = example.model(256, 2, example.AddRMSNorm, "cuda", torch.float32)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (compiles the kernels) outside the capture
            losses = [example.train_step(net, optimizer, x, target) for _ in range(2)]
        torch.cuda.current_stream().wait_stream(side)
        if graphed:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                loss = example.train_step(net, optimizer, x, target)
            for _ in range(3):
                graph.replay()
                losses.append(loss.clone())
        else:
            losses += [example.train_step(net, optimizer, x, target) for _ in range(3)]
        results.append(torch.stack(losses).cpu())
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=0)
    assert results[1][-1] < results[1][0]


@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_training_step_compiles_with_reduce_overhead(mark):
    """torch.compile(mode="reduce-overhead") replays the forward and backward graphs, the ops'
    launches in them, as CUDA graphs: the same losses as the model uncompiled."""
    x, target = torch.randn(512, 256, device="cuda"), torch.randn(512, 256, device="cuda")
    results = []
    for mode in (None, "reduce-overhead"):
        net = example.model(256, 2, example.AddRMSNorm, "cuda", torch.float32)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        run = net if mode is None else torch.compile(net, fullgraph=True, mode=mode)
        results.append(torch.stack([example.train_step(run, optimizer, x, target) for _ in range(5)]).cpu())
    torch.testing.assert_close(results[1], results[0], rtol=1e-4, atol=0)
    assert results[1][-1] < results[1][0]


def _ddp_worker(rank, world, port, result):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    net = torch.nn.parallel.DistributedDataParallel(example.model(256, 2, example.AddRMSNorm, "cuda", torch.float32))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator(device="cuda").manual_seed(rank)
    x, target = (torch.randn(512, 256, device="cuda", generator=g) for _ in range(2))
    losses = [float(example.train_step(net, optimizer, x, target)) for _ in range(3)]
    weight = net.module.blocks[0].norm.weight.detach()
    gathered = [torch.empty_like(weight) for _ in range(world)]
    dist.all_gather(gathered, weight)  # DDP keeps the replicas equal
    result[rank] = (losses, all(torch.equal(gathered[0], w) for w in gathered), float((weight - 1).abs().max()))
    dist.destroy_process_group()


@pytest.mark.parametrize("mark", [pytest.param(0, marks=cuda_only)])
def test_training_step_under_ddp(mark):
    import socket

    import torch.multiprocessing as mp

    world = min(torch.cuda.device_count(), 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = mp.Manager().dict()
    mp.spawn(_ddp_worker, args=(world, port, result), nprocs=world)
    for rank in range(world):
        losses, replicas_equal, moved = result[rank]
        assert losses[-1] < losses[0] and replicas_equal and moved > 0  # the norm's weight got gradients
