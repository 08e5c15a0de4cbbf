"""Kernels take the arrays they move in vectors to be aligned (a 16-byte pointer, rows and
extents of 16-byte multiples: thread_ir.array_aligned), so each vector group of a window
whose corner and extent are multiples of it is whole or empty and moves in one access with
no lane-by-lane path; for any other array the kernel lowered for any array runs, chosen at
each launch (by tilelang/_launch.c on CUDA, by the CPU backend by the same rule)."""

import re

import numpy as np
import pytest
from _blocks import paths
from _fake_driver import FakeDriver
from hypothesis import given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang._backends.cuda_driver import launcher_module
from tilelang._lower.layout import blocked, log2, padded_size
from tilelang._lower.thread_ir import array_aligned, format_thread_program


@tl.tile_kernel(backend="cpu")
def scaled_rows(x, out, BN: tl.Constant):
    """out = 2 x, a (1, BN) tile at a time, the tiles by index."""
    i = tl.block_id(0)
    for j in tl.range(0, tl.cdiv(x.shape[1], BN)):
        tl.store(out, tl.load(x, index=(i, j), shape=(1, BN)) * 2, index=(i, j))


@tl.tile_kernel(backend="cpu")
def shifted_rows(x, out, START: tl.Constant, STEP: tl.Constant, BN: tl.Constant):
    """out[i, k + j] = x[i, k + j] + 1 for k = START, START + STEP, ... (element offsets)."""
    i = tl.block_id(0)
    for k in tl.range(START, x.shape[1], STEP):
        tl.store(out, tl.load(x, offset=(i, k), shape=(1, BN)) + 1, offset=(i, k))


def _cpu_kernel(kernel, *args, **constants):
    key, _ = kernel.specialize(kernel.bind(args, constants))
    return kernel.compile(key, "cpu").backend_kernel


@pytest.mark.parametrize(
    "pointer, shape, strides, itemsize, aligned",
    [
        (4096, (70, 104), (104, 1), 2, True),
        (4098, (70, 104), (104, 1), 2, False),  # the pointer 2 bytes in
        (4096, (70, 100), (100, 1), 2, False),  # rows of 200 bytes
        (4096, (70, 100), (104, 1), 2, False),  # rows 208 bytes apart, 200 long: the extent
        (4096, (1, 104), (7, 1), 2, True),  # an axis of one element: its stride never moves an index
        (4096, (70, 8), (8, 2), 2, False),  # a strided last axis
        (4096, (3, 5, 4), (40, 8, 1), 4, True),
        (4096, (3, 5, 4), (20, 5, 1), 4, False),  # the middle axis' stride: 20 bytes
        (0, (0, 8), (8, 1), 4, True),  # an empty array
    ],
)
def test_the_rule_and_the_launcher_agree(pointer, shape, strides, itemsize, aligned):
    assert array_aligned(pointer, shape, strides, itemsize) == aligned
    assert _launched_as_aligned(pointer, shape, strides, itemsize) == aligned


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 64).map(lambda k: 4096 + k),
    st.lists(st.tuples(st.integers(0, 40), st.integers(-40, 40)), min_size=1, max_size=3),
    st.sampled_from([1, 2, 4, 8]),
)
def test_the_launcher_checks_what_array_aligned_says(pointer, axes, itemsize):
    shape, strides = zip(*axes)
    assert _launched_as_aligned(pointer, shape, strides, itemsize) == array_aligned(pointer, shape, strides, itemsize)


def _launched_as_aligned(pointer, shape, strides, itemsize) -> bool:
    """Whether a launcher of a kernel taking one aligned array launches itself, not the
    kernel for any array, with these parameters (a fake driver records the launches)."""
    codes = "iQ" + "q" * (2 * len(shape))
    fake, general = FakeDriver(codes), FakeDriver(codes)
    Launcher = launcher_module().Launcher
    launcher = Launcher(0xF00, 128, 0, codes, 0xC0, fake.launcher_entry_points, fake._failed, None,
                        aligned=((1, len(shape), itemsize),), general=lambda: general.launcher)  # fmt: skip
    launcher((1, 1, 1), 0, [7, pointer, *shape, *strides])
    assert len(fake.launches) + len(general.launches) == 1
    return bool(fake.launches)


