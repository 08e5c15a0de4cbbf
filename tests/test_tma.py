"""TMA copies (sm_90a): the pipelined loop of a wgmma dot copies its tiles with the tensor
memory accelerator, counted by mbarriers; arrays a tensor map cannot describe run the
kernel lowered without TMA (cp.async). The CPU backend lands a box as it is issued and
checks each wait is on a completed phase; the C launcher encodes the maps per launch."""

import ctypes

import numpy as np
import pytest
from _blocks import repeated_matmul, tiled_matmul
from _fake_driver import FakeDriver
from hypothesis import given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang import dtypes as D
from tilelang._backends.cuda_driver import launcher_module
from tilelang._lower.thread_ir import format_thread_program, tensor_map_ok

HOPPER = tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch="sm_90a", num_stages=4)


def _cpu_kernel(kernel, *args, **constants):
    key, _ = kernel.specialize(kernel.bind(args, constants))
    return kernel.compile(key, "cpu").backend_kernel


def _lines(text):
    return [line.strip() for line in text.splitlines()]


def test_the_wgmma_loop_copies_its_tiles_with_tma():
    """Tensor maps of a and b (a box per swizzled column block); before the loop the
    mbarriers made valid, a barrier, the TMA copies of three stages; in it a wait on the
    stage's mbarrier, the wgmma (left in flight), then one barrier and the copies three
    stages ahead, into the stage the dot before read (done once the barrier passes); after
    it the dot waited for and the mbarriers invalidated. No cp.async and no proxy fence."""
    e = tl.explain(HOPPER, "f16[:, :]", "f16[:, :]", "f32[:, :]", BM=64, BN=64, BK=32, backend="cpu")
    lines = _lines(e["thread_ir"])
    assert "map0 = tensor map of a, box (64, 32), 64-byte swizzle" in lines
    assert "map1 = tensor map of b, box (32, 64), 128-byte swizzle" in lines
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    end = next(i for i, line in enumerate(lines) if line.startswith("next "))
    before, body = lines[:loop], lines[loop + 1 : end]
    assert "mbarriers mbarriers_uint64_0[4] init" in before
    assert sum(line.startswith("tma ") for line in before) == 3
    assert body[0].startswith("mbarrier_wait mbarriers_uint64_0[stage")
    assert sum(line == "barrier" for line in body) == 1 and sum(line.startswith("tma ") for line in body) == 1
    dot = next(i for i, line in enumerate(body) if "wgmma[" in line)
    assert body[dot].endswith("in_flight=1") and body.index("barrier") > dot
    assert any(line.startswith("i") and "= add k" in line and line.endswith(" 3:i64") for line in body)
    assert lines[end + 1].startswith("wgmma_wait 0") and lines[end + 2 : end + 4] == [
        "mbarriers mbarriers_uint64_0[4] inval",
        "barrier",
    ]
    assert not any(line.startswith(("async", "proxy_fence")) for line in lines)


