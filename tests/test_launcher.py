"""The C launcher (tilelang/_launch.c) against a fake driver (CPU tier): parameter packing
for every struct code, the context it launches in, failures, and launches from threads."""

import struct
import threading
import time

import numpy as np
import pytest
from _fake_driver import CONTEXT, FakeDriver
from hypothesis import given
from hypothesis import strategies as st
from test_runtime import FAKE_TORCH_DTYPES, FakeTensor

from tilelang._backends.cuda_driver import PARAM_CODES, launcher_module
from tilelang.errors import TileArgumentError

CODES = "?bhiqBHIQfd"
RANGES = {"b": 8, "h": 16, "i": 32, "q": 64}  # signed bits; upper case: unsigned


def values_of(code):
    if code == "?":
        return st.booleans()
    if code == "f":  # rounded to float32; past its range is an error (below)
        return st.floats(-3.4e38, 3.4e38)
    if code == "d":
        return st.floats(width=64, allow_nan=False)
    bits = RANGES[code.lower()]
    if code in RANGES:
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.integers(0, 2**bits - 1)


@given(st.lists(st.sampled_from(CODES), min_size=1, max_size=12).flatmap(
    lambda codes: st.tuples(st.just("".join(codes)), st.tuples(*(values_of(c) for c in codes)))
))  # fmt: skip
def test_parameters_are_packed_as_struct_packs_them(codes_values):
    """Each value lands at its C-ABI offset, converted as struct.pack converts it
    (floats to float32 with IEEE rounding)."""
    codes, values = codes_values
    driver = FakeDriver(codes)
    driver.launcher((2, 3, 4), 5, values)
    grid, stream, packed, _ = driver.launches[-1]
    assert (grid, stream) == ((2, 3, 4), 5)
    offsets = [struct.calcsize("@" + codes[: i + 1]) - struct.calcsize(c) for i, c in enumerate(codes)]
    assert driver.launcher.offsets == tuple(offsets)
    expected = [float(np.float32(v)) if c == "f" else v for c, v in zip(codes, values)]
    assert list(packed) == expected


def fast_path_with(codes: str, plan: tuple):
    """A FastPath of ``plan`` (positional arguments only) over a fake driver's launcher."""
    from tilelang._fastpath import constant_key
    from tilelang._runtime import stream_handle

    driver = FakeDriver(codes)
    native = launcher_module()
    fast_path = native.FastPath(driver.launcher, plan, (), None, 0, lambda device: 0, stream_handle, constant_key, ())
    return fast_path, driver


def test_every_scalar_code_is_known_to_the_launcher():
    FakeDriver("".join(PARAM_CODES.values()))


def test_values_that_do_not_fit_their_parameter_are_errors():
    for code, value in [("b", 128), ("h", -(2**15) - 1), ("i", 2**31), ("q", 2**63), ("B", -1), ("I", 2**32)]:
        with pytest.raises(OverflowError):
            FakeDriver(code).launcher((1, 1, 1), 0, (value,))
    with pytest.raises(TypeError):
        FakeDriver("f").launcher((1, 1, 1), 0, ("1.0",))
    with pytest.raises(ValueError, match="1 values for 2 kernel parameters"):
        FakeDriver("ii").launcher((1, 1, 1), 0, (1,))
    with pytest.raises(ValueError, match="more values than"):
        FakeDriver("i").launcher((1, 1, 1), 0, (1, 2))
    with pytest.raises(ValueError, match="unknown parameter code"):
        FakeDriver("x")
    with pytest.raises(ValueError, match="bytes"):
        FakeDriver("d" * 600)  # past the driver's 4 KB of parameters
    with pytest.raises(ValueError, match="unknown parameter code"):
        FakeDriver("i\0")
    with pytest.raises(OverflowError, match="float32's range"):
        FakeDriver("f").launcher((1, 1, 1), 0, (1e39,))
    for grid in [(2**31, 1, 1), (1, 65_536, 1), (1, 1, 65_536), (2**64, 1, 1)]:  # past CUDA's grid limits
        with pytest.raises(OverflowError):
            FakeDriver("i").launcher(grid, 0, (1,))
    with pytest.raises(ValueError, match="NULL"):
        launcher_module().Launcher(1, 128, 0, "i", 1, (0, 0, 0), print, None)


def test_a_fast_path_declines_a_grid_past_cudas_limits():
    """(The full path then names the grid at the user's line; the driver would say INVALID_VALUE.)"""
    fast_path, driver = fast_path_with("", ())
    assert fast_path((2**31 - 1, 65_535, 65_535), (), {}, None, None)
    for grid in [(2**31, 1, 1), (1, 65_536, 1), (1, 1, 65_536)]:
        assert not fast_path(grid, (), {}, None, None)
    assert [g for g, *_ in driver.launches] == [(2**31 - 1, 65_535, 65_535)]