def test_aligned_arrays_need_a_general_kernel():
    fake = FakeDriver("iQqq")
    args = (0xF00, 128, 0, "iQqq", 0xC0, fake.launcher_entry_points, fake._failed, None)
    Launcher = launcher_module().Launcher
    with pytest.raises(ValueError, match="aligned arrays need general"):
        Launcher(*args, aligned=((1, 1, 4),))
    with pytest.raises(ValueError, match="aligned array"):  # its strides past the parameters
        Launcher(*args, aligned=((2, 1, 4),), general=print)


def test_a_kernel_of_many_aligned_arrays_launches():
    """As many arrays as a kernel's parameters can hold (4096 bytes: 170 1-d arrays), all taken aligned."""
    arrays = 4096 // 24
    codes = "Qqq" * arrays
    fake, general = FakeDriver(codes), FakeDriver(codes)
    Launcher = launcher_module().Launcher
    aligned = tuple((3 * k, 1, 4) for k in range(arrays))
    launcher = Launcher(0xF00, 128, 0, codes, 0xC0, fake.launcher_entry_points, fake._failed, None,
                        aligned=aligned, general=lambda: general.launcher)  # fmt: skip
    launcher((1, 1, 1), 0, [4096, 64, 1] * arrays)
    launcher((1, 1, 1), 0, [4096, 64, 1] * (arrays - 1) + [4100, 64, 1])  # the last one 4 bytes in
    assert len(fake.launches) == len(general.launches) == 1


def test_whole_groups_need_no_lane_by_lane_path():
    """bfloat16 rows: 16-byte loads and stores of whole groups, no 2-byte access in the PTX
    (where the kernel for any array has them, for groups a misaligned view cuts)."""
    kernel = tl.tile_kernel(scaled_rows.fn)
    e = tl.explain(kernel, "bf16[:, :]", "bf16[:, :]", BN=1024)
    assert "aligned out, x" in e["thread_ir"] and e["thread_ir"].count("lanes=8 whole") == 2
    assert re.search(r"ld\.global\.v4\.[bu]32", e["ptx"]) and "st.global.v4.u32" in e["ptx"]
    assert "ld.global.u16" not in e["ptx"] and "st.global.u16" not in e["ptx"]
    assert "stack 0 bytes" in e["resources"]
    general = _cpu_kernel(kernel, "bf16[:, :]", "bf16[:, :]", BN=1024).general().program
    assert not general.aligned and "whole" not in format_thread_program(general)


