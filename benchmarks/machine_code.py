"""tilelang's machine code beside Triton's for the row kernels of benchmarks/rows.py, without
a GPU: registers, PTX lines and the SASS instructions of each (their count and the kinds
that decide a memory-bound kernel's speed: 16-byte global accesses, shared memory and
barriers, shuffles, MUFU, float64 and conversions, calls, branches).

tilelang's SASS is its cubin (NVVM, then ptxas through nvJitLink) disassembled by
``nvdisasm``; Triton's kernel (the one run.py times, the tutorial's warps rule unless
``--threads``) is compiled for sm_90 with the hints a launch on aligned arrays gives
(pointers, strides and lengths divisible by 16). Both are static counts: a count says what
a thread may execute (two versions of a loop count twice), not how fast; time them on a
GPU (benchmarks/run.py). Needs ``nvdisasm`` (CUDA's, or the one bundled with Triton).

    python benchmarks/machine_code.py [softmax layernorm ...] [--n 4096] [--threads 256] [--sass DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import tempfile

import ml_dtypes
import numpy as np
import rows
from example_module import load_example

import tilelang as tl

BF16, F32, F8 = ml_dtypes.bfloat16, np.float32, ml_dtypes.float8_e4m3fn


def _arrays(*specs):
    return lambda n: [np.zeros(tuple(n if d == "n" else d for d in shape), dtype) for shape, dtype in specs]


ROWS = {"stride": "i32", "N": "i32"}
# kind -> (tilelang kernel, its arguments for rows of n, index of rows.triton_kernels' kernel, its signature)
CASES = {
    "softmax f32": (rows.softmax, _arrays(((4, "n"), F32), ((4, "n"), F32)), 2, {"X": "*fp32", "Y": "*fp32", **ROWS}),
    "softmax bf16": (
        rows.softmax,
        _arrays(((4, "n"), BF16), ((4, "n"), BF16)),
        2,
        {"X": "*bf16", "Y": "*bf16", **ROWS},
    ),
    "layernorm bf16": (
        rows.layernorm,
        lambda n: [*_arrays(((4, "n"), BF16), (("n",), BF16), (("n",), BF16), ((4, "n"), BF16))(n), n, 1e-5],
        0,
        {"X": "*bf16", "W": "*bf16", "B": "*bf16", "Y": "*bf16", **ROWS, "eps": "fp32"},
    ),
    "rmsnorm bf16": (
        rows.rmsnorm_rows,
        lambda n: [*_arrays(((4, "n"), BF16), (("n",), BF16), ((4, "n"), BF16))(n), n, 1e-5],
        1,
        {"X": "*bf16", "W": "*bf16", "Y": "*bf16", **ROWS, "eps": "fp32"},
    ),
    "recurrence f32": (
        rows.recurrence_rows.fn,
        _arrays(*[((4, "n"), F32)] * 3),
        3,
        {"A": "*fp32", "X": "*fp32", "H": "*fp32", **ROWS},
    ),
    "quantize bf16": (
        load_example("fp8_quantize").quantize_rows.fn,
        _arrays(((4, "n"), BF16), ((4, "n"), F8), ((4,), F32)),
        4,
        {"X": "*bf16", "Q": "*fp8e4nv", "S": "*fp32", **ROWS},
    ),
}
# what decides a memory-bound kernel's speed, by SASS opcode prefix
KINDS = {"LDG.128": r"LDG\.E\.128", "STG.128": r"STG\.E\.128", "LDG/STG other": r"(LDG|STG)(?!\.E\.128)",
         "shared": r"(LDS|STS)", "BAR": r"BAR", "SHFL": r"SHFL", "MUFU": r"MUFU", "F2F": r"F2F",
         "f64": r"D(FMA|MUL|ADD|SETP)", "CALL": r"CALL", "BRA": r"BRA"}  # fmt: skip


def nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import triton

        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
        return bundled if os.path.exists(bundled) else None
    except ImportError:
        return None


def _read(cubin: bytes, *command) -> str:
    """What ``command`` (a CUDA binary tool) prints of ``cubin``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        return subprocess.run([*command, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)


def opcodes(cubin: bytes, tool: str) -> tuple[str, list]:
    text = _read(cubin, tool, "-c")
    return text, re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)