def test_a_fast_path_declines_a_negated_tensor_view():
    """(torch's neg bit, z.conj().imag: its memory holds -x; the full path refuses it.)"""
    f32 = FAKE_TORCH_DTYPES["f32"]
    fast_path, driver = fast_path_with("Qqq", ((launcher_module().TENSOR, FakeTensor, f32, 1, False),))
    assert fast_path((1, 1, 1), (FakeTensor((8,), (2,)),), {}, None, None)
    assert not fast_path((1, 1, 1), (FakeTensor((8,), (2,), negated=True),), {}, None, None)
    assert len(driver.launches) == 1
    contiguous, _ = fast_path_with("Qqq", ((launcher_module().TENSOR, FakeTensor, f32, 1, 1),))
    assert contiguous((1, 1, 1), (FakeTensor((1,)),), {}, None, None)
    assert not contiguous((1, 1, 1), (FakeTensor((1,), negated=True),), {}, None, None)  # (tensor([1+2j]).conj().imag)
    # (a larger contiguous negated view comes only from the private torch._neg_view: not asked, to stay fast)
    assert contiguous((1, 1, 1), (FakeTensor((8,), negated=True),), {}, None, None)


def test_a_fast_path_declines_a_written_tensor_whose_elements_share_memory():
    """(An expanded view, stride 0: every write to one address races; the full path refuses it.)"""
    TENSOR = launcher_module().TENSOR
    f32 = FAKE_TORCH_DTYPES["f32"]
    written, _ = fast_path_with("Qqqqq", ((TENSOR, FakeTensor, f32, 2, 1 | 2),))
    read, _ = fast_path_with("Qqqqq", ((TENSOR, FakeTensor, f32, 2, 1),))
    assert written((1, 1, 1), (FakeTensor((4, 8), (16, 1)),), {}, None, None)
    assert not written((1, 1, 1), (FakeTensor((4, 8), (0, 1)),), {}, None, None)
    assert read((1, 1, 1), (FakeTensor((4, 8), (0, 1)),), {}, None, None)  # (read: a broadcast is fine)
    assert written((1, 1, 1), (FakeTensor((2, 0), (0, 1)),), {}, None, None)  # no elements to share


def test_values_that_change_the_sequence_while_packed_are_safe():
    flat = []

    class Shrinking:
        def __index__(self):
            flat.clear()  # the launcher packs its own copy of the sequence
            return 1

    flat += [Shrinking(), 2, 3]
    driver = FakeDriver("iii")
    driver.launcher((1, 1, 1), 0, flat)
    assert driver.values == (1, 2, 3)


def test_it_launches_in_the_kernels_context_and_restores_the_callers():
    driver = FakeDriver("i")  # the kernel's context is current: no switch
    driver.launcher((1, 1, 1), 0, (1,))
    assert driver.switches == [] and driver.launches[-1][3] == CONTEXT

    other = FakeDriver("i", current=0x99)  # another GPU's context is current (torch.cuda.set_device(1), say)
    other.launcher((1, 1, 1), 0, (1,))
    assert other.launches[-1][3] == CONTEXT and other.switches == [CONTEXT, 0x99] and other.current == 0x99

    fresh = FakeDriver("i", current=None)  # a new thread, no context yet: it keeps the kernel's (as the runtime API)
    fresh.launcher((1, 1, 1), 0, (1,))
    assert fresh.launches[-1][3] == CONTEXT and fresh.switches == [CONTEXT] and fresh.current == CONTEXT


def test_a_failed_launch_raises_through_the_callback():
    driver = FakeDriver("i")
    driver.result = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(RuntimeError, match="launch failed: 700"):
        driver.launcher((1, 1, 1), 0, (1,))
    assert driver.errors == [700]


