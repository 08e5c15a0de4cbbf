"""Clear refusals instead of hangs: supported tile and shared-memory sizes, a zero tl.range
step checked at launch, and debug mode (``debug=True``): index arithmetic overflow,
gather/scatter bounds and ``tl.device_assert`` checked as the kernel runs, reported at the
user's line (``tl.static_assert`` while tracing).

The CPU tier runs the interpreter and the CPU backend, and builds the CUDA source and PTX;
the tests marked ``gpu`` run the same checks on a GPU.
"""

import linecache
import os
import re
import time

import numpy as np
import pytest

import tilelang as tl
from tilelang._passes.check_limits import MAX_ELEMENTS_PER_THREAD, SHARED_LIMIT
from tilelang._runtime import gpu_available

HERE = os.path.abspath(__file__)


def launch_error(cls, fn):
    with pytest.raises(cls) as info:
        fn()
    return info.value


def check(err, cls, match, expr):
    """``err`` is a ``cls`` whose message matches and whose location is ``expr`` in this file."""
    assert type(err) is cls and re.search(match, err.message), repr(err)
    loc = err.loc
    assert os.path.abspath(loc.file) == HERE and "tilelang/" not in str(err), str(err)
    assert linecache.getline(HERE, loc.line)[loc.col : loc.end_col] == expr, str(err)


HOST = ["interpret", "cpu"]
needs_gpu = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")]


# ------------------------------------------------------------------ tile sizes


@tl.tile_kernel
def huge_add(x, out, N: tl.Constant):
    a = tl.load(x, index=(0,), shape=(N,))
    tl.store(out, a + a, index=(0,))


@tl.tile_kernel
def huge_dot(x, out):
    a = tl.zeros((512, 512), tl.float32)
    tl.store(out, tl.dot(a, a), index=(0, 0))


@pytest.mark.parametrize("backend", [*HOST, "cuda"])
def test_a_huge_tile_is_refused_at_its_line_at_once(backend):
    x = np.zeros(16, np.float32)
    start = time.perf_counter()
    err = launch_error(tl.TileLimitError, lambda: huge_add[1](x, x, N=1 << 20, backend=backend))
    assert time.perf_counter() - start < 1.0  # refused before the lowering (which would not finish)
    check(err, tl.TileLimitError, r"f32\[1048576\] tile is 2048 elements per thread with 512 threads",
          expr="tl.load(x, index=(0,), shape=(N,))")  # fmt: skip
    assert f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread" in err.message and "tl.range" in err.message
    x2 = np.zeros((4, 4), np.float32)
    err = launch_error(tl.TileLimitError, lambda: huge_dot[1](x2, x2, backend=backend))
    check(
        err,
        tl.TileLimitError,
        r"f32\[512,512\] tile is 512 elements per thread",
        expr="tl.zeros((512, 512), tl.float32)",
    )


def test_the_largest_tiles_compile_and_more_threads_are_suggested():
    assert "thread_program" in tl.explain(huge_add, "f32[:]", "f32[:]", N=32768, backend="cpu")["thread_ir"]
    err = launch_error(tl.TileLimitError, lambda: tl.explain(huge_add, "f32[:]", "f32[:]", N=65536, backend="cpu"))
    assert "num_threads=1024" in err.message
    wide = tl.tile_kernel(huge_add.fn, num_threads=1024)
    assert "threads=1024" in tl.explain(wide, "f32[:]", "f32[:]", N=65536, backend="cpu")["thread_ir"]
    err = launch_error(tl.TileLimitError, lambda: tl.explain(wide, "f32[:]", "f32[:]", N=131072, backend="cpu"))
    assert "num_threads" not in err.message  # no more threads to have


@tl.tile_kernel(num_threads=256, arch="sm_90a")
def wide_operand(x, w, out, ALSO_STORED: tl.Constant):
    acc = tl.zeros((128, 256), tl.float32)
    for k in tl.range(0, 2):
        y = tl.load(w, index=(0, k), shape=(256, 128))
        acc = tl.dot(tl.load(x, index=(0, k), shape=(128, 128)), y.T, acc)
        if ALSO_STORED:
            tl.store(w, y, index=(0, k))
    tl.store(out, acc, index=(0, 0))