@pytest.mark.parametrize(
    "start, step, whole", [(0, 256, True), (8, 256, True), (256, 8, True), (4, 256, False), (0, 100, False)]
)
def test_a_window_is_whole_where_its_corner_is_a_multiple_of_a_group(start, step, whole):
    """Element offsets from a loop of ``range(START, n, STEP)``: whole groups of 8 bfloat16
    where START and STEP are multiples of 8 (the loop index then is)."""
    text = tl.explain(shifted_rows, "bf16[:, :]", "bf16[:, :]", START=start, STEP=step, BN=256)["thread_ir"]
    assert ("lanes=8 whole" in text) == whole and ("lanes=8 in [" in text) != whole


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 5),
    cols=st.integers(1, 300),
    first=st.integers(0, 9),
    pad=st.integers(0, 9),
    dtype=st.sampled_from([np.float32, np.float16, np.uint8]),
)
def test_views_of_any_alignment_are_right(rows, cols, first, pad, dtype):
    """A view ``first`` elements into rows of ``first + cols + pad``: the kernel that takes
    its arrays aligned runs where the view is so, the general one elsewhere; both right."""
    base = np.arange(rows * (first + cols + pad)).reshape(rows, -1).astype(dtype)
    x = base[:, first : first + cols]
    out = np.zeros((rows, cols), dtype)
    kernel = tl.tile_kernel(scaled_rows.fn, backend="cpu")
    kernel[rows](x, out, BN=128)
    np.testing.assert_array_equal(out, x * 2)
    ran = _cpu_kernel(kernel, x, out, BN=128)
    views = [(a.__array_interface__["data"][0], a.shape, [s // a.itemsize for s in a.strides]) for a in (x, out)]
    aligned = all(array_aligned(*view, x.itemsize) for view in views)
    assert ran.program.aligned == ("out", "x") and isinstance(ran._general, type(ran)) != aligned


def test_explain_shows_the_kernel_the_arrays_run():
    """Given real arrays, explain's thread IR and code are those of the kernel they would run:
    on the CPU backend a misaligned view runs the general kernel; on cuda a host array is
    copied to the GPU whole (contiguous, aligned), so the same view runs the aligned one."""
    base = np.zeros((4, 136), np.float32)  # rows of 544 bytes
    out = np.zeros((4, 128), np.float32)
    aligned, misaligned = base[:, :128], base[:, 1:129]
    assert "lanes=4 whole" in tl.explain(scaled_rows, aligned, out, BN=128, backend="cpu")["thread_ir"]
    general = tl.explain(scaled_rows, misaligned, out, BN=128, backend="cpu")
    assert general["thread_ir"].startswith("# not every array") and "whole" not in general["thread_ir"]
    copied = tl.explain(scaled_rows, misaligned, out, BN=128, backend="cuda")
    assert "lanes=4 whole" in copied["thread_ir"] and re.search(r"ld\.global\.v4\.[bf]32", copied["ptx"])


@tl.tile_kernel(backend="cpu")
def centred_rows(x, out, BN: tl.Constant):
    """out = x - mean(x) per row: a (1, BN) row reduced across lanes and warps, then stored."""
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(1, BN))
    tl.store(out, t - tl.sum(t, axis=1, keepdims=True) / x.shape[1], index=(i, 0))


@tl.tile_kernel(backend="cpu")
def small_matmul(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc, index=(i, j))


def test_the_kernel_for_any_array_moves_consecutive_elements_lane_by_lane():
    """Its layouts are the aligned kernel's with consecutive lanes on consecutive elements
    (shown by explain's layouts stage): one element an access, no alignment test, and the
    row's reduction crosses lanes and warps as the aligned kernel's does (the row is on both)."""
    base = np.random.default_rng(5).integers(-50, 50, (3, 1100)).astype(np.float32)  # (sums exact in float32)
    aligned, misaligned, out = base[:, :1024], base[:, 1:1025], np.zeros((3, 1024), np.float32)
    fast = tl.explain(centred_rows, aligned, out, BN=1024, backend="cpu")
    general = tl.explain(centred_rows, misaligned, out, BN=1024, backend="cpu")
    assert "1x1024 reg=[0,1,9] lane=[2,3,4,5,6] warp=[7,8]" in fast["layouts"]
    assert general["layouts"].startswith("# not every array")
    assert "1x1024 reg=[5,6,9] lane=[0,1,2,3,4] warp=[7,8]" in general["layouts"]
    assert "lanes=" not in general["thread_ir"] and "lanes=4 whole" in fast["thread_ir"]
    assert paths(general["thread_ir"]) == paths(fast["thread_ir"]) == {"shuffle", "shared"}
    centred_rows[3](misaligned, out, BN=1024)
    np.testing.assert_allclose(out, misaligned - misaligned.sum(axis=1, keepdims=True) / 1024, rtol=1e-6)


def test_the_kernel_for_any_array_loads_a_chunk_of_elements_from_one_address():
    """On CUDA a thread's elements are loaded and stored 8 at a time under one test of their
    masks (not an address and a branch per element)."""
    kernel = tl.tile_kernel(scaled_rows.fn)
    key, _ = kernel.specialize(kernel.bind(("f32[:, :]", "f32[:, :]"), dict(BN=1024)))
    ptx = kernel.compile(key, "cuda").backend_kernel.general().ptx()
    accesses = " ".join(line.split()[0] for line in ptx.splitlines() if "global" in line or "bra" in line)
    assert "ld.global.f32" in accesses and ".v4." not in accesses
    assert " ".join(["ld.global.f32"] * 8) in accesses and " ".join(["st.global.f32"] * 8) in accesses


@pytest.mark.parametrize("shape", [(1,), (1, 1), (3,), (2, 4), (5, 8), (1, 1024), (32, 128), (7, 300), (2, 3, 40)])
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("threads", [32, 128, 512])
def test_a_lane_first_layout_holds_what_the_blocked_one_holds(shape, itemsize, threads):
    """The same index bits, each once, on the same warps; consecutive lanes on consecutive
    elements wherever the blocked layout gives a thread a vector (a tile smaller than a warp
    is laid out as it was: its lanes hold copies, fuzzing found them given bits it lacks)."""
    plain, first = blocked(shape, itemsize, threads), blocked(shape, itemsize, threads, lane_first=True)
    held = [b for b in first.reg + first.lane if b is not None]
    assert sorted(held + [b for b in first.warp if b is not None]) == list(range(log2(padded_size(shape))))
    assert first.warp == plain.warp and len(first.reg) == len(plain.reg)
    if plain.vector_width() > 1:
        assert first.lane == (0, 1, 2, 3, 4) and first.vector_width() == 1
    else:
        assert first == plain


@tl.tile_kernel(backend="cpu")
def count_beside_rows(x, out, values, counts, BN: tl.Constant, S: tl.Constant):
    """Rows of ``x`` doubled (moved in vectors, so a misaligned view runs the kernel for any
    array), and beside them tiles of ``S`` < 32 elements: an atomic add and a histogram."""
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i, 0), shape=(1, BN)) * 2, index=(i, 0))
    tl.atomic_add(counts, tl.arange(0, S), tl.full((S,), 1, tl.int32))
    tl.atomic_add(counts, S + tl.arange(0, 4), tl.histogram(tl.load(values, index=(0,), shape=(S,)), 4))


