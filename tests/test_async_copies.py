"""Asynchronous copies (cp.async) on the CPU backend: a copy lands in shared memory at the
wait that covers its group, not before, so a program missing a wait reads stale data on
the CPU as it may on the GPU. Hand-written thread programs, then the pipelined matmul."""

import functools
import re

import ml_dtypes  # noqa: F401 - registers the bfloat16 NumPy dtype
import numpy as np
import pytest
from _blocks import (
    matmul_then_reused_ring,
    matmul_to_a_carried_end,
    matmul_two_widths,
    repeated_matmul,
    rounded_matmul,
    split_matmul,
    split_matmul_twice,
    three_part_matmul,
    tiled_matmul,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang import dtypes as D
from tilelang._backends.cpu import CpuKernel
from tilelang._lower.thread_ir import (
    ArrayParam,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Imm,
    Op,
    Reg,
    SharedLoad,
    SharedStore,
    Store,
    ThreadProgram,
    format_thread_program,
)

i32, i64, u32, b1 = D.int32, D.int64, D.uint32, D.bool_


def _program(wait: int | None, groups: int = 1, shift: int = 0, aligned: bool = False):
    """32 threads; thread t zeroes shared words [4 t, 4 t + 4), copies elements [8 t, 8 t + 8)
    of ``x`` (``+ shift``) over them (the last of ``groups`` groups; the others copy zeros),
    the copies claimed ``aligned`` or not, waits (or not), and after a barrier every thread
    stores the 4 words of thread ``t ^ 1`` to ``out``."""
    stmts = []

    def op(name, dtype, what, *args, attr=None):
        stmts.append(Op(Reg(name, dtype), what, args, attr))
        return stmts[-1].dst

    t = op("t", i32, "thread_id")
    word = op("w", i32, "mul", t, Imm(4, i32))
    for q in range(4):
        stmts.append(SharedStore("buf", op(f"z{q}", i32, "add", word, Imm(q, i32)), Imm(0, u32), Imm(True, b1)))
    stmts.append(Barrier())
    offset = op("off", i64, "mul", op("t64", i64, "convert", t, attr=i64), Imm(8, i64))
    for g in range(groups):
        ok, claim = Imm(g == groups - 1, b1), Imm(aligned, b1)
        copy = AsyncCopy("buf", word, "x", Imm(shift, i64), offset, ok, Imm(0, i32), Imm(8, i32), claim)
        stmts += [copy, AsyncCommit()]
    stmts += [AsyncWait(wait)] if wait is not None else []
    stmts.append(Barrier())
    partner = op("p", i32, "mul", op("tx", i32, "xor", t, Imm(1, i32)), Imm(4, i32))
    for q in range(4):
        value = Reg(f"v{q}", u32)
        stmts.append(SharedLoad(value, "buf", op(f"r{q}", i32, "add", partner, Imm(q, i32))))
        at = op(f"o{q}", i64, "convert", op(f"wo{q}", i32, "add", word, Imm(q, i32)), attr=i64)
        stmts.append(Store("out", at, value, Imm(True, b1)))
    params = [ArrayParam("x", D.float16, 1), ArrayParam("out", D.uint32, 1)]
    return ThreadProgram("copies", params, 32, {"buf": (u32, 128)}, stmts)


def _run(program):
    x = (np.arange(256) % 251 + 1).astype(np.float16)
    out = np.full(128, 7, np.uint32)
    CpuKernel(program)((1,), [x, out])
    return x.view(np.uint16).astype(np.uint32), out


def _partner_words(bits):
    words = bits[0::2] | (bits[1::2] << 16)  # word w: elements 2w (low) and 2w + 1
    return words.reshape(32, 4)[np.arange(32) ^ 1].reshape(-1)


def test_a_waited_copy_is_read_after_the_barrier():
    bits, out = _run(_program(wait=0))
    np.testing.assert_array_equal(out, _partner_words(bits))


def test_a_copy_not_waited_for_leaves_the_old_contents():
    _, out = _run(_program(wait=None))
    assert not out.any()  # the zeros stored before the copy


def test_a_copy_claimed_aligned_that_is_not_is_caught_on_the_cpu():
    """The CUDA kernel copies a window claimed aligned 16 bytes a group without looking: the
    CPU backend checks the claim (the lowering's), so a wrong one fails the CPU tests."""
    _run(_program(wait=0, aligned=True))  # offsets 8 t: the claim holds
    with pytest.raises(tl.TileCompilerError, match="claimed aligned"):
        _run(_program(wait=0, shift=1, aligned=True))


@pytest.mark.parametrize("wait, lands", [(0, True), (1, False)])
def test_a_wait_covers_all_but_the_newest_groups(wait, lands):
    """Two groups, the data in the second: waiting for all but one leaves it in flight."""
    bits, out = _run(_program(wait=wait, groups=2))
    np.testing.assert_array_equal(out, _partner_words(bits) if lands else 0)


matmul = tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch="sm_80")
MATMULS = {arch: tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch=arch) for arch in ("sm_80", "sm_90a")}


