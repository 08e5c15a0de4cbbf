"""Attention forward: examples/attention.py against torch's scaled_dot_product_attention and a
Triton fused-attention kernel in the style of Triton's tutorial, same run.

    python benchmarks/attention.py [--quick] [--configs] [--backward] [--lengths 1024,4096,16384]

Each case checks tilelang's output against SDPA's (random inputs, output poisoned first),
then times both with CUDA events (median) and reports TFLOP/s: 4 * batch * heads * L^2 * D
flops, half of that when causal (the work a causal kernel skips is not counted). tilelang's
is the example's autotuned kernel (its choice shown; the first case of each shape tunes it);
``--configs`` also times every config of it, to check the choice against the best (issue 16:
within 5%). ``--backward`` also times the backward pass (dq, dk, dv from the forward's out and
lse) against SDPA's, checked against SDPA's gradients; its TFLOP/s count 2.5 times the
forward's flops (five products where the forward has two), FlashAttention's convention.
Each case's timings are taken in turn, ``--rounds`` times (3), the median of each kept: a
drift of the clock moves all of them alike. ``--sdpa`` holds SDPA to one backend: ``flash``
(the default: FlashAttention-2, the peer issue 15 names), ``cudnn``, ``efficient``, or
``any`` (torch's own pick, which is free to differ from one process to the next).
"""

from __future__ import annotations

import argparse
import math

from example_module import load_example
from timing import interleaved_ms, time_ms

import tilelang as tl

example = load_example("attention")


def config_times(torch, q, k, v, causal) -> str:
    """Each of the example's configs timed on these inputs, TFLOP/s-ready milliseconds as text."""
    batch, heads, length, d = q.shape
    out, lse, parts = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32), []
    for config in example.CONFIGS:
        kernel = example.attention_tuned.variant(config)
        grid = (tl.cdiv(length, config.constants["BM"]), heads, batch)

        def run(kernel=kernel, grid=grid, config=config):
            kernel[grid](q, k, v, out, lse, 1 / math.sqrt(d), CAUSAL=causal, D=d, **config.constants)

        try:
            run()
            parts.append(f"{config.label()}: {time_ms(run, torch):.4f} ms")
        except Exception as err:  # noqa: BLE001 - a config that does not fit: say so, go on
            parts.append(f"{config.label()}: {type(err).__name__}")
    return "; ".join(parts)


