"""tilelang's RMSNorm as a torch op (examples/torch_rmsnorm.py) against torch's ``rms_norm``,
on the GPU, same run: the forward and backward alone (GB/s), and a training step of the
example's model, compiled with ``torch.compile(fullgraph=True)`` in its default mode and in
``mode="reduce-overhead"`` (CUDA graphs of the forward and backward), and captured whole in
one CUDA graph (ms per step): on tilelang's norm with the residual add fused in
(``AddRMSNorm``, as Inductor fuses it into torch's), on tilelang's norm beside a separate
add (``RMSNorm``), and on torch's.

    python benchmarks/torch_rmsnorm.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import statistics
import time

import torch
from example_module import load_example
from timing import time_ms

example = load_example("torch_rmsnorm")


def torch_rms_norm(x, w, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def op_rows(rows, n, dtype):
    """GB/s of the forward (x read, y written) and of forward + backward (x twice, dy, the
    weight's gradient and dx: 5 row-sized transfers) for tilelang, torch eager and compiled."""
    x = torch.randn(rows, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    impls = {
        "tilelang": lambda x, w: example.rms_norm(x, w, 1e-6)[0],
        "torch": lambda x, w: torch_rms_norm(x, w, 1e-6),
        "torch.compile": torch.compile(lambda x, w: torch_rms_norm(x, w, 1e-6)),
    }
    want = torch_rms_norm(x.double(), w.double(), 1e-6)
    out = {}
    for name, fn in impls.items():
        err = float((fn(x, w).detach().double() - want).abs().max())
        assert err < 0.1, f"{name}: error {err}"
        size = x.numel() * x.element_size()
        forward = time_ms(lambda fn=fn: fn(x, w), warmup=20)
        both = time_ms(lambda fn=fn: torch.autograd.grad(fn(x, w), (x, w), dy), warmup=20)
        out[name] = (2 * size / forward / 1e6, 5 * size / both / 1e6)
    return out


def call_overhead_us():
    """Microseconds a call of a 16x1024 forward takes when the host, not the GPU, is the limit."""
    x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    out = {}
    calls = {"tilelang op": lambda: example.rms_norm(x, w, 1e-6), "torch": lambda: torch_rms_norm(x, w, 1e-6)}
    for name, fn in calls.items():
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            fn()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - start) / 2000 * 1e6
    return out


HOW = ("compiled", "reduce-overhead", "CUDA graph")  # how a training step runs (training_step)


def training_step(tokens, dim, depth, dtype, rounds=5, steps=30, how="compiled"):
    """ms per training step of the example's model (SGD, MSE loss), tilelang's norms or torch's:
    wall time of ``steps`` steps back to back (what a training loop sees, host included),
    median of ``rounds`` rounds taken in turn between the models. ``how``: ``"compiled"``
    (torch.compile, its default mode), ``"reduce-overhead"`` (torch.compile's mode that
    replays the forward and backward graphs as CUDA graphs: what a host-bound model is
    compiled with), ``"CUDA graph"`` (compiled, then the whole step, SGD included, captured
    once and replayed: the GPU's time, without the host's)."""
    x = torch.randn(tokens, dim, device="cuda", dtype=dtype)
    target = torch.randn(tokens, dim, device="cuda")
    steps_of = {}
    norms = {"tilelang": example.AddRMSNorm, "tilelang, add unfused": example.RMSNorm, "torch": example.TorchRMSNorm}
    mode = "reduce-overhead" if how == "reduce-overhead" else None
    for name, norm in norms.items():
        net = example.model(dim, depth, norm, "cuda", dtype)
        optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
        compiled = torch.compile(net, fullgraph=True, mode=mode)
        steps_of[name] = functools.partial(example.train_step, compiled, optimizer, x, target)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # (compiles; warm-up outside any capture)
            for _ in range(5):
                steps_of[name]()
        torch.cuda.current_stream().wait_stream(side)
        if how == "CUDA graph":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                loss = steps_of[name]()
            # (the graph reads and writes the model's parameters and gradients: the step keeps them alive)
            steps_of[name] = functools.partial(_replay, graph, (loss, steps_of[name]))
    times = {name: [] for name in steps_of}
    for _ in range(rounds):
        for name, step in steps_of.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def _replay(graph, kept):
    graph.replay()
    return kept[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    opts = parser.parse_args()
    torch._dynamo.config.recompile_limit = 64  # (each model compiles the blocks' code again: 12 models here)
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}", ""]
    lines += ["| rows x n, dtype | impl | forward GB/s | forward + backward GB/s |", "|---|---|---|---|"]
    for rows, n, dtype in ((16384, 4096, torch.bfloat16), (4096, 8192, torch.bfloat16), (16384, 4096, torch.float32)):
        for name, (fwd, both) in op_rows(rows, n, dtype).items():
            lines.append(f"| {rows}x{n} {str(dtype)[6:]} | {name} | {fwd:.0f} | {both:.0f} |")
    lines += ["", "| training step (tokens, dim, blocks, dtype) | tilelang ms | tilelang, add unfused ms | torch ms |"
              " torch / tilelang | torch / unfused |", "|---|---|---|---|---|---|"]  # fmt: skip
    for tokens, dim, depth in ((8192, 1024, 4), (16384, 4096, 2)):
        for how in HOW:
            t = training_step(tokens, dim, depth, torch.bfloat16, how=how)
            case = f"{tokens}, {dim}, {depth}, bf16, {how}"
            fused, unfused, torch_ms = t["tilelang"], t["tilelang, add unfused"], t["torch"]
            lines.append(f"| {case} | {fused:.3f} | {unfused:.3f} | {torch_ms:.3f} | {torch_ms / fused:.3f} | "
                         f"{torch_ms / unfused:.3f} |")  # fmt: skip
    overhead = call_overhead_us()
    per_call = ", ".join(f"{k} {v:.1f} us" for k, v in overhead.items())
    lines += ["", f"host time per call, 16x1024 bf16 forward: {per_call}"]
    text = "\n".join(lines)
    print(text)
    if opts.out:
        pathlib.Path(opts.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