def ours(kind: str, n: int, threads: int | None):
    """tilelang's (PTX, cubin, threads) for ``kind``, built as a launch builds them (no GPU)."""
    fn, args_of, *_ = CASES[kind]
    kernel = tl.tile_kernel(fn, **({"num_threads": threads} if threads else {}))
    key, _ = kernel.specialize(kernel.bind(args_of(n), {"BLOCK": n}))
    code = kernel.compile(key, "cuda").backend_kernel
    return code.ptx(), code.cubin()[0], code.resources()["threads"]


def theirs(kind: str, n: int, warps: int):
    import triton
    from triton.backends.compiler import GPUTarget

    _, _, index, signature = CASES[kind]
    fn = rows.triton_kernels(triton)[index]
    signature = signature | {"BLOCK": "constexpr"}
    aligned = [(fn.arg_names.index(k),) for k, v in signature.items() if v.startswith("*") or k in ROWS]
    source = triton.compiler.ASTSource(fn, signature=signature, constexprs={"BLOCK": n},
                                       attrs={a: [["tt.divisibility", 16]] for a in aligned})  # fmt: skip
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    return compiled.asm["ptx"], compiled.asm["cubin"]


def registers(cubin: bytes, tool: str) -> str:
    """ptxas's count, read back from the cubin by cuobjdump (beside nvdisasm)."""
    found = re.search(r"REG:(\d+)", _read(cubin, os.path.join(os.path.dirname(tool), "cuobjdump"), "-res-usage"))
    return found.group(1) if found else "?"


def row(name, ptx, cubin, tool, sass_dir):
    text, ops = opcodes(cubin, tool)
    if sass_dir:
        os.makedirs(sass_dir, exist_ok=True)
        with open(os.path.join(sass_dir, name.replace(" ", "_") + ".sass"), "w") as f:
            f.write(text)
    counts = collections.Counter(ops)
    kinds = [sum(c for op, c in counts.items() if re.match(p, op)) for p in KINDS.values()]
    cells = [name, registers(cubin, tool), len(ptx.splitlines()), len(ops), *kinds]
    return "| " + " | ".join(map(str, cells)) + " |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="*", help=f"some of: {', '.join(CASES)} (a prefix will do; default all)")
    parser.add_argument("--n", type=int, default=4096, help="row length, a power of two (the tile)")
    parser.add_argument("--threads", type=int, default=None, help="both kernels' threads (default: each one's own)")
    parser.add_argument("--sass", help="a directory to write each kernel's SASS to")
    opts = parser.parse_args()
    tool = nvdisasm()
    if tool is None:
        raise SystemExit("needs nvdisasm: CUDA's (on PATH), or Triton's bundled one (pip install triton)")
    header = "| kernel | registers | PTX lines | SASS | " + " | ".join(KINDS) + " |"
    print(header + "\n" + "|---" * (header.count("|") - 1) + "|")
    for kind in [k for k in CASES if not opts.kinds or any(k.startswith(w) for w in opts.kinds)]:
        ptx, cubin, threads = ours(kind, opts.n, opts.threads)
        print(row(f"{kind} tilelang {threads} thr", ptx, cubin, tool, opts.sass), flush=True)
        warps = (opts.threads or 32 * rows.warps_for(opts.n)) // 32
        try:
            print(row(f"{kind} Triton {warps}w", *theirs(kind, opts.n, warps), tool, opts.sass), flush=True)
        except ImportError:
            print(f"| {kind} Triton | (not installed) |")


if __name__ == "__main__":
    main()