def test_a_tile_only_wgmma_reads_may_hold_as_many_elements_as_an_accumulator():
    """A 256 x 128 float8 operand at 256 threads (128 elements a thread, copied to shared memory
    ahead of the loop, never in registers) compiles; the same tile also stored is refused."""
    args = ("f8e4m3[:, :]", "f8e4m3[:, :]", "f32[:, :]")
    ptx = tl.explain(wide_operand, *args, ALSO_STORED=False, backend="cuda")["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3" in ptx
    err = launch_error(tl.TileLimitError, lambda: tl.explain(wide_operand, *args, ALSO_STORED=True, backend="cpu"))
    assert "128 elements per thread" in err.message


@tl.tile_kernel(num_threads=128, arch="sm_90a")
def wide_twice(x, w, v, out1, out2, T_FIRST: tl.Constant, BATCHED: tl.Constant):
    acc1, acc2 = tl.zeros((64, 256), tl.float32), tl.zeros((256, 64), tl.float32)
    for k in tl.range(0, 2):
        if BATCHED:  # (a batched array's tile: the reshape drops the axis of 1)
            y = tl.reshape(tl.load(w, index=(0, 0, k), shape=(1, 256, 64)), (256, 64))
        else:
            y = tl.load(w, index=(0, k), shape=(256, 64))  # 128 elements a thread, read only by wgmma
        xk, vk = tl.load(x, index=(0, k), shape=(64, 64)), tl.load(v, index=(k, 0), shape=(64, 64))
        if T_FIRST:
            acc1 = tl.dot(xk, y.T, acc1)
            acc2 = tl.dot(y, vk, acc2)
        else:
            acc2 = tl.dot(y, vk, acc2)
            acc1 = tl.dot(xk, y.T, acc1)
    tl.store(out1, acc1, index=(0, 0))
    tl.store(out2, acc2, index=(0, 0))


@pytest.mark.parametrize("t_first, batched", [(False, False), (True, False), (True, True)])
def test_a_tile_only_wgmma_reads_in_any_order_and_through_a_reshape(t_first, batched):
    """A tile read by two wgmma dots, as b transposed and as a, whichever comes first, and one
    from a batched array (reshaped), may hold 128 elements a thread (a review found the second
    order and the reshape refused)."""
    w = "f16[:, :, :]" if batched else "f16[:, :]"
    ir = tl.explain(wide_twice, "f16[:, :]", w, "f16[:, :]", "f32[:, :]", "f32[:, :]", T_FIRST=t_first,
                    BATCHED=batched, backend="cpu")["thread_ir"]  # fmt: skip
    assert ir.count("= wgmma[") == 2


@tl.tile_kernel(num_threads=512, arch="sm_90a")
def register_hungry(x, w, out):
    acc = tl.zeros((256, 256), tl.float32)
    for k in tl.range(0, 4):
        acc = tl.dot(tl.load(x, index=(0, k), shape=(256, 64)), tl.load(w, index=(0, k), shape=(256, 64)).T, acc)
    tl.store(out, acc, index=(0, 0))


def test_a_kernel_ptxas_has_too_few_registers_for_is_a_limit_error_at_the_users_line():
    """256x256 accumulators over 512 threads (128 a thread) with their operands need more than
    the 128 registers a thread 512 threads leave: ptxas refuses, and the user gets a
    TileLimitError saying so at the launch's line, not nvJitLink's error."""
    err = launch_error(tl.TileLimitError, lambda: tl.explain(register_hungry, "f16[:, :]", "f16[:, :]", "f32[:, :]"))
    assert "512 threads per block" in err.message and "128 registers" in err.message and "num_threads" in err.message


@tl.tile_kernel(num_threads=1024)
def deep_dot(a, b, out, K: tl.Constant):
    x = tl.load(a, index=(0, 0), shape=(128, K))
    y = tl.load(b, index=(0, 0), shape=(K, 128))
    tl.store(out, tl.dot(x, y), index=(0, 0))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_shared_memory_past_a_block_is_refused_at_the_op(backend):
    assert tl.explain(deep_dot, "f32[:,:]", "f32[:,:]", "f32[:,:]", K=128, backend="cpu")  # 128 KB: fits
    start = time.perf_counter()
    err = launch_error(
        tl.TileLimitError, lambda: tl.explain(deep_dot, "f32[:,:]", "f32[:,:]", "f32[:,:]", K=256, backend=backend)
    )
    assert time.perf_counter() - start < 1.0
    check(
        err, tl.TileLimitError, rf"262144 bytes of shared memory per block.*{SHARED_LIMIT} bytes", expr="tl.dot(x, y)"
    )


# ------------------------------------------------------------- zero loop steps


@tl.tile_kernel
def store_then_loop(x, out, step, T: tl.Constant):
    tl.store(out, tl.full((T,), 5.0), index=(0,))
    for _ in tl.range(0, 4, step):
        tl.store(out, tl.full((T,), 7.0), index=(1,))


@pytest.mark.parametrize("backend", [*HOST, "cuda"])
def test_a_zero_step_argument_is_refused_before_anything_runs(backend):
    out = np.full(16, -1.0, np.float32)
    err = launch_error(tl.TileValueError, lambda: store_then_loop[2](out, out, 0, T=8, backend=backend))
    check(err, tl.TileValueError, r"tl.range: step must not be zero \(argument `step` is 0\)",
          expr="tl.range(0, 4, step)")  # fmt: skip
    np.testing.assert_array_equal(out, -1.0)  # the launch was refused: nothing ran (no GPU needed for that)
    if backend != "cuda":
        store_then_loop[2](out, out, 3, T=8, backend=backend)
        np.testing.assert_array_equal(out, [5.0] * 8 + [7.0] * 8)
        store_then_loop[0](out, out, 0, T=8, backend=backend)  # an empty grid runs nothing, so nothing fails


@tl.tile_kernel
def constant_step(out, s, STEP: tl.Constant, T: tl.Constant):
    for _ in tl.range(0, 4, STEP):
        tl.store(out, tl.full((T,), 7.0), index=(0,))
    for _ in tl.range(0, 4, s * STEP):
        tl.store(out, tl.full((T,), 8.0), index=(0,))


@pytest.mark.parametrize("backend", [*HOST, "cuda"])
def test_a_constant_zero_step_is_refused_when_compiled(backend):
    """Compiled, a step of 0 known to the compiler ran no iterations, with no error."""
    compile_it = lambda: tl.explain(constant_step, "f32[:]", "i32", STEP=0, T=8, backend=backend)  # noqa: E731
    err = launch_error(tl.TileValueError, compile_it)
    check(err, tl.TileValueError, r"tl.range: step must not be zero", expr="tl.range(0, 4, STEP)")


@tl.tile_kernel
def loop_with_no_effect(out, step, ZERO: tl.Constant):
    acc = tl.zeros((4,))
    for _ in tl.range(0, 4, 0 if ZERO else step):
        acc += 1.0  # (never used: simplify drops the loop)


@pytest.mark.parametrize("backend", HOST)
def test_a_loop_with_no_effect_refuses_a_zero_step_too(backend):
    """Simplify dropped the loop, and its check with it: a zero step passed, silently."""
    out = np.zeros(4, np.float32)
    err = launch_error(tl.TileValueError, lambda: loop_with_no_effect[1](out, 1, ZERO=True, backend=backend))
    check(err, tl.TileValueError, r"tl.range: step must not be zero", expr="tl.range(0, 4, 0 if ZERO else step)")
    err = launch_error(tl.TileValueError, lambda: loop_with_no_effect[1](out, 0, ZERO=False, backend=backend))
    check(err, tl.TileValueError, r"argument `step` is 0", expr="tl.range(0, 4, 0 if ZERO else step)")


def test_a_step_that_folds_to_zero_fails_on_the_cpu_backend_as_in_the_interpreter():
    """`s * STEP` with STEP=0 folds to a constant 0 in the thread program: the CPU backend skipped its check."""
    out = np.zeros(8, np.float32)
    for backend in HOST:
        err = launch_error(tl.TileValueError, lambda b=backend: steps_times_zero[1](out, 3, T=8, backend=b))
        check(err, tl.TileValueError, r"tl.range: step must not be zero", expr="tl.range(0, 4, s * 0)")


@tl.tile_kernel
def steps_times_zero(out, s, T: tl.Constant):
    for _ in tl.range(0, 4, s * 0):
        tl.store(out, tl.full((T,), 8.0), index=(0,))


@tl.tile_kernel
def wrapped_step(out, step, T: tl.Constant):
    n = tl.full((), 0, tl.int8)
    for _ in tl.range(n, 4, step):  # a Python int step (weak) is converted to int8
        tl.store(out, tl.full((T,), 7.0), index=(0,))


def test_the_step_is_checked_as_the_loop_sees_it():
    out = np.zeros(8, np.float32)
    err = launch_error(tl.TileValueError, lambda: wrapped_step[1](out, 0, T=8, backend="interpret"))
    assert "step must not be zero" in err.message
    err = launch_error(tl.TileTypeError, lambda: wrapped_step[1](out, 256, T=8, backend="interpret"))
    assert "Python int 256 (argument `step`) does not fit in int8" in err.message  # (it wrapped to 0)


# ------------------------------------------------------------------ debug mode


def _window_far_out(x, out, i):
    tl.store(out, tl.load(x, index=(i,), shape=(8,)), index=(0,))


@pytest.mark.parametrize("backend", HOST)
def test_an_index_past_int64s_range_is_no_overflow_in_debug_mode(backend):
    """A window whose start (i * 8) is past int64's range lies outside every array: padding.
    Debug mode checked the multiply inside that saturation and reported an overflow."""
    x, out = np.arange(16, dtype=np.float32), np.full(8, -1.0, np.float32)
    tl.tile_kernel(_window_far_out, debug=True)[1](x, out, np.int64(2**62), backend=backend)
    np.testing.assert_array_equal(out, 0.0)


@tl.tile_kernel
def arange_past_int32(out):
    tl.store(out, tl.arange(2**31 - 4, 2**31 + 4), index=(0,))


def test_arange_past_int32_is_refused():
    err = launch_error(tl.TileValueError, lambda: arange_past_int32[1](np.zeros(8, np.int32), backend="interpret"))
    check(err, tl.TileValueError, r"arange\(2147483644, 2147483652\) goes past int32",
          expr="tl.arange(2**31 - 4, 2**31 + 4)")  # fmt: skip


@tl.tile_kernel(debug=True)
def far_block(x, out, T: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, offset=(i * 1000000 * 4000,), shape=(T,)), index=(i,))


