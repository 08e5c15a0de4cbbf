"""The CUDA backend's PTX for sm_90, compiled with no GPU, read where it proves a property:
16-byte vector accesses, warp shuffles for reductions, no local memory (spills)."""

import re

import pytest
import rows
from _blocks import rounded_matmul, tiled_matmul

import tilelang as tl
from tilelang._ir.core import ArrayType


@tl.tile_kernel
def vector_add(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


@tl.tile_kernel
def softmax(x, out, BLOCK: tl.Constant):
    row = tl.block_id(0)
    t = tl.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf"))
    e = tl.exp(t - tl.max(t))
    tl.store(out, e / tl.sum(e), index=(row, 0))


@tl.tile_kernel
def row_sums(x, out, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    acc = tl.zeros((BM,), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BN)):
        acc += tl.sum(tl.load(x, index=(i, k), shape=(BM, BN)), axis=1)
    tl.store(out, acc, index=(i,))


def explain(kernel, *signature, **constants):
    return tl.explain(kernel, *signature, backend="cuda", **constants)


def instructions(ptx):
    return set(re.findall(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", ptx, re.M))


def sixteen_bytes(ops, kind):
    """The 16-byte global accesses among ``ops`` (``kind``: "ld" or "st"): 4 32-bit words or
    2 64-bit ones, of any type (a predicated load moves ``.b32`` words)."""
    return {op for op in ops if re.fullmatch(rf"{kind}\.global\.(v4\.[bfu]32|v2\.[bfu]64)", op)}


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32"])
def test_vector_add_moves_16_bytes_per_access(dtype):
    e = explain(vector_add, *[f"{dtype}[:]"] * 3, TILE=1024)
    ops = instructions(e["ptx"])
    assert sixteen_bytes(ops, "ld") and sixteen_bytes(ops, "st"), ops
    assert not {op for op in ops if ".local" in op}
    assert "spills 0 bytes stored / 0 bytes loaded" in e["resources"]


def test_half_precision_vectors_carry_eight_elements():
    ptx = explain(vector_add, "bf16[:]", "bf16[:]", "bf16[:]", TILE=2048)["ptx"]
    ops = instructions(ptx)
    assert sixteen_bytes(ops, "ld") and sixteen_bytes(ops, "st"), ops  # 8 bfloat16 in one 16-byte access
    # the sums, computed in float32, are rounded to bfloat16 two at a time as they are packed
    # into the stored words (one F2FP each), not each on its own and then cut and shifted
    assert "cvt.rn.bf16x2.f32" in ptx and "cvt.rn.bf16.f32" not in ptx


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_float8_vectors_carry_sixteen_elements_converted_two_at_a_time(dtype):
    """16 float8 values in one 16-byte access; one cvt widens two of them (cvt.rn.f16x2.e4m3x2)
    and one rounds two sums as they are packed (cvt.rn.satfinite.e4m3x2.f32): the sums are not
    rounded on their own first, the store's conversion rounds them once."""
    e = explain(vector_add, *[f"{dtype}[:]"] * 3, TILE=4096)
    ptx = e["ptx"]

    def count(pattern):
        return len(re.findall(rf"^\s+(?:@%p\d+\s+)?{pattern}", ptx, re.M))

    loads, stores = count(r"ld\.global\.v4\.[bu]32"), count(r"st\.global\.v4\.[bu]32")
    assert loads and stores and not count(r"[ls][dt]\.global\.u8"), (loads, stores)
    assert count(r"cvt\.rn\.f16x2\.e[45]m[32]x2") == 8 * loads and count(r"cvt\.rn\.satfinite") == 8 * stores
    assert "spills 0 bytes stored / 0 bytes loaded" in e["resources"]


@tl.tile_kernel
def rmsnorm(x, w, out, N, eps, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    ms = tl.sum(t * t, axis=1, keepdims=True) / N
    wt = tl.load(w, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    tl.store(out, (t * tl.rsqrt(ms + eps) * wt[None, :]).astype(out.dtype), index=(i, 0))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_precision_rmsnorm_moves_16_bytes_and_broadcasts_its_statistic_in_registers(dtype):
    e = explain(rmsnorm, f"{dtype}[:, :]", f"{dtype}[:]", f"{dtype}[:, :]", 4096, 1e-5, BLOCK=4096)
    ops = instructions(e["ptx"])
    assert sixteen_bytes(ops, "ld") and sixteen_bytes(ops, "st"), ops  # 8 16-bit values per access, in and out
    assert f"cvt.rn.{dtype}x2.f32" in ops and f"cvt.rn.{dtype}.f32" not in ops  # .astype rounds in the pack
    assert "convert_layout" not in e["layouts"]  # the float32 math keeps the 16-bit loads' layout
    # shared memory only for the row sum across the 4 warps: each warp's lane 0 stores its partial
    # once, every thread reads the 4 (a broadcast statistic converted through shared memory would
    # store and load a tile's worth per thread)
    assert len(re.findall(r"^\s+(?:@%p\d+\s+)?st\.shared", e["ptx"], re.M)) == 1
    assert len(re.findall(r"^\s+bar\.sync", e["ptx"], re.M)) == 1  # partials written; none after reading


def test_a_threads_one_quotient_calls_no_subroutine():
    """``ms / N`` is one float32 per thread: divided correctly rounded without div.rn.f32,
    whose slow path is a subroutine call (its calling convention cost the bf16 rmsnorm 8
    registers); nor is rsqrt one."""
    ptx = explain(rmsnorm, "bf16[:, :]", "bf16[:]", "bf16[:, :]", 4096, 1e-5, BLOCK=4096)["ptx"]
    ops = instructions(ptx)
    assert not {op for op in ops if op.startswith(("call", "div.rn"))}, ops
    assert "rsqrt.approx.f32" in ops and "rcp.approx.ftz.f64" in ops


def test_quotients_by_one_divisor_share_its_reciprocal_and_call_nothing():
    """A softmax's ``e / sum``: 16 float32 quotients a thread (4096 at 256 threads) by one
    divisor, correctly rounded by fmas from its reciprocal (cuda_arith.divide_by_shared), not
    16 ``div.rn.f32`` with their subroutine calls: 48 registers then (5 blocks of 256 threads
    an SM), 34 now (groups of 4 quotients take a route together); <= 40 keeps 6 blocks."""
    e = explain(tl.tile_kernel(softmax.fn, num_threads=256), "f32[:, :]", "f32[:, :]", BLOCK=4096)
    ptx = e["ptx"]
    ops = instructions(ptx)
    assert not {op for op in ops if op.startswith(("call", "div."))}, ops
    assert "rcp.approx.ftz.f64" in ops  # (the divisor's reciprocal, refined in float64)
    assert len(re.findall(r"^\s+fma\.rn\.f32", ptx, re.M)) >= 4 * 16  # two corrections a quotient
    assert int(re.search(r"registers per thread (\d+)", e["resources"]).group(1)) <= 40


def test_a_threads_vector_accesses_go_back_to_back_when_all_are_whole():
    """One test for all of a thread's groups, then their 16-byte accesses with no branch
    between (a test and branch around each made a bfloat16 layernorm 18-29% slower on the
    H200); the group-by-group code stays for windows at an edge or unaligned. (float32 rows of
    4096 at 128 threads: 8 groups a thread; 4 or fewer load predicated, the next test.)"""
    at_128 = tl.tile_kernel(rmsnorm.fn, num_threads=128)
    ptx = explain(at_128, "f32[:, :]", "f32[:]", "f32[:, :]", 4096, 1e-5, BLOCK=4096)["ptx"]
    per_thread = 4096 // 128 // 4  # groups of the row each thread loads and stores
    for access in ("ld.global.v4", "st.global.v4"):
        assert _most_without_a_branch(ptx, access) == per_thread, access
    assert len(re.findall(r"ld\.global\.v4", ptx)) == 2 * 2 * per_thread  # x and w: both versions


def test_up_to_four_groups_a_thread_load_predicated_with_no_branch():
    """bfloat16 rows of 4096, 4 groups of 8 a thread: each group one predicated 16-byte load
    (zeros moved in first), no second version and no branch around them, so ptxas places each
    where it likes (a layernorm's weights and biases: 78 -> 62 registers); the weight's
    after the row's reduction (schedule_loads: held through it, 68 registers, not 58)."""
    e = explain(rmsnorm, "bf16[:, :]", "bf16[:]", "bf16[:, :]", 4096, 1e-5, BLOCK=4096)
    loads = re.findall(r"^\s+(@%p\d+ )?ld\.global\.(\S+)", e["ptx"], re.M)
    assert [(bool(predicate), op) for predicate, op in loads] == [(True, "v4.b32")] * 8, loads  # x's 4, w's 4
    assert _most_without_a_branch(e["ptx"], "ld.global.v4") == 4  # x's four, the reduction, w's four
    assert int(re.search(r"registers per thread (\d+)", e["resources"])[1]) <= 60, e["resources"]


@pytest.mark.parametrize("dtype, pad, words", [("bf16", float("-inf"), 0xFF80FF80), ("f16", -1.5, 0xBE00BE00)])
def test_a_predicated_load_moves_its_padding_in_first(dtype, pad, words):
    """Lanes past the row's end read the padding: each predicated load's registers first take
    two of its 16-bit patterns a word (a negative 16-bit constant once failed to compile)."""

    @tl.tile_kernel
    def padded(x, out, BLOCK: tl.Constant):
        t = tl.load(x, index=(tl.block_id(0), 0), shape=(1, BLOCK), padding=pad)
        tl.store(out, t, index=(tl.block_id(0), 0))

    ptx = explain(padded, f"{dtype}[:, :]", f"{dtype}[:, :]", BLOCK=4096)["ptx"]
    fills = re.findall(r"mov\.b32 \t?%r\d+, (\d+);", ptx)
    assert len(fills) == 16 and set(fills) == {str(words)}, fills  # 4 groups of 4 words a thread
    assert len(re.findall(r"@%p\d+ ld\.global\.v4\.b32", ptx)) == 4


@pytest.mark.parametrize("dtype, block, threads", [("f32", 4096, 256), ("f32", 4096, 512), ("bf16", 8192, 512)])
def test_float32_words_and_large_blocks_keep_their_loads_together(dtype, block, threads):
    """Predicated, ptxas issued a float32 layernorm's (weight, bias) pairs one latency after
    another (0.0407 -> 0.0492 ms at 512 threads) and gave an 8192-wide bf16 rmsnorm at 512
    threads 8 more registers (0.0387 -> 0.0449 ms): these keep the one test of all groups."""
    kernel = tl.tile_kernel(rmsnorm.fn, num_threads=threads)
    ptx = explain(kernel, f"{dtype}[:, :]", f"{dtype}[:]", f"{dtype}[:, :]", block, 1e-5, BLOCK=block)["ptx"]
    assert not re.search(r"@%p\d+ ld\.global", ptx) and re.search(r"ld\.global\.v4", ptx)


def _most_without_a_branch(ptx: str, access: str) -> int:
    """The most ``access`` instructions in a row with no branch or label between them."""
    most = run = 0
    for line in ptx.splitlines():
        if line.startswith("$") or re.match(r"\s+(@%p\d+\s+)?bra", line):
            run = 0
        elif access in line:
            run += 1
            most = max(most, run)
    return most


@tl.tile_kernel
def scaled_shift(x, w, b, out, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    t = t - tl.max(t)
    wt = tl.load(w, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    bt = tl.load(b, index=(0,), shape=(BLOCK,)).astype(tl.float32)
    tl.store(out, (t * wt[None, :] + bt[None, :]).astype(out.dtype), index=(i, 0))


def _lines(kernel, threads, block):
    kernel = tl.tile_kernel(kernel.fn, num_threads=threads)
    return explain(kernel, "bf16[:, :]", "bf16[:]", "bf16[:]", "bf16[:, :]", BLOCK=block)["thread_ir"].splitlines()


def test_loads_are_issued_before_the_work_on_their_data():
    # the widening of each load to float32 waits below the later loads (schedule_loads): a
    # thread has the weight's and the bias's loads in flight at once
    lines = _lines(scaled_shift, 128, 2048)
    loads = [k for k, line in enumerate(lines) if " = load " in line]
    widened = [k for k, line in enumerate(lines) if "from_bits" in line]
    exchanges = [k for k, line in enumerate(lines) if "shuffle_xor" in line or "barrier" in line]
    assert len(loads) == len(widened) == 3 and loads[-1] < widened[1]
    # 16 weights and 16 biases a thread (32 bytes each) stay below the row's max: held through
    # it, they took registers that cost blocks per SM (a bf16 layernorm 7% slower on the H200)
    assert [lines[k].split(" = load ")[1][0] for k in loads] == ["x", "w", "b"] and exchanges[-1] < loads[1]
    # 4 of each (8 bytes) go up past the max's exchanges, out with the row's
    lines = _lines(scaled_shift, 128, 512)
    loads = [k for k, line in enumerate(lines) if " = load " in line]
    assert sorted(lines[k].split(" = load ")[1][0] for k in loads[:2]) == ["b", "w"]
    assert loads[-1] < next(k for k, line in enumerate(lines) if "shuffle_xor" in line)
    # not at 512 threads a block (held, they cost blocks per SM)
    lines = _lines(scaled_shift, 512, 2048)
    w_load = next(k for k, line in enumerate(lines) if " = load w[" in line)
    assert next(k for k, line in enumerate(lines) if "shuffle_xor" in line) < w_load


@tl.tile_kernel(num_threads=256)  # (4 of the bias a thread: 16 bytes, hoisted)
def summed_then_scaled(x, bias, out, n, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for k in tl.range(0, n):
        acc += tl.load(x, index=(k,), shape=(T,))
    total = tl.sum(acc)
    tl.store(out, acc / total, index=(0,))
    tl.store(out, tl.load(out, index=(0,), shape=(T,)) + tl.load(bias, index=(0,), shape=(T,)), index=(0,))


def test_loads_are_not_hoisted_through_a_loop_or_past_writes_to_their_array():
    """The bias goes up past the sum's exchanges but not into or above the loop (its values would
    be held through it); out, which the kernel writes, is read where the program reads it."""
    lines = explain(summed_then_scaled, "f32[:]", "f32[:]", "f32[:]", "i64", T=1024)["thread_ir"].splitlines()
    at = {name: next(k for k, line in enumerate(lines) if f" = load {name}[" in line) for name in ("bias", "out")}
    loop_end = next(k for k, line in enumerate(lines) if line.strip().startswith("next ("))  # (the K loop's end)
    first_exchange = next(k for k, line in enumerate(lines) if "shuffle_xor" in line)
    stored = next(k for k, line in enumerate(lines) if "store out[" in line)
    assert loop_end < at["bias"] < first_exchange < stored < at["out"]


def test_softmax_reduces_with_shuffles_and_does_not_spill():
    e = explain(softmax, "f32[:, :]", "f32[:, :]", BLOCK=4096)
    ops = instructions(e["ptx"])
    assert "shfl.sync.bfly.b32" in ops  # warp-level tree
    assert "bar.sync" in ops  # then across warps through shared memory
    assert "max.NaN.f32" in ops and "setp.nan.f32" not in ops  # NumPy's maximum, one instruction
    assert sixteen_bytes(ops, "ld") and sixteen_bytes(ops, "st"), ops
    assert not {op for op in ops if ".local" in op}
    assert "spills 0 bytes stored / 0 bytes loaded" in e["resources"]


def test_loop_with_reduction_compiles():
    e = explain(row_sums, "f32[:, :]", "f32[:]", BM=16, BN=128)
    # each row's columns sit in one warp and the carried sums keep the reduction's layout:
    # no shared memory, no barrier
    assert "bar.sync" not in instructions(e["ptx"]) and "convert_layout" not in e["layouts"]
    assert "_header:" in e["llvm_ir"]  # the tl.range loop stays a loop (its header block)


def test_a_row_scan_across_warps_takes_one_barrier_and_the_totals_alone():
    """The scan's step across warps, as Triton's: each warp's totals to shared memory (8 a
    thread: two 16-byte stores from one base register, one lane of each warp writing), one
    barrier, and every thread reads the 4 warps' totals at constant addresses (broadcasts)
    and folds them in order. It had moved all 32 elements a thread through a 32 KB padded
    tile at 96 registers, then one exchange per warp bit; the row's sum is the scan's total
    (no reduction of its own): the fold's and the loop end's are all the barriers."""
    e = explain(rows.row_cumsum, "f32[:, :]", "f32[:, :]", BLOCK=4096)
    ptx = e["ptx"]
    stores = re.findall(r"st\.shared\.v4\.[fu]32\s+\[(%rd\d+)(?:\+\d+)?\]", ptx)
    loads = re.findall(r"ld\.shared\.v4\.f32\s+\{[^}]*\}, \[(smem_float32_\d+)(?:\+\d+)?\]", ptx)
    assert len(stores) == 2 and len(set(stores)) == 1 and len(loads) == 8, re.findall(r"\w+\.shared[^;]*", ptx)
    assert ptx.count("bar.sync") == 2 and "shared memory per block 128 bytes" in e["resources"], e["resources"]
    assert int(re.search(r"registers per thread (\d+)", e["resources"])[1]) <= 80, e["resources"]


def test_a_scan_takes_lanes_by_shuffles_up_and_combines_each_element_once():
    """Lanes as Triton's scan takes them: a Kogge-Stone scan of the threads' totals by
    ``shfl.sync.up``, one shuffle and one combine a lane bit, and the lane and warp steps'
    runs gathered into one prefix, combined into every element once. A linear recurrence of
    32 (a, x) pairs a thread (rows of 4096, 128 threads) took 339 FMAs and 570 selects with a
    butterfly that updated every element at every bit, now 187 and 200; a row cumsum 368
    adds, now 224."""
    ptx = explain(rows.recurrence_rows, "f32[:, :]", "f32[:, :]", "f32[:, :]", BLOCK=4096)["ptx"]
    assert "shfl.sync.up.b32" in ptx and "shfl.sync.bfly" not in ptx
    assert ptx.count("fma.rn.f32") <= 200 and ptx.count("selp.f32") <= 230, (ptx.count("fma.rn.f32"), ptx.count("selp"))
    assert explain(rows.row_cumsum, "f32[:, :]", "f32[:, :]", BLOCK=4096)["ptx"].count("add.f32") <= 240


def test_strided_arrays_use_scalar_accesses():
    strided = ArrayType(tl.float32, 1, unit_stride=False)
    ops = instructions(explain(vector_add, strided, "f32[:]", "f32[:]", TILE=256)["ptx"])
    assert "ld.global.f32" in ops and sixteen_bytes(ops, "ld")  # x element by element, y in vectors


def test_launch_parameters_match_the_ptx_entry():
    """The launch packs each parameter by its struct code; the PTX says what the kernel
    reads: as many parameters, each of the code's size (every scalar dtype here)."""
    import struct

    from tilelang._backends.cuda import param_codes
    from tilelang._backends.cuda_driver import PARAM_CODES

    @tl.tile_kernel
    def every(x, out, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, TILE: tl.Constant):
        i = tl.block_id(0)
        tl.store(out, tl.load(x, index=(i, 0), shape=(1, TILE)) + s0, index=(i, 0))

    scalars = [d for d in tl.dtypes.ALL_DTYPES if d.name in PARAM_CODES]
    assert len(scalars) == len(PARAM_CODES) == 15
    args = ("f64[:, :]", "f64[:, :]", *(d.short for d in scalars))
    compiled = every.compile(every.specialize(every.bind(args, {"TILE": 64}))[0], "cuda").backend_kernel
    declared = re.findall(r"\.param \.[a-z](\d+) \w+_param_\d+", compiled.ptx())
    codes = param_codes(compiled.program)
    assert codes.startswith("Qqqqq" + "Qqqqq")  # each array: pointer, shape, strides
    assert [int(bits) // 8 for bits in declared] == [struct.calcsize(code) for code in codes]


@pytest.mark.parametrize(
    "dtype, op, instruction",
    [
        ("i32", "add", "atom.add.u32"),  # the hardware's
        ("f32", "add", "atom.add.f32"),
        ("f32", "max", "atom.cas.b32"),  # NaN wins: a compare-and-swap loop
        ("f64", "min", "atom.cas.b64"),
        ("i8", "add", "atom.cas.b32"),  # on the aligned word holding the byte
        ("bf16", "max", "atom.cas.b16"),  # the 16-bit element alone
        ("u16", "add", "atom.cas.b16"),
    ],
)
def test_atomics_of_every_kind_compile(dtype, op, instruction):
    @tl.tile_kernel
    def scatter_combine(out, idx, vals, BN: tl.Constant, OP: tl.Constant):
        j = tl.block_id(0)
        at = tl.load(idx, index=(j,), shape=(BN,), padding=-1)
        {"add": tl.atomic_add, "max": tl.atomic_max, "min": tl.atomic_min}[OP](
            out, at, tl.load(vals, index=(j,), shape=(BN,))
        )

    ptx = explain(scatter_combine, f"{dtype}[:]", "i32[:]", f"{dtype}[:]", BN=64, OP=op)["ptx"]
    assert {line.split()[0] for line in ptx.splitlines() if "atom." in line} == {instruction}


@tl.tile_kernel(num_threads=128)
def layernorm(x, w, out, N, BLOCK: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BLOCK)).astype(tl.float32)
    d = tl.where(tl.arange(0, BLOCK)[None, :] < N, t - tl.sum(t, axis=1, keepdims=True) / N, 0.0)
    rstd = tl.rsqrt(tl.sum(d * d, axis=1, keepdims=True) / N + 1e-5)
    tl.store(out, (d * rstd * tl.load(w, index=(0,), shape=(BLOCK,))[None, :]).astype(out.dtype), index=(i, 0))


@tl.tile_kernel(num_threads=128)
def chain(x, out, T: tl.Constant, K: tl.Constant):
    """K rounds of elementwise math on T elements: one long loop over each thread's slots."""
    i = tl.block_id(0)
    t = tl.load(x, index=(i,), shape=(T,))
    for _ in range(K):
        t = tl.exp(t * 1.5 + 0.25) - tl.sqrt(tl.abs(t)) / (t + 3.0)
    tl.store(out, t, index=(i,))


@tl.tile_kernel(num_threads=128)
def column_argmax(x, out, BM: tl.Constant, BN: tl.Constant):
    j = tl.block_id(0)
    tl.store(out, tl.argmax(tl.load(x, index=(0, j), shape=(BM, BN)), axis=0), index=(j,))


# Tile values are register arrays the generated code loops over; NVVM must unroll those loops
# (then the arrays are registers). One it leaves rolled puts its arrays in local memory: stack.
LARGE = [
    (vector_add, ("f32[:]",) * 3, {"TILE": 8192}),  # 64 elements per thread
    (softmax, ("f32[:, :]",) * 2, {"BLOCK": 8192}),
    (row_sums, ("f32[:, :]", "f32[:]"), {"BM": 16, "BN": 512}),
    (layernorm, ("bf16[:, :]", "bf16[:]", "bf16[:, :]", "i32"), {"BLOCK": 8192}),
    (column_argmax, ("f32[:, :]", "i32[:]"), {"BM": 64, "BN": 128}),  # a fold of 64 slots, 2 at a time
    (chain, ("f32[:]",) * 2, {"T": 8192, "K": 4}),  # one rolled loop of 64 x 28 ops had a 512-byte stack
    (chain, ("f32[:]",) * 2, {"T": 4096, "K": 16}),
    (tiled_matmul, ("f16[:, :]", "f16[:, :]", "f32[:, :]"), {"BM": 128, "BN": 128, "BK": 32}),  # 64 accumulators
]


@pytest.mark.parametrize("kernel, signature, constants", LARGE, ids=[f"{k.fn.__name__}-{c}" for k, _, c in LARGE])
def test_register_arrays_stay_in_registers(kernel, signature, constants):
    e = explain(kernel, *signature, **constants)
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]
    assert not {op for op in instructions(e["ptx"]) if ".local" in op}


@pytest.mark.parametrize("kernel, signature, small, large", [
    (vector_add, ("f32[:]",) * 3, {"TILE": 1024}, {"TILE": 16384}),
    (softmax, ("f32[:, :]",) * 2, {"BLOCK": 1024}, {"BLOCK": 16384}),
    (tiled_matmul, ("f32[:, :]",) * 3, {"BM": 32, "BN": 64, "BK": 32}, {"BM": 128, "BN": 128, "BK": 64}),
])  # fmt: skip
def test_the_thread_program_does_not_grow_with_the_tile(kernel, signature, small, large):
    """The same statements apply to more slots: for a tile 16 times larger (4 doublings) the
    thread program is longer by at most a reduction tree's step (3 statements) per doubling
    per reduction, plus a few index statements (a window copied ahead in more groups a thread
    has more slot terms). (The CUDA backend builds each slot's instructions from it.)"""
    stages = [explain(kernel, *signature, **c) for c in (small, large)]
    statements = [len(e["thread_ir"].splitlines()) for e in stages]
    reductions = len(re.findall(r"shuffle_xor \S+ 1$", stages[0]["thread_ir"], re.M))  # (butterflies start so)
    assert statements[1] <= statements[0] + 4 * 3 * reductions + 12, statements


@pytest.mark.parametrize("threads, tile", [(512, 32768), (1024, 16384)])
def test_large_blocks_keep_to_the_registers_they_may_have(threads, tile):
    """A block of more than 256 threads may use at most 65536 / threads registers each: ptxas
    is told the block size (.maxntid) and spills rather than build a kernel that cannot launch."""
    wide = tl.tile_kernel(vector_add.fn, num_threads=threads)
    e = explain(wide, *["f32[:]"] * 3, TILE=tile)
    registers = int(re.search(r"registers per thread (\d+)", e["resources"]).group(1))
    assert f".maxntid {threads}" in e["ptx"] and registers * threads <= 65536, e["resources"]


@tl.tile_kernel(num_threads=256)
def two_products(a, b, c, d, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """Two accumulators in one loop (attention's backward has four)."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc, acc2 = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        x, y = tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN))
        acc, acc2 = tl.dot(x, y, acc), tl.dot(x, y * 2, acc2)
    tl.store(c, acc, index=(i, j))
    tl.store(d, acc2, index=(i, j))


@pytest.mark.parametrize("kernel, arrays, constants, two", [
    (tiled_matmul, 3, {"BM": 128, "BN": 128, "BK": 32}, True),  # 64 accumulators a thread, 32 KB a stage
    (tiled_matmul, 3, {"BM": 128, "BN": 128, "BK": 128}, False),  # 3 stages of 64 KB: one block an SM
    (two_products, 4, {"BM": 128, "BN": 128, "BK": 32}, False),  # 128 accumulators a thread
])  # fmt: skip
def test_two_blocks_an_sm_only_where_they_fit(kernel, arrays, constants, two):
    """A 256-thread tensor-core kernel is compiled for two blocks per SM (at most 128 registers
    a thread) only where two fit: in shared memory, and in registers with its products'
    accumulators (over 64 a thread, capped at 128 it would spill)."""
    kernel = tl.tile_kernel(kernel.fn, num_threads=256)
    e = explain(kernel, *["f16[:, :]"] * 2, *["f32[:, :]"] * (arrays - 2), **constants)
    assert (".minnctapersm 2" in e["ptx"]) == two, e["resources"]
    assert "spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def test_float32_dot_reads_shared_memory_16_bytes_at_a_time():
    """A float32 128x128x32 matmul on CUDA cores (256 threads, 8 x 8 results a thread): its
    tiles copied ahead with cp.async, every shared read of the dot 16 bytes (one per 16
    multiply-adds), two blocks an SM in 128 registers, no local memory; ``a @ w.T`` alike,
    from a swizzled tile."""
    for transposed in (False, True):
        kernel = tl.tile_kernel((linear_layer if transposed else tiled_matmul).fn, num_threads=256)
        e = explain(kernel, *["f32[:, :]"] * 3, BM=128, BN=128, BK=32)
        ops = re.findall(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", e["ptx"], re.M)
        assert {op for op in ops if op.startswith("ld.shared")} == {"ld.shared.v4.f32"}
        assert ops.count("ld.shared.v4.f32") * 16 == ops.count("fma.rn.f32") >= 256, e["resources"]
        assert "cp.async.cg.shared.global" in ops and ".minnctapersm 2" in e["ptx"]
        assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def _two_dots(a, b1, b2, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc1, acc2 = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        x = tl.load(a, index=(i, k), shape=(BM, BK))
        acc1 = tl.dot(x, tl.load(b1, index=(k, j), shape=(BK, BN)), acc1)
        acc2 = tl.dot(x, tl.load(b2, index=(k, j), shape=(BK, BN)), acc2)
    tl.store(c, acc1 - acc2, index=(i, j))


@pytest.mark.parametrize("kernel, arrays, bk, two, copied", [
    (tiled_matmul.fn, 3, 32, True, True),  # 64 accumulators a thread: two blocks an SM
    (_two_dots, 4, 16, False, True),  # 128: one (capped at 128 registers, 764 B spilled)
    (tiled_matmul.fn, 3, 128, False, False),  # one 128 KB stage fits, not two: staged in the loop
])  # fmt: skip
def test_float32_dots_two_blocks_an_sm_only_where_they_fit(kernel, arrays, bk, two, copied):
    """A loop of float32 dots on CUDA cores copying its tiles ahead runs two 256-thread blocks
    an SM where its accumulators take at most 64 registers a thread; stages only as many as
    a block's shared memory holds (none under two: the operands are staged each iteration)."""
    e = explain(tl.tile_kernel(kernel, num_threads=256), *["f32[:, :]"] * arrays, BM=128, BN=128, BK=bk)
    assert (".minnctapersm 2" in e["ptx"]) == two and ("async shared" in e["thread_ir"]) == copied
    assert "spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def test_tf32_dot_on_tensor_cores():
    """``precision="tf32"``, 128x128x32 on 256 threads: ``mma.sync.m16n8k8`` on operands each
    rounded once by ``cvt.rna.tf32.f32``, read one 4-byte element a lane from the tiles the
    loop copies ahead with cp.async, two blocks an SM in 128 registers, no local memory."""
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=256)
    e = explain(kernel, *["f32[:, :]"] * 3, BM=128, BN=128, BK=32, PRECISION="tf32")
    ops = re.findall(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", e["ptx"], re.M)
    mma = ops.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
    assert mma == 64 and ops.count("cvt.rna.tf32.f32") == ops.count("ld.shared.f32") == 96, e["resources"]
    assert "cp.async.cg.shared.global" in ops and ".minnctapersm 2" in e["ptx"]
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]
    # k-steps outermost: the first k-step's 16 products of a warp each start a fragment of their own
    # (each fragment's products chained back to back held every k-step's operands live at once, 160
    # registers: ptxas 13.0's nvJitLink spilled 12 bytes)
    mmas = re.findall(r"mma\.sync\S+ (\{[^}]*\}), \{[^}]*\}, \{[^}]*\}, (\{[^}]*\})", e["ptx"])
    assert len({dst for dst, _ in mmas[:16]}) == 16 and not {dst for dst, _ in mmas[:16]} & {c for _, c in mmas[:16]}


@pytest.mark.parametrize("dtype, ptx_type", [("f16", "f16"), ("bf16", "bf16")])
@pytest.mark.parametrize("tile, threads, whole", [((128, 128, 32), 256, True), ((64, 64, 32), 128, True),
                                                  ((16, 8, 16), 32, False)])  # fmt: skip
def test_16_bit_dots_run_on_tensor_cores(dtype, ptx_type, tile, threads, whole):
    """One mma.sync.m16n8k16 per fragment and k-step of each warp's share of the tile, its
    operands read from shared memory with ldmatrix (.trans for b, stored k-major), two
    16-bit values per 32-bit shared store and no scalar shared loads left. (A b of one
    fragment, 16 x 8, is half an ldmatrix.x4: it takes the general conversion.)"""
    bm, bn, bk = tile
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=threads, arch="sm_80")
    ptx = explain(kernel, f"{dtype}[:, :]", f"{dtype}[:, :]", "f32[:, :]", BM=bm, BN=bn, BK=bk)["ptx"]
    mma = f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32"
    assert ptx.count(mma) == bm * bn * bk // (16 * 8 * 16) // (threads // 32)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx) == whole
    if not whole:
        return
    ops = instructions(ptx)
    assert not [op for op in ops if op.startswith("ld.shared")]
    assert {op for op in ops if op.startswith("st.shared")} == {"st.shared.u32"}


@tl.tile_kernel(num_threads=256, arch="sm_80")
def linear_layer(x, w, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """out = x @ w.T, w (N, K) as a Linear layer stores it."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BK)):
        acc = tl.dot(tl.load(x, index=(i, k), shape=(BM, BK)), tl.load(w, index=(j, k), shape=(BN, BK)).T, acc)
    tl.store(out, acc, index=(i, j))


def test_a_transposed_operand_costs_what_a_plain_one_does():
    """x @ w.T: both tiles copied ahead with cp.async and read with ldmatrix without .trans
    (w is k-contiguous, as the mma's b wants it), no shared loads, no local memory, the same
    mma count as x @ b."""
    ptx = explain(linear_layer, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=128, BN=128, BK=32)["ptx"]
    ops = instructions(ptx)
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 128 * 128 * 32 // (16 * 8 * 16) // 8
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" not in ptx
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 12  # 4 for x, 8 for w, each iteration
    assert any(op.startswith("cp.async.cg") for op in ops)
    assert not [op for op in ops if op.startswith(("ld.shared", "ld.local", "st.local"))]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tile, threads, n", [((128, 128, 32), 256, 128), ((64, 64, 64), 128, 64),
                                              ((128, 128, 64), 256, 128)])  # fmt: skip
def test_16_bit_dots_run_on_warpgroup_tensor_cores(dtype, tile, threads, n):
    """sm_90a: one wgmma.mma_async.m64nNk16 per warpgroup share and k-step, operands never in
    registers (no ldmatrix, no shared loads or stores), with 4 stages the dot left in flight
    (wait_group 1) and waited for after the loop; .target sm_90a; 0 bytes of stack, spills
    and local memory; the wgmma not serialized by ptxas. Copied by TMA (a box per column
    block, an mbarrier wait an iteration, no cp.async, no proxy fence) and, in the version for
    arrays no tensor map takes, by cp.async (its zero-fill the only shared store) with a
    proxy fence an iteration."""
    bm, bn, bk = tile
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=threads, arch="sm_90a", num_stages=4)
    signature = (f"{dtype}[:, :]", f"{dtype}[:, :]", "f32[:, :]")
    e = explain(kernel, *signature, BM=bm, BN=bn, BK=bk)
    with_tma = kernel.compile(kernel.specialize(kernel.bind((*signature,), dict(BM=bm, BN=bn, BK=bk)))[0], "cuda")
    without_tma = with_tma.backend_kernel.general()
    for ptx, tma in ((e["ptx"], True), (without_tma.ptx(), False)):
        ops = instructions(ptx)
        assert ".target sm_90a" in ptx
        per_warpgroup = bm * bn // (threads // 128) // (64 * n)  # instructions of 64 x n a k-step
        assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype}") == bk // 16 * per_warpgroup
        assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 1 and ptx.count("wgmma.wait_group.sync.aligned 0;") == 1
        assert ptx.count("fence.proxy.async.shared::cta;") == (0 if tma else 1)
        assert ("cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx) == tma
        assert ("cp.async.cg" in ptx) != tma
        assert "ldmatrix" not in ptx and not [op for op in ops if op.startswith(("ld.shared", "ld.local", "st.local"))]
        if tma:
            assert not [op for op in ops if op.startswith("st.shared")]
    assert e["resources"].count("0 bytes") >= 3  # stack, spill stores, spill loads
    # the wait after the loop first on its exit edge: else ptxas serializes every wgmma
    # (C7514; 128x128x32 at 256 threads was, LLVM having sunk the store's bounds before it)
    assert "wgmma serialized" not in e["resources"]
    r = without_tma.resources()
    assert not r["wgmma_serialized"] and r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, r


@pytest.mark.parametrize("dtypes", [("f8e4m3", "f8e4m3"), ("f8e5m2", "f8e4m3")])
@pytest.mark.parametrize("tile, threads, stages", [((128, 256, 64), 256, 4), ((128, 256, 128), 256, 3),
                                                   ((128, 128, 128), 512, 3)])  # fmt: skip
def test_float8_dots_run_on_the_float8_warpgroup_tensor_cores(dtypes, tile, threads, stages):
    """x @ w.T of float8 tiles on sm_90a: one wgmma.mma_async.m64nNk32 of the two formats per
    warpgroup share and k-step of 32, both operands K-major (TMA boxes of 8-bit elements; in
    the version for other arrays, 16-byte cp.async of 16 of them), never in registers, no
    local memory, no spills, no serialized wgmma."""
    bm, bn, bk = tile
    kernel = tl.tile_kernel(linear_layer.fn, num_threads=threads, arch="sm_90a", num_stages=stages)
    signature = (f"{dtypes[0]}[:, :]", f"{dtypes[1]}[:, :]", "f32[:, :]")
    e = explain(kernel, *signature, BM=bm, BN=bn, BK=bk)
    with_tma = kernel.compile(kernel.specialize(kernel.bind((*signature,), dict(BM=bm, BN=bn, BK=bk)))[0], "cuda")
    n = min(bn, 256) if threads // 128 <= bm // 64 else bn // (threads // 128 // (bm // 64))
    per_warpgroup = bm * bn // (threads // 128) // (64 * n)
    kinds = ".".join(d.removeprefix("f8") for d in dtypes)
    for ptx, tma in ((e["ptx"], True), (with_tma.backend_kernel.general().ptx(), False)):
        ops = instructions(ptx)
        assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{kinds}") == bk // 32 * per_warpgroup
        assert ("cp.async.bulk.tensor.2d" in ptx) == tma and ("cp.async.cg.shared.global" in ptx) != tma
        assert not [op for op in ops if op.startswith(("ld.shared", "ld.local", "st.local", "ldmatrix"))]
    r = with_tma.backend_kernel.resources()
    assert not r["wgmma_serialized"] and r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, r


@tl.tile_kernel(num_threads=256, arch="sm_90a", num_stages=4)
def grouped_scaled_matmul(a, b, c, scale, GROUP: tl.Constant):
    """c = (a @ b) / scale, blocks in groups of GROUP rows: int64 divisions by runtime values."""
    pid, rows, cols = tl.block_id(0), tl.cdiv(a.shape[0], 128), tl.cdiv(b.shape[1], 128)
    first = pid // (GROUP * cols) * GROUP
    size = tl.minimum(rows - first, GROUP)
    i, j = first + pid % size, (pid % (GROUP * cols)) // size
    acc = tl.zeros((128, 128), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], 64)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(128, 64)), tl.load(b, index=(k, j), shape=(64, 128)), acc)
    tl.store(c, acc / tl.load(scale, index=(0, j), shape=(1, 128)), index=(i, j))


def test_wgmma_kernels_call_no_subroutine():
    """ptxas makes each wgmma wait for the one before in a function that calls anything
    (C7509), and it calls subroutines for div.s64/rem.s64 and div.rn.f32: a kernel dividing
    int64s by runtime values and floats in its epilogue keeps its wgmmas in flight."""
    e = explain(grouped_scaled_matmul, "f16[:, :]", "f16[:, :]", "f32[:, :]", "f32[:, :]", GROUP=8)
    ops = instructions(e["ptx"])
    assert not [op for op in ops if op.startswith(("div.s64", "rem.s64", "div.u64", "rem.u64", "div.rn", "call"))]
    assert "wgmma.mma_async" in e["ptx"] and "serialized" not in e["resources"], e["resources"]


# ``tiled_matmul`` storing float16: the store's bounds are computed before the loop too
half_matmul = tl.tile_kernel(rounded_matmul, num_threads=256, arch="sm_90a", num_stages=4)


@pytest.mark.parametrize("tile", [(128, 128, 32), (128, 256, 64)])
def test_the_wait_for_a_dot_in_flight_is_first_after_its_loop(tile):
    """LLVM sinks the store's bounds, computed before the loop, to the top of the block after
    it; ahead of the wait for the dot left in flight there, ptxas serializes every wgmma of
    the kernel (C7514, both tiles at 256 threads). The loop goes under its own test, the
    wait first on its exit edge."""
    bm, bn, bk = tile
    e = explain(half_matmul, "f16[:, :]", "f16[:, :]", "f16[:, :]", BM=bm, BN=bn, BK=bk)
    assert "wgmma.wait_group.sync.aligned 1;" in e["ptx"] and "serialized" not in e["resources"], e["resources"]


def test_a_dot_result_leaves_through_the_ring_in_16_byte_stores():
    """The 128x256 float16 result (128 elements a thread, two to a word in the wgmma layout)
    goes to the loop's ring a word at a time, comes back 8 elements of a row at a time, and
    leaves in 16 16-byte stores a thread: no 4-byte global store, no shared memory beyond the
    ring's (4 stages of 128x64 and 64x256 halves, and the mbarriers)."""
    e = explain(half_matmul, "f16[:, :]", "f16[:, :]", "f16[:, :]", BM=128, BN=256, BK=64)
    ptx = e["ptx"]
    assert ptx.count("st.shared.u32") == 64 and ptx.count("ld.shared.v4") == 16
    assert ptx.count("st.global") == ptx.count("st.global.v4") == 16
    assert "shared memory per block 196640 bytes" in e["resources"], e["resources"]


def test_a_128x256_block_of_two_warpgroups_takes_m64n256_instructions():
    """128 accumulators a thread (the wgmma accumulator may hold twice the tile limit): one
    m64n256k16 per warpgroup and k-step, the TMA copies of each stage written out, all in
    registers: no stack, no spills, no serialized wgmma."""
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=256, arch="sm_90a", num_stages=3)
    e = explain(kernel, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=128, BN=256, BK=64)
    assert e["ptx"].count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert e["ptx"].count("cp.async.bulk.tensor.2d") >= 2 * (1 + 256 // 64)  # prologue + loop: a box per column block
    assert e["resources"].count(" 0 bytes") >= 3 and "serialized" not in e["resources"], e["resources"]


@tl.tile_kernel(num_threads=128, arch="sm_90a")
def _summed_products(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """c = the sum over blocks j of a @ b[:, j], each product a dot without accumulator (as
    attention's q @ k.T in its loop)."""
    i = tl.block_id(0)
    x, acc = tl.load(a, index=(i, 0), shape=(BM, BK)), tl.zeros((BM, BN), tl.float32)
    for j in tl.range(0, tl.cdiv(b.shape[1], BN)):
        acc += tl.dot(x, tl.load(b, index=(0, j), shape=(BK, BN)))
    tl.store(c, acc, index=(i, 0))


def loop_bodies(ptx):
    """The instructions between each label and a later branch back to it."""
    lines = ptx.splitlines()
    labels = {line[:-1]: k for k, line in enumerate(lines) if re.match(r"^\$L__BB\d+_\d+:$", line)}
    for k, line in enumerate(lines):
        back = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if back and labels.get(back.group(1), k) < k:
            yield "\n".join(lines[labels[back.group(1)] : k])


def test_a_dot_without_accumulator_moves_no_zeros_into_it():
    """``dot(a, b)``: each instruction's first k-step has wgmma's scale-d 0 (it adds to
    nothing), the later ones 1: in a loop, no zero is moved into the accumulator registers."""
    e = explain(_summed_products, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=64)
    body = max(loop_bodies(e["ptx"]), key=len)
    assert body.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == 4
    assert "0f00000000" not in body


@tl.tile_kernel
def _softmax_cast(x, out, BLOCK: tl.Constant):
    t = tl.load(x, index=(tl.block_id(0), 0), shape=(1, BLOCK), padding=float("-inf")).astype(tl.float32)
    e = tl.exp(t - tl.max(t))
    tl.store(out, (e / tl.sum(e)).astype(out.dtype), index=(tl.block_id(0), 0))


@pytest.mark.parametrize(
    "dtype, division",
    [("bf16", "div.full.f32"), ("f16", "div.full.f32"), ("f8e4m3", "div.full.f32"), ("f32", "rcp.approx.ftz.f64")],
)
def test_a_quotient_rounded_to_16_bits_is_divided_within_2_ulps(dtype, division):
    """A float32 quotient read only to be rounded to 16 bits needs no correctly rounded
    division (~10 instructions): div.full.f32's 2 ulps vanish in the rounding (docs/dtypes.md's
    1 ulp for 16-bit results); a float32 result stays correctly rounded (by fmas from the
    divisor's reciprocal, cuda_arith.divide_by_shared)."""
    ops = instructions(explain(_softmax_cast, f"{dtype}[:, :]", f"{dtype}[:, :]", BLOCK=2048)["ptx"])
    others = {"div.rn.f32", "div.full.f32", "rcp.approx.ftz.f64"} - {division}
    assert division in ops and others.isdisjoint(ops), ops


@pytest.mark.parametrize("n", [128, 2])
def test_a_float32_dot_reads_its_b_values_16_bytes_at_a_time(n):
    """CUDA cores (FFMA) for float32: each thread's consecutive columns of ``b`` are one vector
    shared load (from the buffer aligned for it), not a scalar load each (two columns' loads
    of consecutive k-steps NVVM merges into one ``v4``)."""
    e = explain(tiled_matmul, "f32[:, :]", "f32[:, :]", "f32[:, :]", BM=128, BN=n, BK=32)
    loads = {op for op in instructions(e["ptx"]) if op.startswith("ld.shared")}
    assert "CUDA cores" in e["layouts"] and loads and loads <= {"ld.shared.v2.f32", "ld.shared.v4.f32"}, loads
