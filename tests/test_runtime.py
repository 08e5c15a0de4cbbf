"""Runtime: specialization keys, the compiled-kernel disk cache, argument errors (CPU tier)."""

import os
import re
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang._backends import cuda as cuda_backend
from tilelang._backends.cuda_driver import launcher_module


@tl.tile_kernel
def scale(x, out, alpha, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * alpha, index=(i,))


@pytest.fixture(autouse=True)
def _fake_pointers_on_cuda_0(monkeypatch):
    """The fakes' pointers are no memory: on a host with several GPUs the driver would be
    asked which one holds them (the two_gpus fixture below makes that host here)."""
    from tilelang import _runtime

    monkeypatch.setattr(_runtime, "_pointer_device", lambda ptr: 0)


def key_of(*args, **constants):
    return scale.specialize(scale.bind(args, constants))[0]


def test_key_tells_dtype_rank_stride_scalars_and_constants_apart():
    x32, x64 = np.zeros(8, np.float32), np.zeros(8, np.float64)
    base = key_of(x32, x32, 2.0, TILE=4)
    assert key_of(np.ones(9, np.float32), np.ones(9, np.float32), 3.0, TILE=4) == base  # shapes, values: runtime
    assert key_of(x64, x64, 2.0, TILE=4) != base
    assert key_of(np.zeros((2, 4), np.float32), x32, 2.0, TILE=4) != base
    assert key_of(np.zeros(16, np.float32)[::2], x32, 2.0, TILE=4) != base  # last dimension not unit-stride
    assert key_of(x32, x32, 2, TILE=4) != base  # int scalar
    assert key_of(x32, x32, np.float64(2.0), TILE=4) != base  # NumPy scalars are strongly typed
    assert key_of(x32, x32, 2.0, TILE=8) != base
    assert hash(base) == hash(key_of(x32, x32, 2.0, TILE=4))


def test_strided_arrays_run(tmp_path):
    x = np.arange(40, dtype=np.float32)[::2]
    out = np.zeros(20, np.float32)
    scale[tl.cdiv(20, 8)](x, out, 3.0, TILE=8, backend="cpu")
    np.testing.assert_array_equal(out, x * 3)


def test_wrong_argument_count_and_kind_name_the_parameter():
    x = np.zeros(8, np.float32)
    with pytest.raises(tl.TileArgumentError, match="missing a required argument: 'alpha'"):
        scale[1](x, x, TILE=8, backend="cpu")
    with pytest.raises(tl.TileArgumentError, match="argument `alpha`: expected an array or a scalar, got list"):
        scale[1](x, x, [1.0], TILE=8, backend="cpu")
    with pytest.raises(tl.TileTypeError, match="argument `x`"):
        scale[1](np.zeros(8, np.complex64), x, 1.0, TILE=8, backend="cpu")


# ------------------------------------------------------------------ fast signatures


class FakeDeviceArray:
    """A device array as far as ``__cuda_array_interface__`` tells (never dereferenced)."""

    def __init__(self, shape, dtype=np.float32, strides=None, ptr=0x7F0000000000):
        dt = np.dtype(dtype)
        self.interface = {
            "shape": shape,
            "typestr": dt.str,
            "data": (ptr, False),
            "strides": None if strides is None else tuple(s * dt.itemsize for s in strides),
            "version": 3,
        }

    @property
    def __cuda_array_interface__(self):
        return self.interface


CALLS = [  # (args, constants) of launches of `scale`, alike and not
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": 4}),
    ((FakeDeviceArray((9,), ptr=0x7F0000001000), FakeDeviceArray((9,)), 3.0), {"TILE": 4}),
    ((FakeDeviceArray((8,), np.float64), FakeDeviceArray((8,)), 2.0), {"TILE": 4}),
    ((FakeDeviceArray((2, 4)), FakeDeviceArray((8,)), 2.0), {"TILE": 4}),
    ((FakeDeviceArray((8,), strides=(2,)), FakeDeviceArray((8,)), 2.0), {"TILE": 4}),
    ((FakeDeviceArray((8,), strides=(1,)), FakeDeviceArray((8,)), 2.0), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2**40), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), True), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), np.float64(2.0)), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), np.float16(2.0)), {"TILE": 4}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": 8}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": 4.0}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": True}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": 0.0}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0), {"TILE": -0.0}),
    ((FakeDeviceArray((8,)), FakeDeviceArray((8,)), 2.0, 4), {}),
]


