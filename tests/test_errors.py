"""Errors point at the user's code: ``file:line:col``, the source line and a caret under the
expression, no tilelang-internal file names, and a short traceback (tests/_errors.py).

Every case launches (or explains) a kernel written in this file and checks the error's
class, its message and that its location is the expression the user wrote: shapes and
dtypes, arguments, Python values needed, outside a kernel, small refusals. Python's
control flow, tl.range loops, NumPy and builtins: test_errors_python.py.
"""

import re

import numpy as np
import pytest
from _errors import OUT, PACKAGE_DIR, X, backends, check, launch_error

import tilelang as tl


@pytest.fixture(params=backends())
def backend(request):
    """For errors (and non-errors) that happen when the kernel runs, not when it is traced."""
    return request.param


def test_error_classes():
    for cls in (tl.TileTypeError, tl.TileShapeError, tl.TileValueError, tl.TileSyntaxError, tl.TileArgumentError,
                tl.TileOutsideKernelError, tl.TileCompilerError):  # fmt: skip
        assert issubclass(cls, tl.TileError) and issubclass(cls, Exception)
    assert str(tl.TileError("plain")) == "TileError: plain"


# ------------------------------------------------------------------ shapes and dtypes


@tl.tile_kernel
def broadcast_mismatch(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    b = tl.load(x, index=(0,), shape=(64,))
    tl.store(out, a + b, index=(0,))


def test_shape_mismatch():
    err = launch_error(tl.TileShapeError, lambda: broadcast_mismatch[1](X, OUT))
    check(err, tl.TileShapeError, r"cannot broadcast shapes \[128\] with \[64\]", expr="a + b")


@tl.tile_kernel
def float_and(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a & a, index=(0,))


@tl.tile_kernel
def float_shift(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a << 1, index=(0,))


@tl.tile_kernel
def float_invert(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, ~a, index=(0,))


@tl.tile_kernel
def bool_dot(x, out):
    a = tl.load(x, index=(0, 0), shape=(16, 16))
    tl.store(out, tl.dot(a, a), index=(0, 0))


@tl.tile_kernel
def bool_neg(x, out):
    a = tl.load(x, index=(0, 0), shape=(16, 16))
    tl.store(out, -a, index=(0, 0))


@tl.tile_kernel
def float_histogram(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.histogram(a, 128).astype(tl.float32), index=(0,))


@tl.tile_kernel
def exp2_flush_by_number(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.exp2(a, flush_to_zero=1), index=(0,))


@pytest.mark.parametrize(
    "kernel, x, match, expr",
    [
        (float_and, X, r"and is not defined for float32", "a & a"),
        (float_shift, X, r"shl is not defined for float32", "a << 1"),
        (float_invert, X, r"invert is not defined for float32", "~a"),
        (bool_dot, np.zeros((16, 16), bool), r"dot is not defined for bool", "tl.dot(a, a)"),
        (bool_neg, np.zeros((16, 16), bool), r"unary - is not defined for bool", "-a"),
        (float_histogram, X, r"histogram: values must be an integer tile", "tl.histogram(a, 128)"),
        (exp2_flush_by_number, X, r"flush_to_zero must be True or False, got int", "tl.exp2(a, flush_to_zero=1)"),
    ],
    ids=["float&float", "float<<int", "~float", "dot(bool)", "-bool", "histogram(float)", "exp2(flush_to_zero=1)"],
)
def test_dtype_not_allowed(kernel, x, match, expr):
    err = launch_error(tl.TileTypeError, lambda: kernel[1](x, x.copy()))
    check(err, tl.TileTypeError, match, expr=expr)


@tl.tile_kernel
def wrong_calls(x, out, call: tl.Constant):
    a = tl.load(x, index=(0,), shape=(128,))
    if call == "sqrt":
        a = tl.sqrt(a, a)
    elif call == "maximum":
        a = tl.maximum(a)
    elif call == "load":
        a = tl.load(x, idx=(0,), shape=(128,))
    else:
        a = a.astype()
    tl.store(out, a, index=(0,))


@pytest.mark.parametrize("call, match, expr", [
    ("sqrt", r"tl.sqrt\(x\): too many positional arguments", "tl.sqrt(a, a)"),
    ("maximum", r"tl.maximum\(x, y\): missing a required argument: 'y'", "tl.maximum(a)"),
    ("load", r"tl.load\(array, index=None, .*\): got an unexpected keyword argument 'idx'",
     "tl.load(x, idx=(0,), shape=(128,))"),
    ("astype", r"tl.astype\(x, dtype\): missing a required argument: 'dtype'", "a.astype()"),
])  # fmt: skip
def test_a_call_the_signature_does_not_take(call, match, expr):
    """Python's TypeError, naming `_math.<locals>.fn()` for tl.sqrt."""
    err = launch_error(tl.TileTypeError, lambda: wrong_calls[1](X, OUT, call=call))
    check(err, tl.TileTypeError, match, expr=expr)


@tl.tile_kernel
def store_wrong_dtype(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a.astype(tl.int32), index=(0,))


def test_store_wrong_dtype():
    err = launch_error(tl.TileTypeError, lambda: store_wrong_dtype[1](X, OUT))
    check(err, tl.TileTypeError, r"int32 but the array holds float32.*astype\(tl.float32\)", line_contains="tl.store")


@tl.tile_kernel
def int_too_big(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a + 1000, index=(0,))


def test_python_int_does_not_fit():
    x = np.zeros(128, np.int8)
    err = launch_error(tl.TileTypeError, lambda: int_too_big[1](x, x.copy()))
    check(err, tl.TileTypeError, r"Python int 1000 does not fit in int8", expr="a + 1000")


@tl.tile_kernel
def bad_axis(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.sum(a, axis=1, keepdims=True), index=(0,))


def test_axis_out_of_range():
    err = launch_error(tl.TileValueError, lambda: bad_axis[1](X, OUT))
    check(err, tl.TileValueError, r"axis 1 is out of range for a 1-d tile", expr="tl.sum(a, axis=1, keepdims=True)")


@tl.tile_kernel
def accumulate_into_a_0d_array(x, total):
    tl.atomic_add(total, values=tl.sum(tl.load(x, index=(0,), shape=(128,))))


def test_indexed_access_to_a_0d_array():
    """IndexError from the IR's type rule, in no user's line."""
    err = launch_error(tl.TileShapeError, lambda: accumulate_into_a_0d_array[1](X, np.zeros((), np.float32)))
    check(err, tl.TileShapeError, r"atomic_add of a 0-d array: pass it as a 1-element array",
          expr="tl.atomic_add(total, values=tl.sum(tl.load(x, index=(0,), shape=(128,))))")  # fmt: skip


# ---------------------------------------------------------------------- arguments


def _plain(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(128,)), index=(0,))