@tl.tile_kernel(debug=True)
def far_block_int64(x, out, T: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, offset=(i.astype(tl.int64) * 1000000 * 4000,), shape=(T,), padding=-1.0), index=(i,))


X = np.arange(64, dtype=np.float32)


@pytest.mark.parametrize("backend", HOST)
def test_debug_mode_reports_int32_index_overflow_at_its_line(backend):
    out = np.zeros(16, np.float32)
    far_block[1](X, out, T=8, backend=backend)  # block 0 computes 0: fine
    err = launch_error(tl.TileCheckError, lambda: far_block[2](X, out, T=8, backend=backend))
    check(err, tl.TileCheckError, r"debug check: int32 multiplication overflowed.*astype\(tl.int64\)",
          expr="i * 1000000 * 4000")  # fmt: skip
    far_block_int64[2](X, out, T=8, backend=backend)  # int64 arithmetic: no overflow, the window is past the end
    np.testing.assert_array_equal(out, [*range(8), *[-1.0] * 8])


@tl.tile_kernel(debug=True)
def offsets64(x, out, base, scale, T: tl.Constant):
    tl.store(out, tl.load(x, offset=(base + base * scale,), shape=(T,)), index=(0,))


@tl.tile_kernel(debug=True)
def narrowed(x, out, base, T: tl.Constant):
    tl.store(out, tl.load(x, offset=(base.astype(tl.int32),), shape=(T,)), index=(0,))


