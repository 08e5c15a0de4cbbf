"""Cold compile time of a fixed set of kernels (and the backward kernels of
examples/attention.py), each in a fresh process with an empty cache.

    python benchmarks/compile_time.py [--backends cuda,cpu] [--only NAME,...] [--out table.md]

For every kernel and backend a child process (empty TILELANG_CACHE_DIR, and an empty
TRITON_CACHE_DIR for Triton) compiles one specialization and reports seconds per stage:
tilelang's own (trace, simplify, layouts, lower, emit: the LLVM IR) from
``CompiledKernel.timings``; on ``cuda`` NVVM, the nvJitLink step to a cubin and, with a GPU,
loading it (the CUDA context is made before the clock starts); on ``cpu`` MCJIT's compile
to machine code (the first launch on tiny arrays, less a second launch). Without a GPU the cuda
column stops at the cubin (PTX for sm_90). Triton's figure is its first launch in a
fresh process (compile and launcher included), where Triton and a GPU are present.
"warm s" is a second fresh process on the cache the first one filled: tracing and lowering
again, then the cubin read from disk (cpu: compiled again, nothing is cached on disk).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from example_module import load_example

import tilelang as tl

# ------------------------------------------------------------------------ kernels


@tl.tile_kernel
def vector_add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


@tl.tile_kernel
def softmax_rows(x, out, BLOCK: tl.Constant):
    t = tl.load(x, index=(tl.block_id(0), 0), shape=(1, BLOCK), padding=float("-inf"))
    e = tl.exp(t - tl.max(t))
    tl.store(out, e / tl.sum(e), index=(tl.block_id(0), 0))


@tl.tile_kernel
def layernorm_rows(x, w, b, out, N, eps, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    mean = tl.sum(t, axis=1, keepdims=True) / N
    d = tl.where(tl.arange(0, BLOCK)[None, :] < N, t - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(d * d, axis=1, keepdims=True) / N + eps)
    weight = tl.load(w, index=(0,), shape=(BLOCK,)).astype(tl.float32)[None, :]
    bias = tl.load(b, index=(0,), shape=(BLOCK,)).astype(tl.float32)[None, :]
    tl.store(out, (d * rstd * weight + bias).astype(out.dtype), index=(i, 0))


@tl.tile_kernel
def matmul(a, b, c, K, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc, index=(i, j))


@tl.tile_kernel
def attention_forward(q, k, v, out, L, scale, BM: tl.Constant, BN: tl.Constant, D: tl.Constant):
    """One (head, query block): online softmax over the key blocks (float16 in, float32 math)."""
    h, i = tl.block_id(1), tl.block_id(0)
    qt = tl.load(q, index=(h, i, 0), shape=(1, BM, D)).reshape((BM, D))
    m = tl.full((BM,), float("-inf"), tl.float32)
    s_sum = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for j in tl.range(0, tl.cdiv(L, BN)):
        kt = tl.load(k, index=(h, j, 0), shape=(1, BN, D)).reshape((BN, D))
        vt = tl.load(v, index=(h, j, 0), shape=(1, BN, D)).reshape((BN, D))
        s = tl.dot(qt, tl.transpose(kt)) * scale
        s = tl.where(j * BN + tl.arange(0, BN)[None, :] < L, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        s_sum = s_sum * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.astype(tl.float16), vt, acc * alpha[:, None])
        m = m_new
    tl.store(out, (acc / s_sum[:, None]).astype(tl.float16).reshape((1, BM, D)), index=(h, i, 0))


@tl.tile_kernel
def middle_sum(x, out, BA: tl.Constant, BB: tl.Constant, BC: tl.Constant):
    """Sums a (BA, BB, BC) tile of a 3-d array over its middle axis."""
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, 0, j), shape=(BA, BB, BC))
    tl.store(out, tl.sum(t, axis=1), index=(i, j))


# name: (kernel, argument signatures, tiny arguments for a CPU launch, constants)
def _cases():
    f32, f16, bf16 = np.float32, np.float16, tl.bfloat16.np
    r = np.random.default_rng(0)

    def arr(shape, d):
        return r.standard_normal(shape).astype(d)

    def ln(d):
        return (layernorm_rows, (arr((2, 100), d), arr(100, d), arr(100, d), arr((2, 100), d), 100, 1e-5), 1)

    attention = load_example("attention")
    return {
        "vector_add": (vector_add, (arr(100, f32), arr(100, f32), arr(100, f32)), 1, {"TILE": 1024}),
        "softmax_1x4096": (softmax_rows, (arr((2, 100), f32), arr((2, 100), f32)), 2, {"BLOCK": 4096}),
        "layernorm_1x8192_f32": (*ln(f32), {"BLOCK": 8192}),
        "layernorm_1x8192_bf16": (*ln(bf16), {"BLOCK": 8192}),
        "matmul_f16_128x128x32": (
            matmul, (arr((40, 70), f16), arr((70, 30), f16), arr((40, 30), f32), 70), (1, 1),
            {"BM": 128, "BN": 128, "BK": 32},
        ),
        **{
            f"attention_fwd_64x64_d{d}": (
                attention_forward, (*(arr((1, 70, d), f16) for _ in range(4)), 70, 0.125), (2, 1),
                {"BM": 64, "BN": 64, "D": d},
            )
            for d in (64, 128)
        },
        "sum_middle_axis_4x64x64": (middle_sum, (arr((5, 70, 70), f32), arr((5, 70), f32)), (2, 2),
                                    {"BA": 4, "BB": 64, "BC": 64}),
        "attention_fwd_example_128x128_d128": (  # (the example's forward in the tiles the H200 tunes it to)
            attention.attention_tuned.variant(attention.CONFIGS[3]), (*(arr((1, 2, 70, 128), f16) for _ in range(4)),
            arr((1, 2, 70), f32), 0.125), (1, 2, 1), {"CAUSAL": True, "D": 128, **attention.CONFIGS[3].constants},
        ),
        **{name: case for d in (64, 128) for name, case in _attention_backward(arr, d, attention).items()},
    }  # fmt: skip


def _attention_backward(arr, d, ex):
    """The backward kernels of examples/attention.py (the module ``ex``, causal) at head dim
    ``d``, each in the config the H200 tunes it to (its largest tiles but dk/dv's at D = 128)."""
    q, lse = arr((1, 2, 70, d), np.float16), arr((1, 2, 70), np.float32)
    dq, dkdv = ex.DQ_CONFIGS[0 if d == 64 else 2], ex.DKDV_CONFIGS[2 if d == 64 else 1]
    return {
        f"attention_bwd_dq_d{d}": (ex.backward_dq_tuned.variant(dq), (q, q, q, q, q, lse, lse, q, 0.125), (1, 2, 1),
                                   {"CAUSAL": True, "D": d, **dq.constants}),
        f"attention_bwd_dkdv_d{d}": (ex.backward_dkdv_tuned.variant(dkdv), (q, q, q, q, lse, lse, q, q, 0.125),
                                     (1, 2, 1), {"CAUSAL": True, "D": d, **dkdv.constants}),
    }  # fmt: skip


# ------------------------------------------------------------------- one child


def _child(name: str, backend: str) -> dict:
    """Compile ``name`` once on ``backend`` (in this fresh process) and time its stages."""
    kernel, args, grid, constants = _cases()[name]
    times, gpu = {}, False
    if backend == "cuda":
        from tilelang._runtime import gpu_available

        gpu = gpu_available()
        if gpu:
            from cuda.core import Device

            Device(0).set_current()  # the context is not the compiler's time
    start = time.perf_counter()
    arguments = kernel.bind(args, constants)
    key, _ = kernel.specialize(arguments)
    compiled = kernel.compile(key, backend)
    times.update(getattr(compiled, "timings", {}))  # (commits before the timings: the total only)
    if backend == "cuda":
        from tilelang._backends.cuda import DEFAULT_CC, load_cached

        if load_cached(compiled.backend_kernel.digest, DEFAULT_CC) is None:  # (a warm start reads the cubin)
            t0 = time.perf_counter()
            compiled.backend_kernel.ptx()
            times["nvvm"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled.backend_kernel.cubin()
        times["link"] = time.perf_counter() - t0
        if gpu:
            t0 = time.perf_counter()
            compiled.backend_kernel.launcher(0)
            times["load"] = time.perf_counter() - t0
        resources = compiled.backend_kernel.resources()
    else:
        t0 = time.perf_counter()
        kernel[grid](*args, backend=backend, **constants)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        kernel[grid](*args, backend=backend, **constants)
        times["jit"] = first - (time.perf_counter() - t0)
        resources = {}
    times["total"] = time.perf_counter() - start
    source = compiled.stages["llvm_ir"]
    return {"times": times, "lines": source.count("\n"), "resources": resources}


# ------------------------------------------------------------------ the parent


def _run_child(name, backend):
    """The cold compile (a fresh process, an empty cache), then a warm start (a second fresh
    process on the cache the first one left)."""
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TILELANG_CACHE_DIR=cache, PYTHONUNBUFFERED="1")
        env.pop("TILELANG_DEBUG", None)
        cmd = [sys.executable, __file__, "--child", name, "--backends", backend]
        for _ in range(2):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode:
                return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {**runs[0], "warm": runs[1]["times"]["total"]}


STAGES = ["trace", "simplify", "layouts", "lower", "emit", "nvvm", "link", "load", "jit"]


def _row(name, backend, result, triton):
    if "error" in result:
        return f"| {name} | {backend} | error: {result['error']} |" + " |" * (len(STAGES) + 4)
    t = result["times"]
    cells = [f"{t[s]:.2f}" if s in t else "" for s in STAGES]
    regs = result["resources"].get("registers", "")
    stack = result["resources"].get("stack", "")
    tri = f"{triton:.2f}" if triton else ""
    total = f"**{t['total']:.2f}**"
    warm = f"{result['warm']:.2f}" if "warm" in result else ""
    return (
        f"| {name} | {backend} | {total} | {' | '.join(cells)} | {warm} | {result['lines']} | {regs}/{stack} | {tri} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cuda,cpu")
    parser.add_argument("--only", help="comma-separated kernel names")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--no-triton", action="store_true", help="skip Triton's compiles")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.backends)))
        return
    names = args.only.split(",") if args.only else list(_cases())
    head = ["kernel", "backend", "total s", *STAGES, "warm s", "code lines", "regs/stack", "Triton s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    print("\n".join(lines), flush=True)
    triton_times = {} if args.no_triton else _triton_times(names)
    for name in names:
        for backend in args.backends.split(","):
            lines.append(
                _row(name, backend, _run_child(name, backend), triton_times.get(name) if backend == "cuda" else None)
            )
            print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def _triton_times(names) -> dict:
    """Triton's cold first launch of the equivalent kernels (benchmarks/compile_time_triton.py),
    each in a fresh process with an empty cache; empty without Triton or a GPU."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_time_triton.py")
    out = {}
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            done = subprocess.run([sys.executable, script, name], env=env, capture_output=True, text=True, timeout=600)
        if "no triton" in done.stdout + done.stderr:  # (said on stdout, with returncode 0)
            break
        if done.returncode == 0 and done.stdout.strip():
            out[name] = float(done.stdout.strip().splitlines()[-1])
    return out


if __name__ == "__main__":
    main()