def test_numpy_ints_are_options_too():
    """`num_threads=np.int64(128)` (a value from a NumPy array) was refused after the check became strict."""
    assert tl.tile_kernel(_plain, num_threads=np.int64(128)).num_threads == 128
    assert tl.Config(num_threads=np.int32(64), num_stages=np.int64(2)).num_threads == 64
    with pytest.raises(tl.TileArgumentError, match="decorates a function; <staticmethod"):
        tl.tile_kernel(staticmethod(_plain))


@pytest.mark.parametrize("make, match, expr", [
    (lambda: tl.tile_kernel(num_threads=48), r"num_threads must be a power of two .* got 48",
     "tl.tile_kernel(num_threads=48)"),
    (lambda: tl.tile_kernel(num_threads="128"), r"got '128'", "tl.tile_kernel(num_threads=\"128\")"),
    (lambda: tl.Config(T=256, num_threads=48), r"got 48", "tl.Config(T=256, num_threads=48)"),
    (lambda: tl.Config(num_stages=0), r"num_stages must be an int from 1 to 8, got 0", "tl.Config(num_stages=0)"),
    (lambda: tl.tile_kernel("interpret"), r"decorates a function; 'interpret' is a str",
     "tl.tile_kernel(\"interpret\")"),
    (lambda: tl.tile_kernel(tl.tile_kernel(_plain)), r"is a tile kernel already",
     "tl.tile_kernel(tl.tile_kernel(_plain))"),
])  # fmt: skip
def test_bad_kernel_options(make, match, expr):
    """An autotuner's Config(num_threads=48) built a 48-thread kernel (the CPU backend's sum
    was wrong); a string raised AttributeError or TypeError from inside tilelang."""
    err = launch_error(tl.TileArgumentError, make)
    check(err, tl.TileArgumentError, match, expr=expr)