def test_the_dot_loop_copies_its_tiles_ahead():
    """Copies of the first stages before the loop; in it a wait, one barrier, the copies ahead,
    then ldmatrix and mma; after it the copies past the end waited for."""
    e = tl.explain(matmul, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32, backend="cpu")
    lines = [line.strip() for line in e["thread_ir"].splitlines()]
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    end = next(i for i, line in enumerate(lines) if line.startswith("next "))
    assert sum(line.startswith("async shared") for line in lines[:loop]) == 2 * 2  # a and b, 2 stages
    body = lines[loop + 1 : end]
    assert body[:2] == ["async_wait 1", "barrier"]
    assert sum(line == "barrier" for line in body) == 1
    assert sum(line.startswith("async shared") for line in body) == 2
    assert any("ldmatrix" in line for line in body) and any("mma[" in line for line in body)
    assert lines[end + 1 : end + 3] == ["async_wait 0", "barrier"]


def compiled(kernel, *args, **constants):
    """The CPU backend's kernel for these arguments."""
    key, _ = kernel.specialize(kernel.bind(args, constants))
    return kernel.compile(key, "cpu").backend_kernel


def general_program(kernel, *args, **constants) -> str:
    """The thread IR of ``kernel``'s version for any array (cp.async copies, tested groups)."""
    return format_thread_program(compiled(kernel, *args, **constants).general().program)