def driver_for(args, constants):
    """A fake driver whose launcher takes the parameters of `scale` for this call: an
    array's pointer, shape and strides, a scalar by its dtype, a Python float as a double
    (a call that would not compile still has them)."""
    from _fake_driver import FakeDriver

    from tilelang._backends.cuda_driver import PARAM_CODES

    arguments = scale.bind(args, constants)
    infos = scale.specialize(arguments)[1]
    codes = "".join(
        "Q" + "qq" * len(infos[name].shape) if name in infos else PARAM_CODES[_travels_as(value)]
        for name, value in arguments.items()
        if name not in scale.constants
    )
    return FakeDriver(codes)


def _travels_as(value) -> str:
    return "float64" if isinstance(value, float) else tl.dtypes.scalar_dtype(value).name


def test_the_fake_drivers_codes_are_the_kernels():
    from tilelang._backends.cuda import param_codes

    for args, constants in [CALLS[i] for i in (0, 4, 6, 7, 8, 10)]:  # ones that compile
        compiled = scale.compile(key_of(*args, **constants), "cuda")
        assert driver_for(args, constants).codes == param_codes(compiled.run.kernel.program)


def fast_path_of(args, constants, backend=None):
    from tilelang._fastpath import generate

    infos = scale.specialize(scale.bind(args, constants))[1]
    driver = driver_for(args, constants)
    return generate(scale, args, constants, backend, infos, (driver.launcher, lambda device: 7, 0)), driver


def test_a_fast_path_takes_only_calls_that_specialize_alike():
    """The fast path skips bind + specialize: a call it takes must have the specialization
    key of the call it was made from, and a call alike but for values must be taken."""
    for args, constants in CALLS:
        fast_path, _ = fast_path_of(args, constants)
        for other_args, other_constants in CALLS:
            taken = fast_path((1, 1, 1), other_args, other_constants, None, None)
            alike = key_of(*args, **constants) == key_of(*other_args, **other_constants)
            same_form = len(args) == len(other_args) and constants.keys() == other_constants.keys()
            assert taken == (alike and same_form), (args, constants, other_args, other_constants)
    fast_path, _ = fast_path_of(*CALLS[0])
    assert fast_path((1, 1, 1), *CALLS[1], None, None)  # shapes, pointers and scalar values are parameters
    assert fast_path((1, 1, 1), *CALLS[5], None, None)  # explicit unit strides
    assert not fast_path((1, 1, 1), *CALLS[0], "cpu", None)  # another backend


def test_a_fast_path_launches_with_the_calls_values():
    x, out = FakeDeviceArray((2, 5), strides=(7, 1), ptr=4096), FakeDeviceArray((3,), ptr=8192)
    fast_path, driver = fast_path_of((x, out, 1.5), {"TILE": 4})
    y, out2 = FakeDeviceArray((2, 6), strides=(9, 1), ptr=1024), FakeDeviceArray((4,), ptr=2048)
    assert fast_path((3, 1, 1), (y, out2, 1e38), {"TILE": 4}, None, None)
    assert fast_path((0, 1, 1), (y, out2, 1e38), {"TILE": 4}, None, None)  # an empty grid launches nothing
    assert fast_path((2, 2, 1), (y, out2, 0.1), {"TILE": 4}, None, 99)
    assert fast_path((2, 2, 1), (y, out2, 1e40), {"TILE": 4}, None, None)
    (grid, stream, flat, _), (grid2, stream2, flat2, _), (_, _, flat3, _) = driver.launches
    assert (grid, stream, grid2, stream2) == ((3, 1, 1), 7, (2, 2, 1), 99)
    assert flat == (1024, 2, 6, 9, 1, 2048, 4, 1, 1e38)
    # a Python float (a weak float32 in the kernel) travels as its double: rounded once where it meets a dtype
    assert driver.codes[-1] == "d" and flat2[-1] == 0.1 and flat3[-1] == 1e40


class FakeTensor:
    """A torch tensor as far as tilelang reads one (by its type's module, "torch...")."""

    __module__ = "torch.fake"
    layout = "strided"  # (fake_torch maps None, the layout tilelang takes, to this)

    def __init__(self, shape, strides=None, dtype="f32", device=0, ptr=0x7F0000000000, negated=False):
        self.shape, self.dtype, self.device, self.ptr = shape, FAKE_TORCH_DTYPES[dtype], device, ptr
        self.negated = negated  # (torch's neg bit: z.conj().imag)
        self.strides = (
            strides if strides is not None else tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
        )

    def stride(self):
        return self.strides

    def is_contiguous(self):  # torch's rule: the strides of size-1 axes do not count
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self.strides))):
            if size != 1 and stride != expected:
                return 0 in self.shape
            expected *= size
        return True

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self.device

    def is_neg(self):
        return self.negated