@tl.tile_kernel
def copy(x, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)), index=(i,))


def test_too_few_arguments():
    err = launch_error(tl.TileArgumentError, lambda: copy[1](X, TILE=128))
    check(err, tl.TileArgumentError, r"copy\(\): missing a required argument: 'out'", expr="copy[1](X, TILE=128)")


def test_too_many_arguments():
    err = launch_error(tl.TileArgumentError, lambda: copy[1](X, OUT, 128, 5))
    check(err, tl.TileArgumentError, r"too many positional arguments", expr="copy[1](X, OUT, 128, 5)")


def test_unknown_keyword_argument():
    err = launch_error(tl.TileArgumentError, lambda: copy[1](X, OUT, TILE=128, BLOCK=4))
    check(err, tl.TileArgumentError, r"unexpected keyword argument 'BLOCK'", line_contains="BLOCK=4")


@pytest.mark.parametrize(
    "value, match",
    [
        ([1.0, 2.0], r"argument `x`: expected an array or a scalar, got list"),
        ({"a": 1}, r"argument `x`: expected an array or a scalar, got dict"),
        (None, r"argument `x`: expected an array or a scalar, got NoneType"),
        ("abc", r"argument `x`: a launch takes arrays and scalars, got 'abc'"),
    ],
    ids=["list", "dict", "None", "str"],
)
def test_wrong_kind_of_argument(value, match):
    err = launch_error(tl.TileArgumentError, lambda: copy[1](value, OUT, TILE=128))
    check(err, tl.TileArgumentError, match, expr="copy[1](value, OUT, TILE=128)")


def test_unsupported_array_dtype():
    z = np.zeros(4, np.complex64)
    err = launch_error(tl.TileTypeError, lambda: copy[1](z, z, TILE=4))
    check(err, tl.TileTypeError, r"argument `x`: .*complex64.* is not a supported dtype", expr="copy[1](z, z, TILE=4)")


def test_an_array_whose_strides_are_not_whole_elements(backend):
    """The CPU backend floored them (-5 bytes: -2 float32s) and wrote outside the array."""
    z = np.lib.stride_tricks.as_strided(np.zeros(64, np.uint8)[40:].view(np.float32), (4,), (-5,), writeable=True)
    err = launch_error(tl.TileTypeError, lambda: copy[1](z, z, TILE=4, backend=backend))
    match = r"argument `x`: an array with strides of \(-5,\) bytes, not whole 4-byte elements"
    check(err, tl.TileTypeError, match, expr="copy[1](z, z, TILE=4, backend=backend)")


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">u2"])
def test_array_in_the_other_byte_order(dtype):
    """Such an array's elements were read and written as raw bytes (big-endian 1.0 read as 4.6e-41)."""
    z = np.zeros(4, dtype)
    err = launch_error(tl.TileTypeError, lambda: copy[1](z, z, TILE=4))
    match = r"argument `x`: an array of \w+ in big-endian byte order"
    check(err, tl.TileTypeError, match, expr="copy[1](z, z, TILE=4)")


def test_array_for_a_constant():
    err = launch_error(tl.TileArgumentError, lambda: copy[1](X, OUT, TILE=X))
    check(err, tl.TileArgumentError, r"`TILE` is a tl.Constant; pass a Python value", expr="copy[1](X, OUT, TILE=X)")


@pytest.mark.parametrize("grid", [(1, 2, 3, 4), "a", -1, (1.5,), ()])
def test_bad_grid(grid):
    err = launch_error(tl.TileArgumentError, lambda: copy[grid](X, OUT, TILE=128))
    check(err, tl.TileArgumentError, r"grid", expr="copy[grid](X, OUT, TILE=128)")


def test_kernel_called_without_grid():
    with pytest.raises(tl.TileArgumentError) as info:
        copy(X, OUT, TILE=128)
    check(
        info.value, tl.TileArgumentError, r"launched over a grid of blocks: copy\[grid\]", expr="copy(X, OUT, TILE=128)"
    )