@pytest.mark.parametrize("backend", HOST)
def test_debug_mode_checks_int64_arithmetic_and_conversions(backend):
    out = np.zeros(8, np.float32)
    offsets64[1](X, out, np.int64(2), np.int64(3), T=8, backend=backend)
    np.testing.assert_array_equal(out, X[8:16])
    err = launch_error(
        tl.TileCheckError, lambda: offsets64[1](X, out, np.int64(2**62), np.int64(4), T=8, backend=backend)
    )
    check(err, tl.TileCheckError, r"int64 multiplication overflowed", expr="base * scale")
    err = launch_error(
        tl.TileCheckError, lambda: offsets64[1](X, out, np.int64(2**62), np.int64(1), T=8, backend=backend)
    )
    check(err, tl.TileCheckError, r"int64 addition overflowed", expr="base + base * scale")
    narrowed[1](X, out, np.int64(8), T=8, backend=backend)
    err = launch_error(tl.TileCheckError, lambda: narrowed[1](X, out, np.int64(2**32), T=8, backend=backend))
    check(err, tl.TileCheckError, r"converting int64 to int32 changed the value", expr="base.astype(tl.int32)")


@tl.tile_kernel(debug=True)
def index_arithmetic(x, out, v, op: tl.Constant, T: tl.Constant):
    a = tl.full((), v, tl.int32)
    if op == "folded":  # wraps to 0 when compiled, before anything runs
        offset = tl.full((), 2**30, tl.int32) * 4
    elif op == "merged":
        unused = v * 1000000  # the same product as below, not an index itself
        tl.store(out, tl.full((T,), unused.astype(tl.float32)), index=(1,))
        offset = v * 1000000
    elif op == "abs":
        offset = abs(a)
    elif op == "floordiv":
        offset = (a // -1) % 8
    elif op == "shl":
        offset = a << 8
    elif op == "sum":
        offset = tl.sum(tl.full((4,), a)) % 8
    else:
        offset = tl.max(tl.cumsum(tl.full((4,), a))) % 8
    tl.store(out, tl.load(x, offset=(offset,), shape=(T,), padding=-1.0), index=(0,))


@pytest.mark.parametrize("backend", HOST)
@pytest.mark.parametrize("op, fine, bad, what, expr", [
    ("folded", 0, 0, "multiplication", "tl.full((), 2**30, tl.int32) * 4"),
    ("merged", 0, 3000, "multiplication", "v * 1000000"),
    ("abs", -3, -(2**31), "abs", "abs(a)"),
    ("floordiv", -3, -(2**31), "floor division", "a // -1"),
    ("shl", 1, 2**23, "left shift", "a << 8"),
    ("sum", 2, 2**30, "sum", "tl.sum(tl.full((4,), a))"),
    ("cumsum", 2, 2**30, "cumsum", "tl.cumsum(tl.full((4,), a))"),
])  # fmt: skip
def test_debug_mode_checks_every_kind_of_index_arithmetic(op, fine, bad, what, expr, backend):
    """Folded arithmetic (`2**30 * 4` as an offset wrapped to 0 unnoticed), a product merged
    with an earlier one (reported at the earlier line), abs, //, << and int32 sums fed
    indices unchecked."""
    out = np.zeros(16, np.float32)
    if op != "folded":
        index_arithmetic[1](X, out, fine, op=op, T=8, backend=backend)
    err = launch_error(tl.TileCheckError, lambda: index_arithmetic[1](X, out, bad, op=op, T=8, backend=backend))
    check(err, tl.TileCheckError, rf"int32 {what} overflowed computing an index", expr)
    assert "offset = " in linecache.getline(HERE, err.loc.line)


@tl.tile_kernel(debug=True)
def unused_far_load(x, out, T: tl.Constant):
    i = tl.block_id(0)
    _ = tl.load(x, offset=(i * 2**30 * 4,), shape=(T,))  # unused: it does not run, and is not checked
    tl.store(out, tl.load(x, index=(i,), shape=(T,)), index=(i,))


@pytest.mark.parametrize("backend", HOST)
def test_debug_mode_checks_what_runs(backend):
    """Checks added before simplification checked a load simplify then dropped: a false alarm."""
    out = np.zeros(16, np.float32)
    unused_far_load[2](X, out, T=8, backend=backend)
    np.testing.assert_array_equal(out, X[:16])


@tl.tile_kernel(debug=True)
def gather_scatter(x, ids, out, T: tl.Constant):
    idx = tl.load(ids, index=(0,), shape=(T,))
    values = tl.gather(x, idx, mask=idx != -5)
    tl.scatter(out, idx, values, mask=idx != -5)


@pytest.mark.parametrize("backend", HOST)
def test_debug_mode_checks_gather_and_scatter_indices(backend):
    out = np.zeros(64, np.float32)
    gather_scatter[1](X, np.array([0, 3, -5, 63], np.int32), out, T=4, backend=backend)  # masked-off: not checked
    np.testing.assert_array_equal(out[[0, 3, 63]], [0, 3, 63])
    err = launch_error(tl.TileCheckError, lambda: gather_scatter[1](X, np.array([0, 64], np.int32), out, T=2,
                                                                    backend=backend))  # fmt: skip
    check(err, tl.TileCheckError, r"tl.gather: an index along axis 0 is outside the array",
          expr="tl.gather(x, idx, mask=idx != -5)")  # fmt: skip
    small = np.zeros(32, np.float32)
    err = launch_error(tl.TileCheckError, lambda: gather_scatter[1](X, np.array([40], np.int32), small, T=1,
                                                                    backend=backend))  # fmt: skip
    check(
        err,
        tl.TileCheckError,
        r"tl.scatter: an index along axis 0",
        expr="tl.scatter(out, idx, values, mask=idx != -5)",
    )


@tl.tile_kernel(debug=True)
def computed_step(out, n, T: tl.Constant):
    for _ in tl.range(0, 4, n // 8):
        tl.store(out, tl.full((T,), 7.0), index=(0,))


def test_debug_kernels_check_computed_steps_and_cost_nothing_when_off():
    err = launch_error(tl.TileCheckError, lambda: computed_step[1](np.zeros(8, np.float32), 3, T=8, backend="cpu"))
    check(err, tl.TileCheckError, r"debug check: tl.range: step must not be zero", expr="tl.range(0, 4, n // 8)")
    plain = tl.tile_kernel(far_block.fn)
    assert "__tl_errors" not in tl.explain(plain, "f32[:]", "f32[:]", T=8, backend="cpu")["thread_ir"]


def asserting(x, out, T: tl.Constant):
    tl.static_assert(T % 8 == 0, "T is a multiple of 8")
    t = tl.load(x, index=(tl.block_id(0),), shape=(T,))
    tl.device_assert(t < 100, "an element past 99")
    tl.store(out, t * 2, index=(tl.block_id(0),))


ASSERTED, STATIC = (
    'tl.device_assert(t < 100, "an element past 99")',
    'tl.static_assert(T % 8 == 0, "T is a multiple of 8")',
)


@pytest.mark.parametrize("backend", HOST)
def test_device_assert_reports_at_its_line_in_debug_mode_and_costs_nothing_else(backend):
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    checked, plain = tl.tile_kernel(asserting, debug=True), tl.tile_kernel(asserting, debug=False)
    checked[8](x, out, T=8, backend=backend)
    np.testing.assert_array_equal(out, 2 * x)
    x[37] = 100
    err = launch_error(tl.TileCheckError, lambda: checked[8](x, out, T=8, backend=backend))
    check(err, tl.TileCheckError, r"tl.device_assert failed: an element past 99$", expr=ASSERTED)
    plain[8](x, out, T=8, backend=backend)  # (not compiled in: no check, no error word)
    assert out[37] == 200 and "__tl_errors" not in tl.explain(plain, x, out, T=8, backend="cpu")["thread_ir"]
    err = launch_error(tl.TileValueError, lambda: plain[8](x, out, T=12, backend=backend))
    check(err, tl.TileValueError, r"static_assert failed: T is a multiple of 8", expr=STATIC)


def test_tilelang_checks_turns_debug_mode_on(monkeypatch):
    monkeypatch.setattr(tl.kernel, "CHECKS", True)
    assert tl.tile_kernel(far_block.fn).debug and not tl.tile_kernel(far_block.fn, debug=False).debug


def test_debug_checks_build_for_cuda():
    """The CUDA side of debug mode: the checks are atomics on the error word (run on a GPU below)."""
    for kernel in (far_block, tl.tile_kernel(asserting, debug=True)):
        e = tl.explain(kernel, "f32[:]", "f32[:]", T=8, backend="cuda")
        assert "__tl_errors__ptr" in e["llvm_ir"]
        assert "atom.global.min.s32" in e["ptx"]
    e = tl.explain(gather_scatter, "f32[:]", "i32[:]", "f32[:]", T=128, backend="cuda")
    assert "atom.global.min.s32" in e["ptx"]


# ------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_gpu_debug_checks_report_at_the_users_line():
    out = np.zeros(16, np.float32)
    far_block[1](X, out, T=8, backend="cuda")
    err = launch_error(tl.TileCheckError, lambda: far_block[2](X, out, T=8, backend="cuda"))
    check(err, tl.TileCheckError, r"int32 multiplication overflowed", expr="i * 1000000 * 4000")
    far_block_int64[2](X, out, T=8, backend="cuda")
    np.testing.assert_array_equal(out, [*range(8), *[-1.0] * 8])
    err = launch_error(tl.TileCheckError, lambda: gather_scatter[1](X, np.array([0, 64], np.int32), out, T=2,
                                                                    backend="cuda"))  # fmt: skip
    check(err, tl.TileCheckError, r"tl.gather: an index along axis 0", expr="tl.gather(x, idx, mask=idx != -5)")
    x = np.arange(64, dtype=np.float32)
    x[37] = 100
    err = launch_error(tl.TileCheckError, lambda: tl.tile_kernel(asserting, debug=True)[8](x, out, T=8, backend="cuda"))
    check(err, tl.TileCheckError, r"an element past 99", expr=ASSERTED)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_gpu_zero_steps_neither_hang_nor_pass_silently():
    from numba import cuda

    out = cuda.to_device(np.full(16, -1.0, np.float32))
    store_then_loop[2](out, out, 3, T=8, backend="cuda")  # device arrays: a fast path, were it allowed
    out.copy_to_device(np.full(16, -1.0, np.float32))
    err = launch_error(tl.TileValueError, lambda: store_then_loop[2](out, out, 0, T=8, backend="cuda"))
    check(err, tl.TileValueError, r"step must not be zero \(argument `step` is 0\)", expr="tl.range(0, 4, step)")
    np.testing.assert_array_equal(out.copy_to_host(), -1.0)
    host = np.full(8, -1.0, np.float32)
    tl.tile_kernel(computed_step.fn)[1](host, 3, T=8, backend="cuda")  # without checks: no iterations, no hang
    np.testing.assert_array_equal(host, -1.0)
    err = launch_error(tl.TileCheckError, lambda: computed_step[1](host, 3, T=8, backend="cuda"))
    check(err, tl.TileCheckError, r"step must not be zero", expr="tl.range(0, 4, n // 8)")