class FakeNumbaArray:
    """A numba device array as far as tilelang reads one: its attributes, strides in bytes,
    the pointer behind ``gpu_data.device_pointer`` (int() of it, as of cuda.bindings' CUdeviceptr)."""

    __cuda_ndarray__ = True

    class Pointer:
        def __init__(self, value):
            self.value = value

        def __int__(self):
            return self.value

    def __init__(self, shape, dtype=np.float32, strides=None, ptr=0x7F0000000000):
        self.shape, self.dtype = shape, np.dtype(dtype)
        strides = strides if strides is not None else tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
        self.strides = tuple(s * self.dtype.itemsize for s in strides)
        self.gpu_data = types.SimpleNamespace(device_pointer=self.Pointer(ptr))


class FakeCupyArray(FakeNumbaArray):
    """A CuPy array as far as tilelang reads one: its attributes, the pointer at
    ``data.ptr``, its GPU at ``device.id``; never its ``__cuda_array_interface__``, which
    synchronizes CuPy's stream."""

    __module__ = "cupy.fake"
    __cuda_ndarray__ = False

    def __init__(self, shape, dtype=np.float32, strides=None, ptr=0x7F0000000000, device=0):
        super().__init__(shape, dtype, strides, ptr)
        self.memory, self.gpu = types.SimpleNamespace(ptr=ptr), types.SimpleNamespace(id=device)

    data = property(lambda self: self.memory)  # descriptors of the class, as CuPy's
    device = property(lambda self: self.gpu)

    @property
    def __cuda_array_interface__(self):
        raise AssertionError("read by its attributes, not its __cuda_array_interface__")


FAKE_TORCH_DTYPES = {"f32": object(), "f64": object()}


@pytest.fixture
def fake_torch(monkeypatch):
    from tilelang import _runtime

    dtypes = {FAKE_TORCH_DTYPES["f32"]: tl.float32, FAKE_TORCH_DTYPES["f64"]: tl.float64, None: FakeTensor.layout}
    monkeypatch.setattr(_runtime, "_TORCH_DTYPES", dtypes)


def test_the_fast_path_reads_torch_tensors_inline(fake_torch):
    first = ((FakeTensor((8,)), FakeTensor((8,)), 2.0), {"TILE": 4})
    fast_path, driver = fast_path_of(*first)
    assert fast_path.plan[0][0] == launcher_module().TENSOR  # read by its methods, not through a reader
    x, out = FakeTensor((3,), strides=(1,), ptr=4096), FakeTensor((5,), strides=(1,), ptr=8192)
    assert fast_path((1, 1, 1), (x, out, 0.5), {"TILE": 4}, None, None)
    assert driver.values == (4096, 3, 1, 8192, 5, 1, 0.5)
    variants = [
        (FakeTensor((9,), strides=(1,)), FakeTensor((8,)), 2.0),  # alike
        (FakeTensor((1,), strides=(7,)), FakeTensor((8,)), 2.0),  # one element: unit stride all the same
        (FakeTensor((8,), strides=(2,)), FakeTensor((8,)), 2.0),  # strided
        (FakeTensor((8,), device=-1), FakeTensor((8,)), 2.0),  # on the host: copied by the full path
        (FakeTensor((8,), device=1), FakeTensor((8,)), 2.0),  # another GPU
        (FakeTensor((8,), dtype="f64"), FakeTensor((8,)), 2.0),
        (FakeTensor((2, 4)), FakeTensor((8,)), 2.0),
        (FakeTensor(()), FakeTensor((8,)), 2.0),
    ]
    taken = [fast_path((1, 1, 1), args, {"TILE": 4}, None, None) for args in variants]
    assert taken == [True, True, False, False, False, False, False, False]
    for args, was_taken in zip(variants, taken):
        if was_taken:
            assert key_of(*args, TILE=4) == key_of(*first[0], **first[1])
    assert not fast_path((1, 1, 1), first[0], {"OTHER": 4}, None, None)  # another Constant's name