def test_launches_from_threads_keep_their_own_parameters():
    """The buffer is per call (on the C stack): a thread switch while one call is read
    (a tensor's Python methods) cannot mix another call's values into it."""

    class Slow:  # a tensor whose methods let other threads run mid-read
        dtype = "f32"

        def __init__(self, n):
            self.n = n

        @property
        def shape(self):
            time.sleep(0)
            return (self.n,)

        def stride(self):
            time.sleep(0)
            return (1,)

        def is_contiguous(self):  # so its strides are read
            return False

        def is_neg(self):
            time.sleep(0)
            return False

        def data_ptr(self):
            return 16 * self.n

        def get_device(self):
            return 0

    fast_path, driver = fast_path_with("Qqq", ((launcher_module().TENSOR, Slow, "f32", 1, True),))

    def launch(n):
        for _ in range(200):
            assert fast_path((1, 1, 1), (Slow(n),), {}, None, None)

    threads = [threading.Thread(target=launch, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(driver.launches) == 1600
    assert all(values == (16 * values[1], values[1], 1) for _, _, values, _ in driver.launches)


def test_a_call_site_tries_the_fast_paths_then_the_full_path():
    calls = []

    def fast(answer):
        def path(grid, args, kwargs, backend, stream):
            calls.append((answer, grid, args, kwargs, backend, stream))
            return answer

        return path

    def full(*args, **kwargs):
        calls.append(("full", args, kwargs))

    paths = [fast(False), fast(True), fast(True)]
    site = launcher_module().CallSite(paths, (2, 1, 1), full)
    site(1, 2, TILE=4, stream=7)  # the first that takes it launches; backend= and stream= are the launch's own
    assert calls == [(False, (2, 1, 1), (1, 2), {"TILE": 4}, None, 7), (True, (2, 1, 1), (1, 2), {"TILE": 4}, None, 7)]
    calls.clear()
    paths[:] = [fast(False)]  # the kernel's list, as the full path changes it
    site(1, backend="cpu")
    assert calls == [(False, (2, 1, 1), (1,), {}, "cpu", None), ("full", (1,), {"backend": "cpu"})]
    calls.clear()
    launcher_module().CallSite([fast(True)], None, full)(3)  # a grid computed per call: always the full path
    assert calls == [("full", (3,), {})]


def test_kernel_grid_is_one_call_site_per_grid():
    import tilelang as tl

    @tl.tile_kernel
    def copy(x, out, TILE: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(TILE,)), index=(0,))

    assert copy[2] is copy[2] and copy[(2, 3)] is copy[(2, 3)] and copy[2] is not copy[(2,)]
    assert copy[True] is not copy[1]  # True == 1, but not a grid
    x = np.ones(4, np.float32)
    with pytest.raises(tl.TileArgumentError, match=r"grid sizes must be ints from 0 to 2\*\*31 - 1"):
        copy[True](x, x, TILE=4, backend="interpret")
    with pytest.raises(tl.TileArgumentError, match=r"grid sizes must be ints from 0 to 2\*\*31 - 1"):
        copy[(1.0,)](x, x, TILE=4, backend="interpret")


def test_a_dropped_kernel_is_collected():
    """kernel[grid] and its kernel refer to each other; the collector frees them."""
    import gc
    import weakref

    import tilelang as tl

    @tl.tile_kernel
    def copy(x, out, TILE: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(TILE,)), index=(0,))

    x = np.ones(4, np.float32)
    copy[1](x, x, TILE=4, backend="interpret")
    collected = weakref.ref(copy)
    del copy
    gc.collect()
    assert collected() is None


def test_a_fast_path_in_a_cycle_is_collected_and_interrupts_are_not_swallowed():
    import gc
    import weakref

    from tilelang._fastpath import constant_key

    native = launcher_module()

    class Holder:  # a Constant that refers back to what holds the fast path
        pass

    holder = Holder()
    holder.paths = [fast_path_with("", ((native.CONST, constant_key(holder)),))[0]]
    collected = weakref.ref(holder)
    del holder
    gc.collect()
    assert collected() is None

    class Interrupting:
        @property
        def dtype(self):
            raise KeyboardInterrupt

    fast_path, _ = fast_path_with("Qqq", ((native.TENSOR, Interrupting, "f32", 1, True),))
    with pytest.raises(KeyboardInterrupt):
        fast_path((1, 1, 1), (Interrupting(),), {}, None, None)


def test_a_bad_stream_on_the_fast_path_is_located_at_the_call():
    fast_path, _ = fast_path_with("i", ((launcher_module().INT, 0),))
    with pytest.raises(TileArgumentError, match=r"test_launcher.py:\d+.*stream= takes a CUDA stream"):
        fast_path((1, 1, 1), (1,), {}, None, "zz")


def test_changing_a_kernels_backend_forgets_its_fast_paths():
    import tilelang as tl

    @tl.tile_kernel(backend="cuda")
    def copy(x, out, TILE: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(TILE,)), index=(0,))

    copy._fast_paths.append(lambda *call: True)  # stands in for one made on the GPU
    site = copy[1]
    copy.backend = "interpret"
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    site(x, out, TILE=4)  # not taken by the old fast path: the interpreter ran it
    np.testing.assert_array_equal(out, x)
    assert copy.backend == "interpret" and copy._fast_paths == []