def test_explain_errors_point_at_the_caller():
    with pytest.raises(tl.TileArgumentError) as info:
        tl.explain(copy, "f32[:]", TILE=4)
    check(info.value, tl.TileArgumentError, r"missing a required argument", expr='tl.explain(copy, "f32[:]", TILE=4)')
    with pytest.raises(tl.TileArgumentError) as info:
        tl.explain(copy, "f99[:]", "f32[:]", TILE=4)
    check(info.value, tl.TileArgumentError, r"cannot read 'f99\[:\]' as a signature", line_contains="f99")
    with pytest.raises(tl.TileShapeError) as info:
        tl.explain(broadcast_mismatch, "f32[:]", "f32[:]")
    check(info.value, tl.TileShapeError, r"cannot broadcast", expr="a + b")


# ------------------------------------------------------------- Python values needed


@tl.tile_kernel
def runtime_shape(x, out, n):
    a = tl.load(x, index=(0,), shape=(n,))
    tl.store(out, a, index=(0,))


@tl.tile_kernel
def runtime_zeros(x, out, n):
    tl.store(out, tl.zeros((n,)), index=(0,))


@tl.tile_kernel
def runtime_int(x, out, n):
    tl.store(out, tl.zeros((int(n),)), index=(0,))


def test_non_constant_shape():
    err = launch_error(tl.TileValueError, lambda: runtime_shape[1](X, OUT, 128))
    check(err, tl.TileValueError, r"load shape must be a compile-time constant.*tl.Constant",
          expr="tl.load(x, index=(0,), shape=(n,))")  # fmt: skip
    err = launch_error(tl.TileValueError, lambda: runtime_zeros[1](X, OUT, 128))
    check(err, tl.TileValueError, r"shape must be a compile-time constant", expr="tl.zeros((n,))")
    err = launch_error(tl.TileValueError, lambda: runtime_int[1](X, OUT, 128))
    check(err, tl.TileValueError, r"traced value is used where a Python value is needed", expr="int(n)")


@tl.tile_kernel
def python_range(x, out, n):
    a = tl.load(x, index=(0,), shape=(128,))
    for _ in range(n):
        a = a + 1.0
    tl.store(out, a, index=(0,))


def test_python_range_with_runtime_bound():
    err = launch_error(tl.TileValueError, lambda: python_range[1](X, OUT, 3))
    check(err, tl.TileValueError, r"use tl.range for a runtime loop", expr="range(n)")


# -------------------------------------------------------------------- outside a kernel


@pytest.mark.parametrize(
    "call",
    [
        lambda: tl.zeros((4,)),
        lambda: tl.arange(0, 4),
        lambda: tl.block_id(0),
        lambda: tl.range(4),
        lambda: tl.load(X, index=(0,), shape=(4,)),
        lambda: tl.store(OUT, X, index=(0,)),
        lambda: tl.exp(X),
        lambda: tl.sum(X),
        lambda: tl.exp(1.0),
    ],
    ids=["zeros", "arange", "block_id", "range", "load", "store", "exp(array)", "sum(array)", "exp(float)"],
)
def test_op_outside_a_kernel(call):
    with pytest.raises(tl.TileOutsideKernelError) as info:
        call()
    err = check(info.value, tl.TileOutsideKernelError, r"can only be called while a kernel is traced; did you forget "
                r"@tl\.tile_kernel\?", line_contains="lambda: tl.")  # fmt: skip
    assert err.message.startswith(("tl.", "tile operations"))


# ------------------------------------------------------------------ small refusals


@tl.tile_kernel
def astype_complex(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a.astype("complex64").astype(tl.float32), index=(0,))


@tl.tile_kernel
def zeros_complex(x, out):
    tl.store(out, tl.zeros((128,), "complex64").astype(tl.float32), index=(0,))


@tl.tile_kernel
def sum_complex(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(128,)) + tl.sum(tl.zeros((4,)), dtype=np.complex128), index=(0,))


@tl.tile_kernel
def astype_none(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a.astype(None).astype(tl.float32), index=(0,))


@tl.tile_kernel
def sum_to_a_tile_dtype(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a + tl.sum(a, dtype=a), index=(0,))


@tl.tile_kernel
def permute_by_an_int(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.permute(a, 0), index=(0,))


@tl.tile_kernel
def broadcast_to_none(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.broadcast_to(a, None), index=(0,))