def test_the_fast_path_reads_numba_and_cupy_arrays_by_their_attributes():
    fast_path, _ = fast_path_of((FakeCupyArray((8,)), FakeCupyArray((8,)), 2.0), {"TILE": 4})
    assert fast_path.plan[0][0] == launcher_module().ARRAY
    assert fast_path((1, 1, 1), (FakeCupyArray((3,)), FakeCupyArray((3,)), 2.0), {"TILE": 4}, None, None)
    assert not fast_path((1, 1, 1), (FakeNumbaArray((3,)), FakeCupyArray((3,)), 2.0), {"TILE": 4}, None, None)
    fast_path, driver = fast_path_of((FakeNumbaArray((8,)), FakeNumbaArray((8,)), 2.0), {"TILE": 4})
    assert fast_path.plan[0][0] == launcher_module().ARRAY
    x, out = FakeNumbaArray((5, 3), strides=(-7, 1), ptr=4096), FakeNumbaArray((6,), ptr=8192)
    assert not fast_path((1, 1, 1), (x, out, 0.5), {"TILE": 4}, None, None)  # rank 2
    assert fast_path((1, 1, 1), (FakeNumbaArray((5,), ptr=4096), out, 0.5), {"TILE": 4}, None, None)
    assert driver.values == (4096, 5, 1, 8192, 6, 1, 0.5)
    assert not fast_path((1, 1, 1), (FakeNumbaArray((5,), np.float64), out, 0.5), {"TILE": 4}, None, None)
    assert not fast_path((1, 1, 1), (FakeNumbaArray((5,), strides=(2,)), out, 0.5), {"TILE": 4}, None, None)
    odd = FakeNumbaArray((5,), ptr=4096)
    odd.strides = (-5,)  # bytes, not whole float32s: taken as -2 elements before; the full path refuses it
    assert not fast_path((1, 1, 1), (odd, out, 0.5), {"TILE": 4}, None, None)
    with pytest.raises(tl.TileError, match=r"strides of \(-5,\) bytes, not whole 4-byte elements"):
        scale.specialize(scale.bind((odd, out, 0.5), {"TILE": 4}))
    misaligned = FakeNumbaArray((5,), ptr=4098)  # (the GPU faults on a float32 two bytes into a word)
    with pytest.raises(tl.TileError, match=r"its data at 0x1002, not whole 4-byte elements"):
        scale.specialize(scale.bind((misaligned, out, 0.5), {"TILE": 4}))


def _device_array(kind, dtype, device, step, sizes, ptr):
    """A fake device array: ``kind`` torch, numba, cupy, cai or dlpack; the last axis' stride
    ``step`` (None: contiguous), the others 9 * step."""
    from _dlpack import KDL_CUDA, DLPackArray

    strides = None if step is None else tuple(9 * step for _ in sizes[1:]) + (step,) * bool(sizes)
    if kind == "torch":
        return FakeTensor(sizes, strides, dtype, device, ptr)
    if kind == "numba":  # always on the GPU, which one told by the driver (there is none here: cuda:0)
        return FakeNumbaArray(sizes, {"f32": np.float32, "f64": np.float64}[dtype], strides, ptr)
    if kind == "cupy":  # always on a GPU
        return FakeCupyArray(sizes, {"f32": np.float32, "f64": np.float64}[dtype], strides, ptr, max(device, 0))
    if kind == "cai":
        return FakeDeviceArray(sizes, {"f32": np.float32, "f64": np.float64}[dtype], strides, ptr)
    return DLPackArray(sizes, strides, ("float", int(dtype[1:])), ptr, (KDL_CUDA, max(device, 0)))


ARRAY_KINDS = st.tuples(
    st.sampled_from(["torch", "numba", "cupy", "cai", "dlpack"]), st.sampled_from(["f32", "f64"]),
    st.sampled_from([0, 1, -1]), st.sampled_from([None, 1, 2, -1]), st.integers(0, 2),
)  # fmt: skip
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, width=64),
    st.sampled_from([np.float32(1.5), np.float64(-2), np.float16(0.5), np.int8(-3), np.uint64(2**63), np.bool_(1)]),
)
CONSTANTS = st.one_of(st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, float("nan"), True, False, "a"]))


@st.composite
def launch_pairs(draw):
    """A first launch (device arrays on cuda:0) and a later one, each part of it alike
    (new sizes and pointers, same kind) or drawn anew, so both outcomes are common."""

    def array(kind):
        name, dtype, device, step, ndim = kind
        sizes = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
        return _device_array(name, dtype, device, step, sizes, draw(st.integers(1, 2**40)) * 16)

    def kind():
        return draw(ARRAY_KINDS)

    kinds = [kind(), kind()]
    kinds = [(k[0], k[1], 0, *k[3:]) for k in kinds]  # the first call is on the device
    alpha, tile, positional = draw(SCALARS), draw(CONSTANTS), draw(st.booleans())

    def kept() -> bool:  # each part kept 4 times in 5: a third of later calls are alike
        return draw(st.integers(0, 4)) > 0

    later_kinds = [k if kept() else kind() for k in kinds]
    later_alpha = alpha if kept() else draw(SCALARS)
    later_tile = tile if kept() else draw(CONSTANTS)
    later_positional = positional if kept() else draw(st.booleans())

    def call(kinds, alpha, tile, positional):
        arrays = tuple(array(k) for k in kinds)
        return ((*arrays, alpha, tile), {}) if positional else ((*arrays, alpha), {"TILE": tile})

    return call(kinds, alpha, tile, positional), call(later_kinds, later_alpha, later_tile, later_positional)


