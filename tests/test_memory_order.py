"""A block's accesses to one array happen in program order on every backend (the
order_memory pass), with barriers only where threads could race."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import dtypes as D
from tilelang import testing as tlt
from tilelang._backends.cpu import CpuKernel
from tilelang._lower.thread_ir import ArrayParam, Barrier, Imm, Op, Reg, SharedLoad, SharedStore, Store, ThreadProgram


@tl.tile_kernel
def store_then_access(a, out, first, second, N: tl.Constant, M: tl.Constant, STORE_AGAIN: tl.Constant):
    """Stores a tile of ``a`` at ``first``, then loads an ``M``-tile at ``second`` (another
    layout when M != N) and stores it, plus one, at ``second`` again (STORE_AGAIN) or at the end."""
    tl.store(out, tl.load(a, index=(0,), shape=(N,)), offset=(first,))
    y = tl.load(out, offset=(second,), shape=(M,))
    tl.store(out, y + 1.0, offset=(second if STORE_AGAIN else 200,))


@given(
    st.sampled_from([32, 64, 256]),
    st.sampled_from([8, 32, 64, 256]),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
)
def test_a_load_sees_the_blocks_earlier_stores(n, m, first, second, store_again):
    a = np.arange(1, n + 1, dtype=np.float32)
    out = np.zeros(600, np.float32)

    def reference(a, out, first, second):
        out[first : first + n] = a[: min(n, 600 - first)]
        y = out[second : second + m].copy()
        target = second if store_again else 200
        out[target : target + m] = y + 1
        return out

    tlt.check_kernel(
        store_then_access, 1, args=(a, out, first, second), reference=reference, outputs=("out",),
        N=n, M=m, STORE_AGAIN=store_again,
    )  # fmt: skip


@tl.tile_kernel
def shift_left(a, N: tl.Constant):
    """a[i] = a[i + 1]: every element is read before it is overwritten."""
    tl.store(a, tl.load(a, offset=(1,), shape=(N,)) * 1.0, offset=(0,))


@tl.tile_kernel
def running(out, STEPS: tl.Constant, N: tl.Constant):
    """Each iteration reads the window the previous one wrote, one element along."""
    for k in tl.range(STEPS):
        y = tl.load(out, offset=(k,), shape=(N,))
        tl.store(out, y + 1.0, offset=(k + 1,))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_reads_before_writes_and_across_loop_iterations(backend):
    a = np.arange(257, dtype=np.float32)
    shift_left[1](a, N=256, backend=backend)
    np.testing.assert_array_equal(a[:256], np.arange(1, 257))
    out = np.arange(300, dtype=np.float32)
    running[1](out, STEPS=5, N=128, backend=backend)
    same = np.arange(300, dtype=np.float32)
    same_offset_each_iteration[1](same, N=128, backend=backend)
    same_want = np.arange(300, dtype=np.float32)
    for k in range(4):
        same_want[k : k + 128] += 1
    np.testing.assert_array_equal(same, same_want)
    want = np.arange(300, dtype=np.float32)
    for k in range(5):
        want[k + 1 : k + 129] = want[k : k + 128] + 1
    np.testing.assert_array_equal(out, want)


@tl.tile_kernel
def same_offset_each_iteration(out, N: tl.Constant):
    """The same offset variable in every iteration, but another value: the windows differ."""
    for k in tl.range(4):
        tl.store(out, tl.load(out, offset=(k,), shape=(N,)) + 1.0, offset=(k,))


@tl.tile_kernel
def in_place(a, N: tl.Constant):
    i = tl.block_id(0)
    x = tl.load(a, index=(i,), shape=(N,))
    tl.store(a, x * 2.0, index=(i,))
    for _ in tl.range(3):
        tl.store(a, tl.load(a, index=(i,), shape=(N,)) + 1.0, index=(i,))
    tl.store(a, tl.full((N,), 5.0, tl.float32), index=(i,))


@tl.tile_kernel
def apart(out):
    tl.store(out, tl.full((64,), 1.0, tl.float32), offset=(0,))
    tl.store(out, tl.full((64,), 2.0, tl.float32), offset=(64,))  # constant windows that do not meet
    tl.store(out, tl.load(out, offset=(0,), shape=(64,)) + 1.0, offset=(0,))


@tl.tile_kernel
def histogram_then_read(h, bins, out, N: tl.Constant):
    b = tl.load(bins, index=(0,), shape=(N,))
    tl.atomic_add(h, b, tl.full((N,), 1, tl.int32))
    tl.atomic_add(h, b, tl.full((N,), 2, tl.int32))  # atomics of one kind commute: no barrier between
    tl.store(out, tl.load(h, index=(0,), shape=(8,)), index=(0,))  # ... but one before this read


def _barriers(kernel, *args, **constants):
    return tl.explain(kernel, *args, backend="cpu", **constants)["layouts"].count("barrier")


def test_barriers_only_where_threads_could_race():
    assert _barriers(in_place, "f32[:]", N=256) == 0  # each thread re-reads only what it wrote
    assert _barriers(apart, "f32[:]") == 0
    assert _barriers(shift_left, "f32[:]", N=256) == 1
    assert _barriers(running, "f32[:]", STEPS=5, N=128) == 2  # the last iteration's store; this load
    assert _barriers(same_offset_each_iteration, "f32[:]", N=128) == 1
    assert _barriers(histogram_then_read, "i32[:]", "i32[:]", "i32[:]", N=64) == 1
    h, bins = np.zeros(8, np.int32), np.arange(64, dtype=np.int32) % 8
    out = np.zeros(8, np.int32)
    histogram_then_read[1](h, bins, out, N=64, backend="cpu")
    np.testing.assert_array_equal(out, np.full(8, 24))


def _neighbours(barrier: bool):
    """32 threads: each zeroes its word of a shared buffer, a barrier, stores t + 1 there,
    then (after a barrier, or with none) reads its neighbour's word into out[t]."""
    i32, i64, b1 = D.int32, D.int64, D.bool_
    t, one = Reg("t", i32), Imm(1, i32)
    stmts = [Op(t, "thread_id", ()), SharedStore("buf", t, Imm(0, i32), Imm(True, b1)), Barrier()]
    stmts += [Op(Reg("v", i32), "add", (t, one)), SharedStore("buf", t, Reg("v", i32), Imm(True, b1))]
    stmts += [Barrier()] if barrier else []
    stmts += [Op(Reg("n", i32), "and", (Reg("v", i32), Imm(31, i32))), SharedLoad(Reg("w", i32), "buf", Reg("n", i32))]
    stmts += [Op(Reg("at", i64), "convert", (t,), i64), Store("out", Reg("at", i64), Reg("w", i32), Imm(True, b1))]
    return ThreadProgram("neighbours", [ArrayParam("out", D.int32, 1)], 32, {"buf": (i32, 32)}, stmts)