@pytest.mark.parametrize("first", [0, 1])
def test_tiles_smaller_than_a_warp_in_the_kernel_for_any_array(first):
    """Their lanes hold copies: each element is added once, not once a lane."""
    base = np.arange(3 * 260, dtype=np.float32).reshape(3, 260)
    x, out = base[:, first : first + 256], np.zeros((3, 256), np.float32)
    values, counts = np.array([0, 1, 1, 2, 3, 3, 3, 0], np.int32), np.zeros(12, np.int32)
    count_beside_rows[3](x, out, values, counts, BN=256, S=8)
    np.testing.assert_array_equal(out, x * 2)
    np.testing.assert_array_equal(counts, [3] * 8 + list(3 * np.bincount(values, minlength=4)))


@tl.tile_kernel(backend="cpu")
def product_plus_operand(a, b, c, B: tl.Constant):
    """A dot and its operand's values (a conversion in the aligned kernel), with a
    transposed operand (attention's ``k.T``: copied ahead only in 16-byte vectors)."""
    x = tl.load(a, index=(0, 0), shape=(B, B))
    tl.store(c, tl.dot(x, tl.load(b, index=(0, 0), shape=(B, B)).T) + x.astype(tl.float32), index=(0, 0))


def test_operands_of_a_dot_keep_their_layouts_in_the_kernel_for_any_array():
    """Values that meet a dot's operands go to shared memory in words: the kernel for any
    array lays them out as the aligned one does (no conversion more)."""
    key, _ = small_matmul.specialize(
        small_matmul.bind(("f16[:, :]", "f16[:, :]", "f32[:, :]"), dict(BM=64, BN=64, BK=32))
    )
    compiled = small_matmul.compile(key, "cpu")
    compiled.backend_kernel.general()
    assert "layouts (any array)" not in compiled.stages
    # (also where the aligned kernel converts a layout, and through a transpose)
    key, _ = product_plus_operand.specialize(
        product_plus_operand.bind(("f16[:, :]", "f16[:, :]", "f32[:, :]"), {"B": 64})
    )
    compiled = product_plus_operand.compile(key, "cpu")
    compiled.backend_kernel.general()
    assert "convert_layout" in compiled.stages["layouts"] and "layouts (any array)" not in compiled.stages
    a = np.zeros((64, 65), np.float16)[:, 1:]  # (misaligned: explain shows the layouts it runs, the same)
    shown = tl.explain(product_plus_operand, a, a, np.zeros((64, 64), np.float32), B=64, backend="cpu")
    assert shown["layouts"].startswith("# not every array") and shown["layouts"].endswith(compiled.stages["layouts"])