def _same(a, b):
    return a == b or (a != a and b != b)


@pytest.fixture
def two_gpus(monkeypatch):
    """A host with two GPUs, so fast paths ask each numba or CuPy array which GPU it is on
    (numba's pointers are on cuda:0 here; CuPy's say)."""
    from tilelang import _fastpath

    monkeypatch.setattr(_fastpath, "gpu_count", lambda: 2)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # huge floats become inf, as in NumPy
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=launch_pairs())
def test_fast_paths_agree_with_the_full_path(fake_torch, two_gpus, pair):
    """Property: a fast path made from one call takes a later call only if the full path
    specializes it alike, and then launches with the values the full path would pass."""
    from tilelang._fastpath import generate
    from tilelang._runtime import array_info, launch_device, scalar_converter
    from tilelang.kernel import type_of

    first, later = pair
    try:
        key, infos = scale.specialize(scale.bind(*first))
    except tl.TileError:  # e.g. an int no dtype holds: no launch, no fast path
        assume(False)
    driver = driver_for(*first)
    fast_path = generate(scale, *first, None, infos, (driver.launcher, lambda device: 7, 0))
    if not fast_path((1, 1, 1), *first, None, None):  # it takes the call it was made from, unless
        assert any(type(v) is float and np.isinf(np.float32(v)) and np.isfinite(v) for v in first[0])
        return  # a float past float32's range: NumPy warns of it on the full path
    taken = fast_path((2, 1, 1), *later, None, None)
    event(f"taken: {taken}")
    if not taken:
        return
    later_key, later_infos = scale.specialize(scale.bind(*later))
    assert later_key == key
    assert all(info.on_device for info in later_infos.values()) and launch_device(later_infos) == 0
    expected = []
    for entry, (name, value) in zip(later_key, scale.bind(*later).items()):
        if entry[0] == "const":
            continue
        if name in later_infos:
            info = array_info(value)
            expected += [info.ptr, *info.shape, *info.strides]
        else:
            expected.append(scalar_converter(type_of(entry[2]))(value))
    flat = driver.values
    assert len(flat) == len(expected) and all(_same(a, b) for a, b in zip(flat, expected)), (flat, expected)


def test_torch_host_tensors_are_written_in_place_by_the_host_backends(fake_torch):
    class HostTensor(FakeTensor):  # a CPU tensor: NumPy sees its memory through .numpy()
        __module__ = "torch.fake"

        def __init__(self, array):
            super().__init__(array.shape, device=-1, ptr=array.__array_interface__["data"][0])
            self.array = array

        def detach(self):
            return self

        def numpy(self):
            return self.array

    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    scale[1](HostTensor(x), HostTensor(out), 3.0, TILE=8, backend="interpret")
    np.testing.assert_array_equal(out, x * 3)


def test_a_fast_path_declines_a_host_instance_of_a_device_array_type():
    class Either(FakeDeviceArray):  # like jax.Array: host or device instances of one type
        def __init__(self, host=None, **kw):
            super().__init__((8,), **kw)
            self.host = host

        @property
        def __cuda_array_interface__(self):
            if self.host is not None:
                raise AttributeError("on the host")
            return self.interface

        def __array__(self, dtype=None, copy=None):
            return self.host

    fast_path, _ = fast_path_of((Either(), Either(), 2.0), {"TILE": 4})
    host = Either(host=np.zeros(8, np.float32))
    assert not fast_path((1, 1, 1), (host, Either(), 2.0), {"TILE": 4}, None, None)


def test_dlpack_device_arrays_are_read_through_cuda_core():
    from _dlpack import KDL_CUDA, DLPackArray

    from tilelang._runtime import array_info

    info = array_info(DLPackArray((3, 5), (7, 1), ptr=4096, device=(KDL_CUDA, 1)))
    assert (info.on_device, info.device, info.ptr, info.shape, info.strides, info.unit) == (
        True, 1, 4096, (3, 5), (7, 1), True,
    )  # fmt: skip
    assert array_info(DLPackArray((4,), dtype=("bfloat", 16))).dtype is tl.bfloat16
    assert array_info(DLPackArray((4, 2))).strides == (2, 1)  # none given: C order
    assert not array_info(DLPackArray((4,), strides=(3,))).unit
    with pytest.raises(tl.TileArgumentError, match="`x` is in GPU memory"):
        scale[1](DLPackArray((8,)), DLPackArray((8,)), 1.0, TILE=8, backend="cpu")
    with pytest.raises(tl.TileError, match="argument `x`: a DLPack array on device type 10"):
        scale[1](DLPackArray((8,), device=(10, 0)), DLPackArray((8,)), 1.0, TILE=8, backend="cpu")
    fast_path, driver = fast_path_of((DLPackArray((8,)), DLPackArray((8,)), 2.0), {"TILE": 4})
    later = (DLPackArray((5,), ptr=64), DLPackArray((6,), ptr=128), 1.0)
    assert fast_path((1, 1, 1), later, {"TILE": 4}, None, None)
    assert driver.values == (64, 5, 1, 128, 6, 1, 1.0)
    assert not fast_path((1, 1, 1), (DLPackArray((5,), device=(KDL_CUDA, 1)), *later[1:]), {"TILE": 4}, None, None)