def _matmul(m, n, k, first=0, seed=0, kernel=HOPPER):
    """a (a view ``first`` columns into a wider array), b (a view of ``n`` columns), their
    rows 16-byte aligned, and their product on the CPU by ``kernel``; returns its CpuKernel."""
    rng = np.random.default_rng(seed)
    wide = rng.uniform(-2, 2, (m, -(-(k + first) // 8) * 8 + 8)).astype(np.float16)  # rows 16-byte aligned
    a = wide[:, first : first + k]
    b = rng.uniform(-2, 2, (k, -(-n // 8) * 8)).astype(np.float16)[:, :n]  # rows 16-byte aligned
    c = np.full((m, n), np.nan, np.float32)
    kernel[(tl.cdiv(m, 64), tl.cdiv(n, 64))](a, b, c, BM=64, BN=64, BK=32, backend="cpu")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    return _cpu_kernel(kernel, a, b, c, BM=64, BN=64, BK=32)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 150), n=st.integers(1, 150), k=st.integers(0, 200), first=st.sampled_from([0, 1, 8]))
def test_tma_and_cp_async_versions_are_right_on_partial_tiles(m, n, k, first):
    """Sizes not multiples of the tile, zero-trip loops, views: the boxes past the array's
    end land zeros; where a row's stride or the view's start is not 16-byte aligned, the
    kernel without TMA runs and is right too."""
    _matmul(m, n, k, first, seed=m * 1000 + n)


def test_aligned_arrays_take_tma_and_misaligned_ones_the_version_without():
    fresh = tl.tile_kernel(tiled_matmul.fn, num_threads=128, arch="sm_90a", num_stages=4)
    kernel = _matmul(70, 44, 100, kernel=fresh)  # rows of 112 and 44 elements (224, 176 bytes): 16-byte multiples
    assert kernel.program.tensor_maps and not isinstance(kernel._general, type(kernel))
    _matmul(70, 45, 100, first=1, kernel=fresh)  # a view 2 bytes in: no tensor map takes it
    assert isinstance(kernel._general, type(kernel)) and not kernel._general.program.tensor_maps


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
def test_a_tma_loop_run_three_times_wraps_its_phases(stages):
    rng = np.random.default_rng(stages)
    a, b = (rng.uniform(-2, 2, s).astype(np.float16) for s in ((40, 232), (232, 48)))  # 8 iterations of 32
    c = np.full((40, 48), np.nan, np.float32)
    kernel = tl.tile_kernel(repeated_matmul, num_threads=128, arch="sm_90a", num_stages=stages)
    kernel[(1, 1)](a, b, c, TIMES=3, BM=64, BN=64, BK=32, backend="cpu")
    ran = _cpu_kernel(kernel, a, b, c, TIMES=3, BM=64, BN=64, BK=32)
    assert "tma " in format_thread_program(ran.program) and not isinstance(ran._general, type(ran))  # (not built)
    np.testing.assert_allclose(c, 3 * (a.astype(np.float64) @ b.astype(np.float64)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "pointer, shape, strides, ok",
    [
        (1024, (70, 104), (104, 1), True),
        (1026, (70, 104), (104, 1), False),  # a pointer 2 bytes past 16
        (1024, (70, 100), (100, 1), False),  # rows 200 bytes apart
        (1024, (70, 100), (104, 1), True),  # a view of 100 of 104 columns
        (1024, (0, 104), (104, 1), False),  # an empty axis
        (1024, (2**31, 8), (8, 1), False),  # box corners are int32
        (1024, (70, 104), (-104, 1), False),  # a reversed view
        (1024, (70, 104), (1, 70), False),  # the last axis not unit-stride
        (1024, (2, 3, 70, 64), (13440, 4480, 64, 1), True),
    ],
)
def test_which_arrays_a_tensor_map_takes(pointer, shape, strides, ok):
    assert tensor_map_ok(pointer, shape, strides, 2) == ok


@pytest.mark.parametrize("count, parity, valid, caught", [
    (0, 0, True, True),  # phase 0 not completed
    (1, 0, True, False),  # completed
    (1, 1, True, True),  # phase 1 not yet
    (1, 1, False, True),  # an invalid mbarrier
])  # fmt: skip
def test_a_wait_on_a_phase_no_copy_completes_is_caught_on_the_cpu(count, parity, valid, caught):
    """On the GPU the wait would never end: on the CPU, where a box lands as it is issued
    (one completed phase per count), it raises. Thread 0 arms the mbarrier ``count`` times
    (a box of ``x`` each), then every thread waits on ``parity``."""
    from tilelang._backends.cpu import CpuKernel
    from tilelang._lower.thread_ir import (
        ArrayParam,
        Barrier,
        Imm,
        Mbarriers,
        MbarrierWait,
        TensorMap,
        ThreadProgram,
        TmaLoad,
    )

    i32 = D.int32
    body = [Mbarriers("bars", 1, True), Barrier()]
    for _ in range(count):
        body.append(TmaLoad(("tile",), [Imm(0, i32)], (0,), (2,), [Imm(0, i32), Imm(0, i32)], "bars", Imm(0, i32), 128,
                            Imm(True, D.bool_)))  # fmt: skip
    body += [] if valid else [Barrier(), Mbarriers("bars", 1, False), Barrier()]
    body.append(MbarrierWait("bars", Imm(0, i32), Imm(parity, i32)))
    shared = {"bars": (D.uint64, 1), "tile": (D.uint32, 256)}
    program = ThreadProgram("waits", [ArrayParam("x", D.float16, 2)], 32, shared, body,
                            tensor_maps=[TensorMap("x", (8, 8), 128)])  # fmt: skip
    x = np.zeros((64, 64), np.float16)
    if caught:
        with pytest.raises(tl.TileCompilerError, match="mbarrier wait"):
            CpuKernel(program)((1,), [x])
    else:
        CpuKernel(program)((1,), [x])


_ENCODE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), ctypes.c_int,
    ctypes.c_int, ctypes.c_int, ctypes.c_int,
)  # fmt: skip


class _Encoder:
    """A fake cuTensorMapEncodeTiled: records its arguments, fills the map with a marker."""

    def __init__(self, result=0):
        self.calls, self.result = [], result
        self.callback = _ENCODE(self._encode)
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _encode(self, tmap, dtype, rank, pointer, dims, strides, box, ones, interleave, swizzle, l2, fill):
        self.calls.append((dtype, rank, pointer, dims[:rank], strides[: rank - 1], box[:rank], swizzle, fill))
        ctypes.memset(tmap, 0xAB, 128)
        return self.result


def _launcher(encoder, without, itemsize=2):
    """A kernel of an int32 and a 2-d array (pointer, shape, strides) of ``itemsize``-byte
    elements reading a (64, 32) box of it with 64-byte swizzle through one tensor map."""
    fake = FakeDriver("iQqqqq", map_count=1)
    Launcher = launcher_module().Launcher
    maps = ((1, 2, (32, 64), 2, itemsize),)
    launcher = Launcher(0xF00, 128, 0, "iQqqqq", 0xC0, fake.launcher_entry_points, fake._failed, None,
                        maps=maps, encode=encoder.address, general=lambda: without.launcher)  # fmt: skip
    return fake, launcher


@pytest.mark.parametrize("itemsize, code", [(2, 1), (1, 0)])
def test_the_launcher_encodes_a_tensor_map_per_launch(itemsize, code):
    encoder, without = _Encoder(), FakeDriver("iQqqqq")
    fake, launcher = _launcher(encoder, without, itemsize)
    launcher((2, 1, 1), 0, [7, 4096, 70, 112, 112, 1])
    # innermost first: dims (112, 70), the outer stride in bytes, the box, UINT16 (UINT8), 64-byte swizzle, zeros
    # past the end
    assert encoder.calls == [(code, 2, 4096, [112, 70], [112 * itemsize], [32, 64], 2, 0)]
    assert fake.values == (7, 4096, 70, 112, 112, 1) and not without.launches
    assert fake.maps == [b"\xab" * 128]


@pytest.mark.parametrize(
    "flat, result",
    [
        ([7, 4098, 70, 104, 104, 1], 0),  # a misaligned pointer: not asked
        ([7, 4096, 70, 100, 100, 1], 0),  # rows 200 bytes apart: not asked
        ([7, 4096, 70, 104, 104, 1], 1),  # the driver refuses
    ],
)
def test_an_array_no_tensor_map_takes_launches_the_kernel_without_tma(flat, result):
    encoder, without = _Encoder(result), FakeDriver("iQqqqq")
    fake, launcher = _launcher(encoder, without)
    launcher((2, 1, 1), 0, flat)
    launcher((2, 1, 1), 0, flat)
    assert not fake.launches and [launch[2] for launch in without.launches] == [tuple(flat)] * 2
    assert len(encoder.calls) == 2 * result


def test_tensor_maps_need_an_encoder_and_a_kernel_without_them():
    fake = FakeDriver("iQqqqq")
    args = (0xF00, 128, 0, "iQqqqq", 0xC0, fake.launcher_entry_points, fake._failed, None)
    Launcher = launcher_module().Launcher
    with pytest.raises(ValueError, match="encode and general"):
        Launcher(*args, maps=((1, 2, (32, 64), 2, 2),))
    with pytest.raises(ValueError, match="tensor map"):  # its strides past the parameters
        Launcher(*args, maps=((4, 2, (32, 64), 2, 2),), encode=1, general=print)
    with pytest.raises(ValueError, match="itemsize 1 or 2"):
        Launcher(*args, maps=((1, 2, (32, 64), 2, 4),), encode=1, general=print)