def test_the_wgmma_loop_copies_its_tiles_into_swizzled_stages():
    """On sm_90a, for arrays no tensor map takes (else TMA copies them: test_tma.py), the
    copies land in swizzled tiles the tensor cores read themselves (no ldmatrix); a proxy
    fence before the barrier; the dot stays in flight into the next iteration (from 4
    stages), so copies go one iteration less far ahead (two stages before the loop, the wait
    in it for all but one group) and the loop's result is waited for after it."""
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch="sm_90a", num_stages=4)
    text = general_program(kernel, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32)
    lines = [line.strip() for line in text.splitlines()]
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    end = next(i for i, line in enumerate(lines) if line.startswith("next "))
    assert sum(line.startswith("async shared swizzled_") for line in lines[:loop]) == 2 * 2
    body = lines[loop + 1 : end]
    assert body[:3] == ["async_wait 1", "proxy_fence", "barrier"]
    assert sum(line == "barrier" for line in body) == 1 and not any("ldmatrix" in line for line in body)
    assert sum(line.startswith("async shared swizzled_") for line in body) == 2
    assert sum("wgmma[" in line and line.endswith("in_flight=1") for line in body) == 1
    assert lines[end + 1].startswith("wgmma_wait 0") and lines[end + 2 : end + 4] == ["async_wait 0", "barrier"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_pipelined_matmul_is_right_with_partial_tiles(arch):
    rng = np.random.default_rng(1)
    m, n, k = 70, 45, 100  # 4 iterations of 32: a masked tail, stages wrapping around the ring
    a, b = (rng.uniform(-2, 2, s).astype(np.float16) for s in ((m, k), (k, n)))
    c = np.full((m, n), np.nan, np.float32)
    MATMULS[arch][(tl.cdiv(m, 64), tl.cdiv(n, 64))](a, b, c, BM=64, BN=64, BK=32, backend="cpu")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


# (first column, columns) of a's view of a (70, 136) array: its windows aligned or not
WINDOWS = {
    "contiguous, k a multiple of 8 (whole or empty groups; a 8-wide last tile)": (0, 104),
    "k not a multiple of 8 (partial groups: the general copies)": (0, 100),
    "a view 16 bytes in (aligned)": (8, 104),
    "a view 2 bytes in (the pointer misaligned: the general copies on CUDA)": (1, 104),
    "a view of 100 columns of 136 (strides aligned, extent not)": (8, 100),
}
BACKENDS = ["cpu"] + (["cuda"] if "cuda" in tl.testing.default_backends() else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: WINDOWS[w][0] * 1000 + WINDOWS[w][1])
def test_copies_of_aligned_and_misaligned_windows(window, arch, backend):
    """The copies of a window test at run time whether its groups are whole or empty and
    16-byte aligned (then one cp.async each on CUDA, no fallback; the CPU backend checks
    that the claim holds), and every kind of window gives the right product."""
    first, k = WINDOWS[window]
    rng = np.random.default_rng(first + k)
    wide = rng.uniform(-2, 2, (70, 136)).astype(np.float16)
    b = rng.uniform(-2, 2, (k, 48)).astype(np.float16)
    c = np.full((70, 48), np.nan, np.float32)
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch=arch)
    a = wide[:, first : first + k]
    args = (a, b, c)
    if backend == "cuda":  # a device view: its pointer as misaligned as the host one's
        from numba import cuda

        args = (cuda.to_device(wide)[:, first : first + k], cuda.to_device(b), cuda.to_device(c))
    kernel[(2, 1)](*args, BM=64, BN=64, BK=32, backend=backend)
    out = args[2] if backend == "cpu" else args[2].copy_to_host()
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    ran = next(iter(kernel._compiled.values())).backend_kernel
    # the kernel for any array built where it ran: on sm_90a where a tensor map refuses a (its pointer)
    assert isinstance(ran._general, type(ran)) == (arch == "sm_90a" and first % 8 != 0)
    cpu = compiled(kernel, a, b, c, BM=64, BN=64, BK=32)
    text = format_thread_program(cpu.program if arch == "sm_80" else cpu.general().program)
    claims = {line.split("aligned=")[1].split()[0] for line in text.splitlines() if "aligned=" in line}
    assert claims and all(claim.startswith("i") for claim in claims)  # tested as the kernel runs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_pipelined_loop_run_twice(arch):
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(-2, 2, s).astype(np.float16) for s in ((40, 70), (70, 50)))
    c = np.full((40, 50), np.nan, np.float32)
    twice = tl.tile_kernel(repeated_matmul, num_threads=128, arch=arch)
    twice[(1, 1)](a, b, c, TIMES=2, BM=64, BN=64, BK=32, backend="cpu")
    np.testing.assert_allclose(c, 2 * (a.astype(np.float64) @ b.astype(np.float64)), rtol=1e-5, atol=1e-4)


SPLIT = {(arch, stages): tl.tile_kernel(split_matmul, num_threads=128, arch=arch, num_stages=stages)
         for arch in ("sm_80", "sm_90a") for stages in (2, 3)}  # fmt: skip