def test_host_dlpack_arrays_run_on_the_host_backends():
    from _dlpack import host_dlpack

    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    scale[1](host_dlpack(x), out, 2.0, TILE=8, backend="interpret")
    np.testing.assert_array_equal(out, x * 2)
    with pytest.raises(tl.TileArgumentError, match="`out` is read-only"):  # NumPy's view of a legacy capsule
        scale[1](x, host_dlpack(out), 2.0, TILE=8, backend="interpret")


def test_no_fast_path_where_calls_need_the_full_path():
    device = FakeDeviceArray((8,))
    assert fast_path_of((device, device), {"TILE": 4, "alpha": 2.0})[0] is None  # a runtime argument by keyword

    @tl.tile_kernel
    def with_default(x, out, alpha=2.0, TILE: tl.Constant = 4):
        tl.store(out, tl.load(x, index=(0,), shape=(TILE,)) * alpha, index=(0,))

    from _fake_driver import FakeDriver

    from tilelang._fastpath import generate

    infos = with_default.specialize(with_default.bind((device, device), {}))[1]
    launch = (FakeDriver("QqqQqqf").launcher, lambda device: 0, 0)
    assert generate(with_default, (device, device), {}, None, infos, launch) is None
    assert generate(with_default, (device, device, 1.0), {}, None, infos, launch)


# ------------------------------------------------------------------ disk cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    return tmp_path


def compiled(kernel=scale, **constants):
    """A fresh CudaKernel (nothing cached in this process) for the kernel's thread program."""
    args = ("f32[:]", "f32[:]", "f32")
    known = kernel.compile(kernel.specialize(kernel.bind(args, constants or {"TILE": 256}))[0], "cuda").backend_kernel
    return cuda_backend.CudaKernel(known.program)


def test_a_cache_directory_that_cannot_be_made_only_warns(tmp_path, monkeypatch):
    """A TILELANG_CACHE_DIR that is a file raised FileExistsError from os.makedirs."""
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(blocked))
    cuda_backend._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match="kernels are not cached on disk"):
        code, report, _ = compiled().cubin()
    assert code[:4] == b"\x7fELF" and "registers" in report


def test_cubin_is_cached_and_reloaded(cache):
    first = compiled()
    code, report, entry = first.cubin()
    assert code[:4] == b"\x7fELF" and "registers" in report and entry == first.program.name
    assert cuda_backend.load_cached(first.digest, (9, 0)) == (code, report, entry)


@pytest.mark.parametrize("damage", ["flip", "truncate", "bad-json"])
def test_a_corrupted_entry_is_detected_removed_and_rebuilt(cache, damage):
    kernel = compiled()
    code, _, _ = kernel.cubin()
    code_path, meta_path = cuda_backend._cache_paths(kernel.digest, (9, 0))
    if damage == "flip":
        with open(code_path, "r+b") as f:
            f.seek(100)
            f.write(bytes([code[100] ^ 0xFF]))
    elif damage == "truncate":
        with open(code_path, "r+b") as f:
            f.truncate(10)
    else:
        with open(meta_path, "w") as f:
            f.write("{not json")
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) is None
    assert not os.path.exists(code_path) and not os.path.exists(meta_path)
    rebuilt = cuda_backend.CudaKernel(kernel.program).cubin()  # compiled again, to the same bytes
    assert rebuilt[0] == code
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) == rebuilt


def test_the_key_covers_the_toolchain(cache, monkeypatch):
    kernel = compiled()
    versions = (*cuda_backend.toolchain_versions(), "numba-cuda==99")
    monkeypatch.setattr(cuda_backend, "toolchain_versions", lambda: versions)
    assert cuda_backend.CudaKernel(kernel.program).digest != kernel.digest