def test_the_cpu_backend_refuses_a_claimed_whole_group_that_is_misaligned(monkeypatch):
    """The CUDA kernel moves a group the lowering claimed whole in one access, without looking;
    the CPU backend checks the claim: with the analysis made to claim every corner aligned, a
    window 3 elements in fails the kernel instead of reading across its groups."""
    from tilelang._lower.lowering import Lowering

    monkeypatch.setattr(Lowering, "start_multiple", lambda self, x: 0)
    kernel = tl.tile_kernel(shifted_rows.fn, backend="cpu")
    x, out = np.zeros((2, 256), np.float32), np.zeros((2, 256), np.float32)
    assert "lanes=4 whole" in tl.explain(kernel, x, out, START=3, STEP=128, BN=128, backend="cpu")["thread_ir"]
    with pytest.raises(tl.TileCompilerError, match="misaligned"):
        kernel[2](x, out, START=3, STEP=128, BN=128)


@tl.tile_kernel(backend="cpu")
def rounded_rows(x, y, out, BN: tl.Constant):
    """out = x * y in 16 bits (rounded from float32 as it is packed) and the float32 quotient
    x / 3 converted, one row per block, windows ``1`` element in where ``x`` is a view."""
    i = tl.block_id(0)
    for j in tl.range(0, tl.cdiv(x.shape[1], BN)):
        a, b = tl.load(x, index=(i, j), shape=(1, BN)), tl.load(y, index=(i, j), shape=(1, BN))
        tl.store(out, a * b + (a.astype(tl.float32) / 3).astype(out.dtype), index=(i, j))


@settings(max_examples=20, deadline=None)
@given(cols=st.integers(1, 100), first=st.integers(0, 8), dtype=st.sampled_from(["float16", "bfloat16"]))
def test_16_bit_results_stored_as_words_are_rounded_once(cols, first, dtype):
    """Vectors of 16-bit floats are stored as words that round two float32s each (the sum is
    not rounded before it is packed, the quotient's conversion is the pack's): the bits are
    NumPy's, on aligned views (whole groups) and the others (lane by lane)."""
    d = getattr(tl, dtype).np
    rng = np.random.default_rng(cols * 10 + first)
    base = rng.standard_normal((3, first + cols + 8)).astype(np.float32).astype(d)
    x, y = base[:, first : first + cols], rng.standard_normal((3, cols)).astype(np.float32).astype(d)
    out = np.zeros((3, cols), d)
    rounded_rows[3](x, y, out, BN=64)
    a, b = x.astype(np.float32), y.astype(np.float32)
    product, quotient = (a * b).astype(d).astype(np.float32), (a / np.float32(3)).astype(d).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint16), (product + quotient).astype(d).view(np.uint16))