@pytest.mark.parametrize("kernel", SPLIT, ids=lambda k: f"{k[0]}-{k[1]}")
@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(0, 170), split=st.integers(-2, 7))
@example(m=5, n=7, k=100, split=-1)  # (the first loop runs no iteration: its prologue copies the second's first)
@example(m=5, n=7, k=100, split=6)  # (the second runs none, the first past the array's end)
@example(m=70, n=64, k=160, split=2)  # (every array aligned: on sm_90a the TMA copies run)
def test_a_pipeline_runs_on_into_the_next_loop(kernel, m, n, k, split):
    """Two loops over k's slices, the second from the first's end: the first's copies run on
    into the second's iterations (no drain or prologue between; with TMA one set of
    mbarriers), right for either loop empty (the first ending before it starts: the
    second's first slice is then the first copied) and for sizes not multiples of the tiles."""
    rng = np.random.default_rng(m * 1000 + n)
    a = rng.uniform(-2, 2, (m, -(-k // 8) * 8)).astype(np.float16)[:, :k]  # (rows 16-byte aligned: TMA on sm_90a)
    b = rng.uniform(-2, 2, (k, -(-n // 8) * 8)).astype(np.float16)[:, :n]
    c = np.full((m, -(-n // 8) * 8), np.nan, np.float32)[:, :n]
    SPLIT[kernel][(tl.cdiv(m, 64), tl.cdiv(n, 64))](a, b, c, split, BM=64, BN=64, BK=32, backend="cpu")
    s = min(max(split, 0) * 32, k)  # (slices before the array's start load zeros)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64[:, :s] @ b64[:s] + 2 * (a64[:, s:] @ b64[s:])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    key, _ = SPLIT[kernel].specialize(SPLIT[kernel].bind((a, b, c, split), {"BM": 64, "BN": 64, "BK": 32}))
    compiled = SPLIT[kernel].compile(key, "cpu").backend_kernel
    for program in (compiled.program, compiled.general().program):  # (TMA copies, then cp.async, on sm_90a)
        text = format_thread_program(program)
        assert re.search(r"stage\d+:i32=stage\d+", text), text  # (the second loop starts at the first's last stage)
        assert text.count(" inval") == ("tma " in text) and "mbarriers_uint64_1" not in text, text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("split", [0, 2, 9])
def test_three_loops_and_a_chained_pair_in_a_loop(arch, split):
    """Three loops, each from the last one's end: the first two share a pipeline, the third
    (its copies not continued further) takes their ring, with mbarriers of its own. The
    chained pair of split_matmul inside a loop run twice: right each time round."""
    rng = np.random.default_rng(6)
    a, b = rng.uniform(-2, 2, (64, 256)).astype(np.float16), rng.uniform(-2, 2, (256, 64)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)

    def part(lo, hi):  # (slices past the end load zeros)
        lo, hi = min(lo * 32, 256), min(hi * 32, 256)
        return a64[:, lo:hi] @ b64[lo:hi] if hi > lo else np.zeros((64, 64))

    mid = (split + 8) // 2
    for fn, want in ((three_part_matmul, part(0, split) + 2 * part(split, mid) + 3 * part(mid, 8)),
                     (split_matmul_twice, 2 * (part(0, split) + 2 * part(split, 8)))):  # fmt: skip
        kernel = tl.tile_kernel(fn, num_threads=128, arch=arch, num_stages=3)
        c = np.full((64, 64), np.nan, np.float32)
        kernel[(1, 1)](a, b, c, split, BM=64, BN=64, BK=32, backend="cpu")
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4, err_msg=fn.__name__)
        program = tl.explain(kernel, a, b, c, split, BM=64, BN=64, BK=32, backend="cpu")["thread_ir"]
        assert len(re.findall(r"stage\d+:i32=stage\d+", program)) == 1, program
        if fn is three_part_matmul and arch == "sm_90a":
            assert program.count("] init") == 2 and program.count("] inval") == 2, program


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_ring_taken_again_is_no_one_elses_scratch(arch):
    """The second loop takes the first's ring, which the 16-bit store between them used as
    scratch: the ring is the loop's alone again (a computed operand's buffer is another), and
    right (a shared buffer gave d an error of 182)."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-2, 2, (64, 192)).astype(np.float16), rng.uniform(-2, 2, (192, 64)).astype(np.float16)
    c, d = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    kernel = tl.tile_kernel(matmul_then_reused_ring, num_threads=128, arch=arch, num_stages=3)
    kernel[(1, 1)](a, b, c, d, BM=64, BN=64, BK=32, backend="cpu")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-2)
    np.testing.assert_allclose(d, 2 * want, rtol=1e-5, atol=1e-4)


def test_tma_copies_into_a_ring_cp_async_wrote_come_after_a_proxy_fence():
    """The first loop's copies (cp.async: its tiles are padded) are the threads' writes; the
    second loop's TMA copies into the same ring are the async proxy's: one proxy fence and a
    barrier between (once for both rings), and right."""
    kernel = tl.tile_kernel(matmul_two_widths, num_threads=128, arch="sm_90a", num_stages=2)
    program = tl.explain(kernel, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, backend="cpu")["thread_ir"]
    between = program.split("\n    for ")[1].split("\n    mbarriers mbarriers_uint64_0[2] init")[0]
    between = [line.strip() for line in between.split("\n    async_wait 0")[1].splitlines()]  # (from the drain)
    assert between.count("proxy_fence") == 1 and between[-2:] == ["proxy_fence", "barrier"], between
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (64, 96)).astype(np.float16), rng.uniform(-1, 1, (96, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float32)
    kernel[(1, 1)](a, b, c, BM=64, BN=64, backend="cpu")
    np.testing.assert_allclose(c, 2 * (a.astype(np.float64) @ b.astype(np.float64)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("split", [0, 3])
def test_a_loop_ending_where_the_one_before_left_a_count(arch, split):
    """The second loop's end is a result of the first: not chained (its copies could not be
    bounded before the first runs), and right."""
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-2, 2, (64, 256)).astype(np.float16), rng.uniform(-2, 2, (256, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    kernel = tl.tile_kernel(matmul_to_a_carried_end, num_threads=128, arch=arch, num_stages=3)
    kernel[(1, 1)](a, b, c, split, BM=64, BN=64, BK=32, backend="cpu")
    a64, b64, s = a.astype(np.float64), b.astype(np.float64), split * 32
    want = a64[:, :s] @ b64[:s] + 2 * (a64[:, s : s + 32] @ b64[s : s + 32])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_num_stages_sets_the_depth_of_the_ring(stages, arch):
    """num_stages=S: S - 1 iterations copied before the loop, a wait for all but S - 2 groups
    in it, S buffers; 1 turns pipelining off; on wgmma by TMA a stage at a time, waited for
    on its mbarrier (with the dot in flight, from S = 4, the copies come after it: as far
    ahead). Right answers, a masked tail and wrap included."""
    kernel = tl.tile_kernel(tiled_matmul.fn, num_threads=128, num_stages=stages, arch=arch)
    e = tl.explain(kernel, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32, backend="cpu")
    lines = [line.strip() for line in e["thread_ir"].splitlines()]
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    ahead = stages - 1
    if arch == "sm_90a":
        assert sum(line.startswith("tma ") for line in lines[:loop]) == ahead
        assert any(line.startswith("mbarrier_wait") for line in lines) == (stages > 1)
    else:
        assert sum(line.startswith("async shared") for line in lines[:loop]) == 2 * ahead
        assert (f"async_wait {ahead - 1}" in lines) == (stages > 1)
    rng = np.random.default_rng(stages)
    m, n, k = 70, 45, 170  # 6 iterations of 32
    a, b = (rng.uniform(-2, 2, s).astype(np.float16) for s in ((m, k), (k, n)))
    c = np.full((m, n), np.nan, np.float32)
    kernel[(tl.cdiv(m, 64), tl.cdiv(n, 64))](a, b, c, BM=64, BN=64, BK=32, backend="cpu")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad", [0, 9, 2.0])
def test_num_stages_is_checked(bad):
    with pytest.raises(tl.TileArgumentError, match="num_stages"):
        tl.tile_kernel(tiled_matmul.fn, num_stages=bad)


def _linear(x, w, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, T: tl.Constant):
    """out = x @ w.T (w is (N, K), as a Linear layer's weight), or with T="a": x.T @ w.T."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(w.shape[1], BK)):
        a = tl.load(x, index=(k, i), shape=(BK, BM)).T if T == "a" else tl.load(x, index=(i, k), shape=(BM, BK))
        acc = tl.dot(a, tl.load(w, index=(j, k), shape=(BN, BK)).T, acc)
    tl.store(out, acc, index=(i, j))


linear = tl.tile_kernel(_linear, num_threads=128, arch="sm_80")


@pytest.mark.parametrize("t", ["b", "a"])
def test_a_transposed_operand_is_copied_ahead_and_read_by_ldmatrix(t):
    """The transpose is folded into the ldmatrix read: w (N, K) is copied as it is and read
    without .trans (a K-major b needs .trans), x.T (loaded (K, M)) read with it; nothing else
    goes through shared memory, one barrier an iteration."""
    e = tl.explain(linear, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32, T=t, backend="cpu")
    lines = [line.strip() for line in e["thread_ir"].splitlines()]
    body = lines[next(i for i, ln in enumerate(lines) if ln.startswith("for ")) : lines.index("async_wait 0")]
    assert sum(ln.startswith("async shared") for ln in body) == 2
    assert not any(ln.startswith("shared ") or " = shared " in ln for ln in body)
    assert sum(ln == "barrier" for ln in body) == 1
    reads = [ln for ln in body if "ldmatrix" in ln]
    assert len(reads) == 2 and ("ldmatrix.trans" in reads[0]) == (t == "a") and "ldmatrix.trans" not in reads[1]
    rng = np.random.default_rng(3)
    m, n, k = 70, 45, 100
    a = rng.uniform(-2, 2, (m, k)).astype(np.float16)
    w = rng.uniform(-2, 2, (n, k)).astype(np.float16)
    out = np.full((m, n), np.nan, np.float32)
    x = np.ascontiguousarray(a.T) if t == "a" else a
    linear[(tl.cdiv(m, 64), tl.cdiv(n, 64))](x, w, out, BM=64, BN=64, BK=32, T=t, backend="cpu")
    np.testing.assert_allclose(out, a.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("t", ["b", "a"])
def test_a_transposed_operand_is_read_by_wgmma_in_its_own_orientation(t):
    """On wgmma the transposed tile is copied as it is, and its descriptor reads it MN-major
    (x.T) or K-major (w.T, where a plain b would be MN-major)."""
    kernel = tl.tile_kernel(_linear, num_threads=128, arch="sm_90a")
    e = tl.explain(kernel, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32, T=t, backend="cpu")
    (dot,) = [ln.strip() for ln in e["thread_ir"].splitlines() if "wgmma[" in ln]
    a, b = dot.split()[4:6]
    assert a.endswith(".mn") == (t == "a") and not b.endswith(".mn")
    rng = np.random.default_rng(4)
    m, n, k = 70, 45, 100
    x = rng.uniform(-2, 2, (m, k)).astype(np.float16)
    w = rng.uniform(-2, 2, (n, k)).astype(np.float16)
    out = np.full((m, n), np.nan, np.float32)
    kernel[(tl.cdiv(m, 64), tl.cdiv(n, 64))](np.ascontiguousarray(x.T) if t == "a" else x, w, out, BM=64, BN=64,
                                             BK=32, T=t, backend="cpu")  # fmt: skip
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-5, atol=1e-4)


def scores(q, k, out, BN: tl.Constant, D: tl.Constant):
    """out[i] = sum over key blocks of q @ k_j.T, the tiles (1, 1, BN, D) windows of 4-d arrays."""
    b, h = tl.block_id(0), tl.block_id(1)
    qt = tl.load(q, index=(b, h, 0, 0), shape=(1, 1, 64, D)).reshape((64, D))
    acc = tl.zeros((64, BN), tl.float32)
    for j in tl.range(0, tl.cdiv(k.shape[2], BN)):
        acc = tl.dot(qt, tl.load(k, index=(b, h, j, 0), shape=(1, 1, BN, D)).reshape((BN, D)).T, acc)
    tl.store(out, acc.reshape((1, 1, 64, BN)), index=(b, h, 0, 0))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_tile_of_a_4d_array_is_copied_ahead(arch):
    """A (1, 1, BN, D) window reshaped to (BN, D), as attention loads its keys, is a matrix
    tile like any other: copied ahead (2 stages before the loop, one copy in it; on sm_90a a
    rank-4 TMA box of (1, 1, BN, D)), right at lengths that are not multiples of the tile."""
    kernel = tl.tile_kernel(scores, num_threads=128, arch=arch)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 64, 32)).astype(np.float16)
    k = rng.standard_normal((2, 3, 100, 32)).astype(np.float16)
    e = tl.explain(kernel, q, k, np.zeros((2, 3, 64, 32), np.float32), BN=32, D=32, backend="cpu")
    lines = [line.strip() for line in e["thread_ir"].splitlines()]
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    end = next(i for i, line in enumerate(lines) if line.startswith("next "))
    copy = "tma " if arch == "sm_90a" else "async shared"
    assert sum(line.startswith(copy) for line in lines[:loop]) == 2
    assert sum(line.startswith(copy) for line in lines[loop:end]) == 1
    if arch == "sm_90a":
        assert "map0 = tensor map of k, box (1, 1, 32, 32), 64-byte swizzle" in lines
        # q, from before the loop, stored to its tile once there, not each iteration
        assert any(line.startswith("shared swizzled_") for line in lines[:loop])
        assert not any(line.startswith("shared ") for line in lines[loop:end])
    out = np.zeros((2, 3, 64, 32), np.float32)
    kernel[2, 3](q, k, out, BN=32, D=32, backend="cpu")
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    want = sum(q64 @ np.swapaxes(k64[:, :, j : j + 32], -1, -2) for j in range(0, 100, 32) if j + 32 <= 100)
    tail = np.zeros_like(q64[..., :32])
    tail[..., :4] = q64 @ np.swapaxes(k64[:, :, 96:100], -1, -2)
    np.testing.assert_allclose(out, want + tail, rtol=1e-3, atol=1e-2)


def scores_twice(q, k, out, BN: tl.Constant, D: tl.Constant):
    """2 x scores(...), the key loop run twice inside another: the queries' tile is stored
    again before the second run (after a barrier: the first run's dots are done with it)."""
    b, h = tl.block_id(0), tl.block_id(1)
    qt = tl.load(q, index=(b, h, 0, 0), shape=(1, 1, 64, D)).reshape((64, D))
    total = tl.zeros((64, BN), tl.float32)
    for _ in tl.range(0, 2):
        acc = tl.zeros((64, BN), tl.float32)
        for j in tl.range(0, tl.cdiv(k.shape[2], BN)):
            acc = tl.dot(qt, tl.load(k, index=(b, h, j, 0), shape=(1, 1, BN, D)).reshape((BN, D)).T, acc)
        total = total + acc
    tl.store(out, total.reshape((1, 1, 64, BN)), index=(b, h, 0, 0))


def test_a_loop_invariant_wgmma_operand_in_a_loop_run_twice():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 64, 32)).astype(np.float16)
    k = rng.standard_normal((1, 2, 70, 32)).astype(np.float16)
    once, twice = (np.zeros((1, 2, 64, 32), np.float32) for _ in range(2))
    tl.tile_kernel(scores, num_threads=128, arch="sm_90a")[1, 2](q, k, once, BN=32, D=32, backend="cpu")
    tl.tile_kernel(scores_twice, num_threads=128, arch="sm_90a")[1, 2](q, k, twice, BN=32, D=32, backend="cpu")
    np.testing.assert_allclose(twice, 2 * once, rtol=1e-6)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 150), n=st.integers(1, 150), k=st.integers(0, 100))
@example(m=100, n=96, k=64).via("aligned rows: the staged program runs")
@example(m=64, n=128, k=0).via("aligned, no iteration")
def test_a_dot_result_leaves_through_the_retired_ring_in_16_byte_rows(arch, dtype, m, n, k):
    """After its pipelined loop, the 16-bit result of a dot (two consecutive elements of a
    row a thread) is stored into the loop's ring, now free, and read back 8 elements of a row
    a thread: the global store is of 16-byte vectors, in the program for aligned arrays (rows
    of 16-byte multiples; the other stores from the dot's layout). Right on tiles past the
    array's edges; a kernel with no ring to reuse (num_stages=1) stores from the dot's layout."""
    d = np.dtype(dtype)
    kernel = _out_16_bit(arch, 3)  # (2 stages of 64 x 32 and 32 x 64: a ring too small for the 64 x 72 tile)
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.uniform(-2, 2, (m, k)).astype(np.float16)
    b = rng.uniform(-2, 2, (k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, d)
    kernel[(tl.cdiv(m, 64), tl.cdiv(n, 64))](a, b, c, BM=64, BN=64, BK=32, backend="cpu")
    want = a.astype(np.float64) @ b.astype(np.float64)
    # the float32 sum rounded once to 16 bits: within an ulp of the exact product rounded
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2 * float(np.finfo(np.float16).eps) if dtype ==
                               "float16" else 2**-7, atol=1e-3)  # fmt: skip
    signature = ("f16[:, :]", "f16[:, :]", f"{D.dtype(dtype).short}[:, :]")
    after = _thread_ir(kernel, signature).split("\n    for ")[1].split("\n    store c[")
    assert "lanes=4" in after[0] and re.search(r"shared \w+_uint32_\d\[\w+\] = ", after[0])
    assert " lanes=8 whole packed" in after[1].splitlines()[0]
    plain = _thread_ir(_out_16_bit(arch, 1), signature)
    assert not re.search(r"= shared \w+\[[^]]*\] lanes=4", plain) and " lanes=2 whole packed" in plain  # (no read back)


@functools.cache
def _out_16_bit(arch, stages):
    return tl.tile_kernel(rounded_matmul, num_threads=128, num_stages=stages, arch=arch)


def _thread_ir(kernel, signature):
    return tl.explain(kernel, *signature, BM=64, BN=64, BK=32, backend="cpu")["thread_ir"]


def rounded_twice(a, b, c, e, TIMES: tl.Constant, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """``c = a @ b`` and, in a loop after the product's, ``e = 2 (a @ b)`` stored TIMES times:
    two staged stores through one ring, the second inside a loop."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc.astype(c.dtype), index=(i, j))
    for _ in tl.range(0, TIMES):
        tl.store(e, (acc * 2.0).astype(e.dtype), index=(i, j))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_staged_stores_one_after_another_and_in_a_loop(arch):
    """The second staged store waits at a barrier until every thread has read the first's
    rows back before it writes the ring; in a loop, each iteration's does (the barrier at
    the end of the body). Right on partial tiles; both stores staged."""
    kernel = tl.tile_kernel(rounded_twice, num_threads=128, num_stages=3, arch=arch)
    rng = np.random.default_rng(7)
    a, b = rng.uniform(-2, 2, (100, 64)).astype(np.float16), rng.uniform(-2, 2, (64, 96)).astype(np.float16)
    c, e = (np.full((100, 96), np.nan, np.float16) for _ in range(2))  # (rows of 16-byte multiples: staged)
    kernel[(2, 2)](a, b, c, e, TIMES=3, BM=64, BN=64, BK=32, backend="cpu")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=1e-3)
    np.testing.assert_allclose(e, 2 * want, rtol=2e-3, atol=2e-3)
    ir = tl.explain(kernel, "f16[:, :]", "f16[:, :]", "f16[:, :]", "f16[:, :]", TIMES=3, BM=64, BN=64, BK=32,
                    backend="cpu")["thread_ir"]  # fmt: skip
    after = [line.strip() for line in ir.split("\n    for ", 1)[1].splitlines()]
    reads = [i for i, line in enumerate(after) if line.endswith("lanes=4")]
    writes = [i for i, line in enumerate(after) if re.match(r"shared \w+_uint32_\d\[\w+\] = ", line)]
    assert len(reads) == len(writes) == 2 and writes[0] < reads[0] < writes[1] < reads[1]
    assert "barrier" in after[reads[0] : writes[1]]


def nested_operand(x, y, out, B: tl.Constant, G: tl.Constant, I: tl.Constant, OUTER: tl.Constant, T: tl.Constant):
    """A dot in a loop nested in another reading ``k`` (or ``k.T``): loaded before both loops,
    or (``OUTER``) in the outer loop's body, a new tile each outer iteration."""
    acc = tl.zeros((B, B), tl.float32)
    first = tl.load(y, index=(0, 0), shape=(B, B))
    for g in tl.range(0, G):
        k = tl.load(y, index=(g, 0), shape=(B, B)) if OUTER else first
        for i in tl.range(0, I):
            acc = tl.dot(tl.load(x, index=(g * I + i, 0), shape=(B, B)), k.T if T else k, acc)
    tl.store(out, acc, index=(0, 0))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("outer", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_operands_of_dots_in_nested_loops(arch, outer, transposed):
    """An operand from before the loop nest is stored once, before it (the dk/dv kernel's k and
    v); one loaded in the outer loop's body is left to the nested loop (the outer pipeline's
    copies replace how its own body is lowered: a nested ``k.T`` of a copied tile found no
    registers, a KeyError from the compiler). Both against NumPy, pipelined, on the CPU."""
    b, g, i = 64, 2, 3
    rng = np.random.default_rng(7)
    x = (rng.integers(-3, 4, (g * i * b, b)) / 4).astype(np.float16)
    y = (rng.integers(-3, 4, (g * b, b)) / 4).astype(np.float16)
    out = np.zeros((b, b), np.float32)
    kernel = tl.tile_kernel(nested_operand, num_threads=128, num_stages=2, arch=arch)
    kernel[1](x, y, out, B=b, G=g, I=i, OUTER=outer, T=transposed, backend="cpu")
    tiles = y.astype(np.float64).reshape(g, b, b)
    ks = [tiles[n] if outer else tiles[0] for n in range(g)]
    blocks = x.astype(np.float64).reshape(g, i, b, b)
    want = sum(blocks[n, m] @ (ks[n].T if transposed else ks[n]) for n in range(g) for m in range(i))
    np.testing.assert_array_equal(out, want)  # (quarters: every sum exact in float32)