def test_the_key_covers_every_file_of_the_code_generator():
    """cuda.py (NVVM's options, the PTX it rewrites) was not hashed: a changed option loaded
    the cubin built before it. Every backend module the CUDA kernel's code comes from is."""
    here = os.path.dirname(cuda_backend.__file__)
    sources = {"cuda.py"}
    for name in list(sources) + ["cuda_emit.py", "llvm_emit.py"]:
        text = open(os.path.join(here, name)).read()
        imported = re.findall(r"^from \.(\w+) import|^from \. import (\w+)", text, re.M)
        sources |= {f"{name}.py" for pair in imported for name in pair if name}
    sources.discard("cuda_driver.py")  # (launches: no code)
    assert sources <= set(cuda_backend.GENERATOR), sources - set(cuda_backend.GENERATOR)
    assert any(line.startswith("cuda.py ") for line in cuda_backend.toolchain_versions())


def test_concurrent_writers_leave_a_valid_entry(cache):
    kernel = compiled()
    code, report, entry = kernel.cubin()
    errors = []

    def write():
        try:
            for _ in range(20):
                cuda_backend.store_cached(kernel.digest, (9, 0), code, report, entry)
                loaded = cuda_backend.load_cached(kernel.digest, (9, 0))
                assert loaded is None or loaded == (code, report, entry)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) == (code, report, entry)


SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_runtime import compiled
    from tilelang._backends import cuda
    calls, nvvm = [], cuda.compile_ir
    cuda.compile_ir = lambda *args: calls.append(args) or nvvm(*args)
    start = time.perf_counter()
    kernel = compiled(TILE=512)
    kernel.cubin()
    print(time.perf_counter() - start, bool(calls))
    """
)


def test_a_second_process_loads_the_cubin_without_nvvm(cache):
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    script = SCRIPT.format(tests=os.path.dirname(__file__))
    cold = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.split()[1] == "True"  # the first process compiled with NVVM
    command = [sys.executable, "-c", script]
    warm = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for process in warm:  # two processes at once, both reading the cache
        out, _ = process.communicate()
        assert process.returncode == 0
        assert out.split()[1] == "False", "a cached kernel must load without NVVM"


def test_gpu_count_agrees_with_numba():
    """tilelang asks the driver directly (fast); numba's view must be the same."""
    from numba import cuda

    from tilelang._runtime import gpu_count

    assert gpu_count() == (len(cuda.gpus) if cuda.is_available() else 0)


def test_describe_lists_what_each_fast_path_takes(fake_torch):
    from _fake_driver import FakeDriver

    from tilelang._fastpath import describe, generate, remember

    @tl.tile_kernel
    def scaled(x, out, alpha, TILE: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(TILE,)) * alpha, index=(0,))

    args = (FakeTensor((8,)), FakeNumbaArray((2, 4), strides=(9, 2)), 2**40)
    infos = scaled.specialize(scaled.bind(args, {"TILE": 4}))[1]
    launch = (FakeDriver("QqqQqqqqq").launcher, lambda device: 0, 0)
    remember(scaled, generate(scaled, args, {"TILE": 4}, None, infos, launch))
    lines = describe(scaled).splitlines()
    assert lines[0] == "fast path on cuda:0:"
    assert lines[1].startswith("  x: FakeTensor of ") and lines[1].endswith("rank 1, unit last-axis stride")
    assert lines[2:] == [
        "  out: FakeNumbaArray of float32, rank 2, any last-axis stride",
        "  alpha: int, int64 by magnitude",
        "  TILE=: Constant 4",
    ]


def test_a_numba_arrays_gpu_is_asked_of_the_driver_once_per_memory(monkeypatch):
    from tilelang import _runtime
    from tilelang._runtime import array_info

    asked = []
    monkeypatch.setattr(_runtime, "_pointer_device", lambda ptr: asked.append(ptr) or 1)

    class Memory:  # numba's MemoryPointer: its device_pointer never changes
        def __init__(self, ptr):
            self.device_pointer = FakeNumbaArray.Pointer(ptr)

    x = FakeNumbaArray((8,), ptr=4096)
    x.gpu_data = Memory(4096)
    assert [array_info(x).device for _ in range(3)] == [1, 1, 1] and asked == [4096]
    x.gpu_data = Memory(8192)  # another allocation: asked again
    assert array_info(x).device == 1 and asked == [4096, 8192]
    assert array_info(FakeNumbaArray((8,), ptr=64)).device == 1  # memory that cannot be remembered: asked each time


@tl.tile_kernel
def _row_sums(x, out, BLK: tl.Constant):
    i = tl.block_id(0)
    acc = tl.zeros((1, BLK), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BLK)):
        acc = acc + tl.load(x, index=(i, k), shape=(1, BLK))
    tl.store(out, tl.sum(acc, axis=1), index=(i,))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_launches_of_one_kernel_from_several_threads(backend):
    """The interpreter kept a launch's values on the compiled kernel: launches from four
    threads at once read each other's (wrong rows, or a KeyError)."""
    _row_sums[1](np.ones((1, 1), np.float32), np.zeros(1, np.float32), BLK=16, backend=backend)  # compiled first
    wrong = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(4):
            m, n = int(rng.integers(20, 60)), int(rng.integers(20, 100))
            x = rng.integers(-3, 4, (m, n)).astype(np.float32)
            out = np.zeros(m, np.float32)
            _row_sums[m](x, out, BLK=16, backend=backend)
            wrong.extend([seed] if not np.array_equal(out, x.sum(1)) else [])

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