@pytest.mark.parametrize(
    "kernel, match, expr",
    [
        (sum_to_a_tile_dtype, r"Tile\(f32\[128\]\) is not a supported dtype", "tl.sum(a, dtype=a)"),
        (permute_by_an_int, r"permute: axes must be a tuple of ints, got int", "tl.permute(a, 0)"),
        (broadcast_to_none, r"broadcast_to shape must be a tuple of ints, got NoneType", "tl.broadcast_to(a, None)"),
    ],
    ids=["sum(dtype=tile)", "permute(int)", "broadcast_to(None)"],
)
def test_arguments_of_the_wrong_type(kernel, match, expr):
    """They raised Python's own ValueError and TypeError from inside tilelang."""
    err = launch_error(tl.TileTypeError, lambda: kernel[1](X, OUT))
    check(err, tl.TileTypeError, match, expr=expr)


@pytest.mark.parametrize(
    "kernel, match, expr",
    [
        (astype_complex, r"'complex64' is not a supported dtype", 'a.astype("complex64")'),
        (zeros_complex, r"'complex64' is not a supported dtype", 'tl.zeros((128,), "complex64")'),
        (sum_complex, r"complex128.* is not a supported dtype", "tl.sum(tl.zeros((4,)), dtype=np.complex128)"),
        (astype_none, r"None is not a dtype; name one, e.g\. tl\.float32", "a.astype(None)"),
    ],
    ids=["astype", "zeros", "sum", "astype(None)"],
)
def test_unsupported_dtype_in_a_kernel(kernel, match, expr):
    err = launch_error(tl.TileTypeError, lambda: kernel[1](X, OUT))
    check(err, tl.TileTypeError, match, expr=expr)


@tl.tile_kernel
def reshape_two_wildcards(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a.reshape((-1, -1)).reshape(128), index=(0,))


def test_reshape_with_two_wildcards():
    err = launch_error(tl.TileValueError, lambda: reshape_two_wildcards[1](X, OUT))
    check(err, tl.TileValueError, r"reshape: only one -1 is allowed, got \[-1, -1\]", expr="a.reshape((-1, -1))")


@tl.tile_kernel
def yields(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    yield a


def test_yield_in_a_kernel():
    err = launch_error(tl.TileSyntaxError, lambda: yields[1](X, OUT))
    check(err, tl.TileSyntaxError, r"`yield` in tile kernel yields: a kernel is not a generator; it writes results "
          r"with tl\.store", expr="yield a")  # fmt: skip


@tl.tile_kernel
def if_on_array(x, out):
    if x:
        tl.store(out, tl.zeros((128,)), index=(0,))


@tl.tile_kernel
def len_of_array(x, out):
    tl.store(out, tl.zeros((128,)) + len(x), index=(0,))


@tl.tile_kernel
def bool_index(x, out):
    tl.store(out, tl.load(x, index=(True,), shape=(128,)), index=(0,))


def test_arrays_have_no_truth_value_or_len():
    err = launch_error(tl.TileSyntaxError, lambda: if_on_array[1](X, OUT))
    check(err, tl.TileSyntaxError, r"an array argument has no truth value", line_contains="if x:")
    err = launch_error(tl.TileTypeError, lambda: len_of_array[1](X, OUT))
    check(err, tl.TileTypeError, r"len\(\) of an array argument.*x\.shape\[0\]", expr="len(x)")


def test_a_bool_is_not_a_coordinate():
    err = launch_error(tl.TileTypeError, lambda: bool_index[1](X, OUT))
    check(err, tl.TileTypeError, r"load: a bool is not a coordinate", expr="tl.load(x, index=(True,), shape=(128,))")


def test_tl_range_in_a_kernel_without_source():
    source = (
        "import tilelang as tl\n"
        "@tl.tile_kernel\n"
        "def no_source(x, out, n):\n"
        "    for _ in tl.range(n):\n"
        "        tl.store(out, tl.zeros((128,)), index=(0,))\n"
    )
    namespace = {}
    exec(compile(source, "<stdin>", "exec"), namespace)  # as `python -` defines it: no file to read the loop from
    err = launch_error(tl.TileSyntaxError, lambda: namespace["no_source"][1](X, OUT, 3))
    assert re.search(r"the source of this kernel cannot be read .*kernels with tl\.range loops must be defined in a "
                     r"file or a notebook cell", err.message), err.message  # fmt: skip
    assert str(err).startswith("<stdin>:4:") and PACKAGE_DIR not in str(err), str(err)