def sdpa_function(torch, backend: str):
    """torch's scaled_dot_product_attention held to ``backend`` (see the module's docstring);
    the backward pass runs the backend the forward ran."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if backend == "any":
        return sdpa
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]  # fmt: skip

    def held(*args, **kwargs):
        with sdpa_kernel(chosen):
            return sdpa(*args, **kwargs)

    return held


def backward_case(torch, sdpa, q, k, v, causal, flops, rounds=3) -> str:
    """The backward pass of the example and of SDPA on one case, as a line of text."""
    dout = torch.randn_like(q)
    out, lse = example.attention(q, k, v, causal=causal, with_lse=True)
    grads = example.attention_backward(q, k, v, out, lse, dout, causal=causal)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    o = sdpa(*leaves, is_causal=causal)
    want = torch.autograd.grad(o, leaves, dout, retain_graph=True)
    err = max((g.float() - w.float()).abs().max().item() for g, w in zip(grads, want))
    ours, theirs = interleaved_ms(
        {
            "ours": lambda: example.attention_backward(q, k, v, out, lse, dout, causal=causal),
            "sdpa": lambda: torch.autograd.grad(o, leaves, dout, retain_graph=True),
        },
        rounds,
    ).values()
    a, b = 2.5 * flops / ours / 1e9, 2.5 * flops / theirs / 1e9
    return f"    backward: tilelang {a:7.1f}  SDPA {b:7.1f} TFLOP/s  ratio {a / b:.3f}  max |diff| {err:.2g}"


def bench_attention(torch, quick=False, configs=False, backward=False, sdpa_backend="flash", rounds=3,
                    lengths=(4096,), dtypes=("float16", "bfloat16")) -> str:  # fmt: skip
    """The table of every case: ``lengths`` at 8 x 4096 tokens a batch (32 heads at D = 64, 16 at
    D = 128), each causal and not, in each of ``dtypes``."""
    sdpa = sdpa_function(torch, sdpa_backend)
    try:
        from triton_attention import attention as triton_run
    except ImportError:  # (no Triton here)
        triton_run = None
    rows = []
    cases = [(max(1, 8 * 4096 // n), heads, n, d) for n in lengths for heads, d in ((32, 64), (16, 128))]
    for batch, heads, length, d in [(4, 32, 1024, 64)] if quick else cases:
        for causal in (False, True):
            for dtype in (getattr(torch, name) for name in dtypes):
                q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=dtype) for _ in range(3))
                want = sdpa(q, k, v, is_causal=causal)
                got = example.attention(q, k, v, causal=causal)
                err = (got.float() - want.float()).abs().max().item()
                flops = 4 * batch * heads * length * length * d / (2 if causal else 1)
                case = f"{batch}x{heads}x{length}x{d} {'causal' if causal else 'full'} {str(dtype)[6:]}"
                runs = {
                    "ours": lambda q=q, k=k, v=v, c=causal: example.attention(q, k, v, causal=c),
                    "sdpa": lambda q=q, k=k, v=v, c=causal: sdpa(q, k, v, is_causal=c),
                }
                chosen = list(example.attention_tuned.choices.values())[-1].label()  # (this case's: its key is new)
                tri_err = float("nan")
                if triton_run is not None:
                    tri_err = (triton_run(q, k, v, causal).float() - want.float()).abs().max().item()
                    runs["triton"] = lambda q=q, k=k, v=v, c=causal: triton_run(q, k, v, c)
                ms = interleaved_ms(runs, rounds)
                ours = ms["ours"]
                a, b, tri = (flops / ms[n] / 1e9 if n in ms else float("nan") for n in ("ours", "sdpa", "triton"))
                rows.append((case, a, b, tri, err))
                print(f"{case:34s} tilelang {a:7.1f}  SDPA {b:7.1f}  Triton {tri:7.1f} TFLOP/s  ratio {a / b:.3f} "
                      f"(to Triton {a / tri:.3f})  max |diff| {err:.2g} (Triton's {tri_err:.2g})  ({chosen}, "
                      f"{ours:.4f} ms)", flush=True)  # fmt: skip
                if configs:
                    print(f"    configs: {config_times(torch, q, k, v, causal)}", flush=True)
                if backward:
                    print(backward_case(torch, sdpa, q, k, v, causal, flops, rounds), flush=True)
    table = f"SDPA's backend: {sdpa_backend}\n\n"
    table += "| case | tilelang TFLOP/s | SDPA TFLOP/s | Triton TFLOP/s | vs SDPA | vs Triton | max abs diff |\n"
    table += "|---|---|---|---|---|---|---|\n"
    return table + "".join(
        f"| {c} | {a:.1f} | {b:.1f} | {t:.1f} | {a / b:.3f} | {a / t:.3f} | {e:.2g} |\n" for c, a, b, t, e in rows
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--configs", action="store_true", help="time every config of the autotuned kernel too")
    parser.add_argument("--backward", action="store_true", help="time the backward pass too")
    parser.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "efficient", "any"])
    parser.add_argument("--rounds", type=int, default=3, help="each timing taken in turn this many times (median)")
    parser.add_argument("--lengths", default="4096", help="sequence lengths, comma-separated (8 x 4096 tokens a batch)")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--out")
    opts = parser.parse_args()
    import torch

    print(f"SDPA's backend: {opts.sdpa}", flush=True)
    lengths, dtypes = [int(n) for n in opts.lengths.split(",")], opts.dtypes.split(",")
    table = bench_attention(torch, opts.quick, opts.configs, opts.backward, opts.sdpa, opts.rounds, lengths, dtypes)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(f"# attention forward on {torch.cuda.get_device_name()}\n\n" + table)


if __name__ == "__main__":
    main()