THREADS_COMPILING = textwrap.dedent(
    """
    import threading
    import numpy as np
    import tilelang as tl

    @tl.tile_kernel(backend="cpu", num_threads=32)
    def shifted(x, out, C: tl.Constant):
        tl.store(out, tl.exp(tl.load(x, index=(0,), shape=(64,))) + C, index=(0,))

    errors = []

    def work(t):
        try:
            for j in range(6):
                x, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
                shifted[1](x, out, C=float(100 * t + j))
                assert np.all(out == 1 + 100 * t + j), (t, j, out[:3])
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("errors", errors)
    """
)


def test_threads_compiling_cpu_kernels_at_once_share_one_jit(cache):
    """Eight threads of a fresh process compile and run CPU kernels at the same time: one MCJIT
    engine is made (two would leave dangling code: aborts and segfaults), LLVM's context used
    by one thread at a time."""
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    command = [sys.executable, "-c", THREADS_COMPILING]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "errors []", done.stderr[-2000:]


def test_a_collected_cpu_kernel_leaves_the_jit_engine():
    """The one MCJIT engine keeps each module it is given until it is taken out: a CPU
    kernel's is, at the next compile after the kernel is collected."""
    import gc

    from tilelang._backends import cpu, host_llvm

    x = np.zeros(4, np.uint8)
    key, _ = add_to_bytes.specialize(add_to_bytes.bind((x, x, 3), {}))
    program = add_to_bytes.compile(key, "cpu").backend_kernel.program

    def compiled():
        kernel = cpu.CpuKernel(program)
        kernel.function()
        return kernel

    gc.collect()  # (kernels earlier tests left for the collector: the next compile takes theirs out)
    kernel = compiled()
    assert not host_llvm._RELEASED
    del kernel
    gc.collect()
    assert len(host_llvm._RELEASED) == 1
    kept = compiled()  # (its compile takes the first one out)
    assert not host_llvm._RELEASED and kept.function()


@tl.tile_kernel
def add_to_bytes(x, out, n):
    tl.store(out, tl.load(x, index=(0,), shape=(4,)) + n, index=(0,))


def test_a_fast_path_checks_the_bounds_of_a_narrowed_runtime_int():
    """`u8_tile + n` checks n at each launch (runtime_checks.narrowing_checks): the fast path
    takes the calls whose n fits uint8 and leaves the others to the full path, which refuses them."""
    from _fake_driver import FakeDriver

    from tilelang._fastpath import describe, generate

    x, out = FakeDeviceArray((4,), np.uint8), FakeDeviceArray((4,), np.uint8)
    arguments = add_to_bytes.bind((x, out, 3), {})
    key, infos = add_to_bytes.specialize(arguments)
    bounds = add_to_bytes.compile(key, "interpret").run.bounds()
    assert bounds == {"n": (0, 255)}
    driver = FakeDriver("QqqQqqi")
    fast_path = generate(add_to_bytes, (x, out, 3), {}, None, infos, (driver.launcher, lambda device: 7, 0, bounds))
    add_to_bytes._fast_paths.insert(0, fast_path)
    try:
        assert "n: int, int32 by magnitude, in [0, 255]" in describe(add_to_bytes)
    finally:
        add_to_bytes._fast_paths.remove(fast_path)
    taken = [fast_path((1, 1, 1), (x, out, n), {}, None, None) for n in (0, 255, 256, -1, 2**40)]
    assert taken == [True, True, False, False, False]
    assert [flat[-1] for _, _, flat, _ in driver.launches] == [0, 255]


def test_only_narrowing_checks_keep_a_fast_path():
    from tilelang._passes.runtime_checks import Checked

    inner = types.SimpleNamespace(fast_launch=lambda arguments, infos: ("launcher", "stream", 0))
    narrowed = [("n", tl.uint8, None), ("n", tl.int8, None)]
    assert Checked(inner, [], None, narrowed).fast_launch({}, {}) == ("launcher", "stream", 0, {"n": (0, 127)})
    assert Checked(inner, [("step", [], None)], None, narrowed).fast_launch({}, {}) is None  # a zero-step check
    assert Checked(inner, [], [], narrowed).fast_launch({}, {}) is None  # debug mode