@pytest.mark.parametrize("barrier", [True, False])
def test_a_missing_barrier_shows_in_one_of_the_two_thread_orders(barrier, monkeypatch):
    """The CPU backend runs a phase's threads one after another: a read of another thread's
    write with no barrier between sees it or not by their order. TILELANG_CPU_REVERSED=1
    runs them in reverse, so running a test both ways finds a missing barrier; with it
    both orders agree."""
    want = (np.arange(32) + 1) % 32 + 1
    outs = []
    for reversed_ in ("", "1"):
        monkeypatch.setenv("TILELANG_CPU_REVERSED", reversed_)
        out = np.zeros(32, np.int32)
        CpuKernel(_neighbours(barrier))((1,), [out])
        outs.append(out)
    if barrier:
        assert all((out == want).all() for out in outs)
    else:
        assert not all((out == want).all() for out in outs) and not (outs[0] == outs[1]).all()


def test_kernels_meeting_at_barriers_agree_in_both_thread_orders(monkeypatch):
    """Kernels whose threads exchange data through shared memory at barriers (a layernorm's
    and a softmax's row reductions across 8 warps, a matmul's copied-ahead ring and its result
    staged in it): the same bits whichever order the CPU backend runs a phase's threads in."""
    import rows
    from _blocks import rounded_matmul

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 1000)) * 3).astype(D.bfloat16.np)
    w, bias = (rng.standard_normal(1000).astype(D.bfloat16.np) for _ in range(2))
    a, b = rng.uniform(-2, 2, (100, 64)).astype(np.float16), rng.uniform(-2, 2, (64, 96)).astype(np.float16)

    def run():
        norm = np.zeros_like(x)
        tl.tile_kernel(rows.layernorm, num_threads=256)[3](x, w, bias, norm, 1000, 1e-5, BLOCK=1024, backend="cpu")
        soft = np.zeros_like(x)
        tl.tile_kernel(rows.softmax, num_threads=256)[3](x, soft, BLOCK=1024, backend="cpu")
        c = np.zeros((100, 96), np.float16)
        matmul = tl.tile_kernel(rounded_matmul, num_threads=128, num_stages=3, arch="sm_90a")
        matmul[2, 2](a, b, c, BM=64, BN=64, BK=32, backend="cpu")
        return [norm.view(np.uint16), soft.view(np.uint16), c.view(np.uint16)]

    monkeypatch.setenv("TILELANG_CPU_REVERSED", "")
    forward = run()
    monkeypatch.setenv("TILELANG_CPU_REVERSED", "1")
    for got, want in zip(run(), forward):
        np.testing.assert_array_equal(got, want)
    assert np.isfinite(forward[2].view(np.float16)).all()
