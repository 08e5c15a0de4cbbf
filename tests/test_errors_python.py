"""Errors point at the user's code (tests/_errors.py), for what Python itself does in a
kernel: control flow on tiles, tl.range loops, NumPy functions and Python builtins.
"""

import numpy as np
import pytest
from _errors import OUT, X, backends, check, launch_error

import tilelang as tl


@pytest.fixture(params=backends())
def backend(request):
    """For errors (and non-errors) that happen when the kernel runs, not when it is traced."""
    return request.param


# ------------------------------------------------------------------- control flow


@tl.tile_kernel
def if_on_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    if a > 0:
        a = a * 2.0
    tl.store(out, a, index=(0,))


@tl.tile_kernel
def while_on_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    while a:
        a = a - 1.0
    tl.store(out, a, index=(0,))


@tl.tile_kernel
def and_on_tiles(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.where((a > 0) and (a < 1), a, 0.0), index=(0,))


@tl.tile_kernel
def not_on_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.where(not (a > 0), a, 0.0), index=(0,))


@pytest.mark.parametrize(
    "kernel, expr",
    [(if_on_tile, "a > 0"), (while_on_tile, None), (and_on_tiles, "(a > 0) and (a < 1)"), (not_on_tile, None)],
    ids=["if", "while", "and", "not"],
)
def test_truth_value_of_a_tile(kernel, expr):
    err = launch_error(tl.TileSyntaxError, lambda: kernel[1](X, OUT))
    check(err, tl.TileSyntaxError, r"no Python truth value.*tl\.where\(cond, a, b\)", expr=expr)


@tl.tile_kernel
def iterate_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    for v in a:
        tl.store(out, v, index=(0,))


def test_iterating_over_a_tile():
    err = launch_error(tl.TileSyntaxError, lambda: iterate_tile[1](X, OUT))
    check(err, tl.TileSyntaxError, r"cannot iterate over a tile; use tl.range", line_contains="for v in a:")


@tl.tile_kernel
def index_array(x, out):
    tl.store(out, x[0], index=(0,))


@tl.tile_kernel
def assign_array(x, out):
    out[0] = tl.load(x, index=(0,), shape=(128,))


def test_indexing_an_array_directly():
    err = launch_error(tl.TileSyntaxError, lambda: index_array[1](X, OUT))
    check(err, tl.TileSyntaxError, r"arrays are not indexed directly.*tl.load", expr="x[0]")
    err = launch_error(tl.TileSyntaxError, lambda: assign_array[1](X, OUT))
    check(err, tl.TileSyntaxError, r"arrays are not assigned directly.*tl.store", line_contains="out[0] =")


@tl.tile_kernel
def index_tile_empty(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a[3:3], index=(0,))


@tl.tile_kernel
def index_tile_runtime(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a[tl.block_id(0)] + a, index=(0,))


@tl.tile_kernel
def assign_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    a[0] = 1.0
    tl.store(out, a, index=(0,))


@pytest.mark.parametrize(
    "kernel, expr, error, message",
    [
        (index_tile_runtime, "a[tl.block_id(0)]", tl.TileSyntaxError, r"must be a Python int \(static\).*tl\.where"),
        (index_tile_empty, "a[3:3]", tl.TileShapeError, r"the slice 3:3 of an axis of 128 is empty"),
    ],
    ids=["runtime", "empty"],
)
def test_indexing_a_tile(kernel, expr, error, message):
    err = launch_error(error, lambda: kernel[1](X, OUT))
    check(err, error, message, expr=expr)


def test_assigning_into_a_tile():
    err = launch_error(tl.TileSyntaxError, lambda: assign_tile[1](X, OUT))
    check(err, tl.TileSyntaxError, r"tiles are immutable.*tl.where", line_contains="a[0] = 1.0")


@tl.tile_kernel
def returns_value(x, out):
    return tl.load(x, index=(0,), shape=(128,))


def test_kernel_returning_a_value():
    err = launch_error(tl.TileSyntaxError, lambda: returns_value[1](X, OUT))
    check(err, tl.TileSyntaxError, r"returned a value; kernels write results with tl.store",
          expr="returns_value[1](X, OUT)")  # fmt: skip


# ---------------------------------------------------------------------- tl.range loops


@tl.tile_kernel
def break_in_loop(x, out, n):
    acc = tl.zeros((128,), tl.float32)
    for _ in tl.range(n):
        acc += 1.0
        break
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def continue_in_loop(x, out, n):
    acc = tl.zeros((128,), tl.float32)
    for _ in tl.range(n):
        continue
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def return_in_loop(x, out, n):
    acc = tl.zeros((128,), tl.float32)
    for _ in tl.range(n):
        return acc


@pytest.mark.parametrize(
    "kernel, expr", [(break_in_loop, "break"), (continue_in_loop, "continue"), (return_in_loop, "return acc")]
)
def test_unsupported_statement_in_loop(kernel, expr):
    err = launch_error(tl.TileSyntaxError, lambda: kernel[1](X, OUT, 3))
    word = expr.split()[0]
    check(err, tl.TileSyntaxError, f"`{word}` inside a tl.range loop cannot be traced", expr=expr)


@tl.tile_kernel
def break_in_inner_python_loop(x, out, n):
    acc = tl.zeros((128,), tl.float32)
    for _ in tl.range(n):
        for j in range(10):
            if j == 2:
                break
            acc += 1.0
    tl.store(out, acc, index=(0,))


def test_break_of_an_inner_python_loop_is_fine(backend):
    out = np.zeros(128, np.float32)
    break_in_inner_python_loop[1](X, out, 3, backend=backend)
    np.testing.assert_array_equal(out, 6.0)


@tl.tile_kernel
def tuple_target(x, out, n):
    for _a, _b in tl.range(n):
        pass


@tl.tile_kernel
def range_in_list(x, out, n):
    for _k in list(tl.range(n)):
        pass


@tl.tile_kernel
def float_range_bound(x, out, n):
    for _ in tl.range(0.5, n):
        pass


def test_bad_tl_range_use():
    err = launch_error(tl.TileSyntaxError, lambda: tuple_target[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"target of a tl.range loop must be a single name", line_contains="for _a, _b in")
    err = launch_error(tl.TileSyntaxError, lambda: range_in_list[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"tl.range can only be the iterable of a `for` statement", expr="list(tl.range(n))")
    err = launch_error(tl.TileTypeError, lambda: float_range_bound[1](X, OUT, 3))
    check(err, tl.TileTypeError, r"tl.range bounds must be integer scalars, got f32", expr="tl.range(0.5, n)")


@tl.tile_kernel
def zero_step(x, out, step):
    for _ in tl.range(0, 4, step):
        tl.store(out, tl.zeros((128,)), index=(0,))


def loop_in_helper(n):
    acc = tl.zeros((128,))
    for _ in tl.range(n):
        acc += 1.0
    return acc


@tl.tile_kernel
def calls_loop_helper(x, out, n):
    tl.store(out, loop_in_helper(n), index=(0,))


def test_zero_step_at_run_time(backend):
    err = launch_error(tl.TileValueError, lambda: zero_step[1](X, OUT, 0, backend=backend))
    check(err, tl.TileValueError, r"tl.range: step must not be zero", expr="tl.range(0, 4, step)")


@tl.tile_kernel
def add_and_shift_bytes(x, n, s, total, shifted):
    t = tl.load(x, index=(0,), shape=(4,))
    tl.store(total, t + n, index=(0,))
    tl.store(shifted, t >> s, index=(0,))


def test_a_runtime_python_int_must_fit_the_dtype_it_meets(backend):
    """As a literal must: `u8 + 1000` wrapped to 237 and `u8 >> 256` shifted by 0 (the count wrapped)."""
    x, total, shifted = np.full(4, 5, np.uint8), np.zeros(4, np.uint8), np.zeros(4, np.uint8)
    add_and_shift_bytes[1](x, 250, 2, total, shifted, backend=backend)
    assert (total == 255).all() and (shifted == 1).all()
    for n, s, expr in ((1000, 1, "t + n"), (-1, 1, "t + n"), (3, 256, "t >> s")):
        launch = lambda n=n, s=s: add_and_shift_bytes[1](x, n, s, total, shifted, backend=backend)  # noqa: E731
        err = launch_error(tl.TileTypeError, launch)
        bad, name = (n, "n") if expr == "t + n" else (s, "s")
        check(err, tl.TileTypeError, rf"Python int {bad} \(argument `{name}`\) does not fit in uint8", expr=expr)


@tl.tile_kernel
def add_a_strong_int(x, n, total):
    tl.store(total, tl.load(x, index=(0,), shape=(4,)) + tl.astype(tl.astype(n, tl.int32), tl.uint8), index=(0,))


def test_a_runtime_int_made_strong_first_converts_as_its_dtype(backend):
    """An explicit astype makes it an int32 (strong), which wraps into uint8 as any int32 does:
    simplify had folded that astype away, and the launch check refused 1000."""
    x, total = np.zeros(4, np.uint8), np.zeros(4, np.uint8)
    add_a_strong_int[1](x, 1000, total, backend=backend)
    assert (total == 1000 % 256).all()


def test_tl_range_in_a_helper_function():
    err = launch_error(tl.TileSyntaxError, lambda: calls_loop_helper[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"written in the @tl.tile_kernel function itself \(not in a helper",
          line_contains="for _ in tl.range(n):")  # fmt: skip


@tl.tile_kernel
def carried_dtype_changes(x, out, n):
    acc = tl.zeros((128,), tl.int32)
    for _ in tl.range(n):
        acc = acc + 0.5
    tl.store(out, acc.astype(tl.float32), index=(0,))


@tl.tile_kernel
def carried_shape_changes(x, out, n):
    acc = tl.zeros((128,), tl.float32)
    for _ in tl.range(n):
        acc = acc[None, :]
    tl.store(out, acc, index=(0,))


def test_loop_carried_value_changes_type():
    err = launch_error(tl.TileTypeError, lambda: carried_dtype_changes[1](X, OUT, 3))
    check(err, tl.TileTypeError, r"loop-carried `acc` is i32\[128\] before the loop but f32\[128\] after the body.*"
          r"astype\(tl.int32\)", expr="tl.range(n)")  # fmt: skip
    err = launch_error(tl.TileTypeError, lambda: carried_shape_changes[1](X, OUT, 3))
    check(err, tl.TileTypeError, r"loop-carried `acc` is f32\[128\] before the loop but f32\[1,128\]",
          expr="tl.range(n)")  # fmt: skip


@tl.tile_kernel
def defined_in_loop_used_after(x, out, n):
    for k in tl.range(n):
        t = tl.load(x, index=(k,), shape=(128,))
    tl.store(out, t, index=(0,))


@tl.tile_kernel
def defined_in_loop_operator_after(x, out, n):
    for k in tl.range(n):
        t = tl.load(x, index=(k,), shape=(128,))
    tl.store(out, t * 2.0, index=(0,))


@tl.tile_kernel
def used_before_assigned_in_loop(x, out, n):
    for _ in tl.range(n):
        t = t + 1.0  # noqa: F821
        tl.store(out, t, index=(0,))


@tl.tile_kernel
def index_used_after_loop(x, out, n):
    k = 0
    for k in tl.range(n):
        tl.store(out, tl.load(x, index=(k,), shape=(128,)), index=(0,))
    tl.store(out, tl.zeros((128,)) + k, index=(0,))


def test_variable_assigned_in_loop_used_after():
    err = launch_error(tl.TileSyntaxError, lambda: defined_in_loop_used_after[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"`t` is assigned in a tl.range loop body and used after the loop; assign it "
          r"before the loop", expr="tl.store(out, t, index=(0,))")  # fmt: skip
    err = launch_error(tl.TileSyntaxError, lambda: defined_in_loop_operator_after[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"`t` is assigned in a tl.range loop body and used after", expr="t * 2.0")


def test_variable_used_before_assigned_in_loop():
    err = launch_error(tl.TileSyntaxError, lambda: used_before_assigned_in_loop[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"`t` is used in a tl.range loop body before it is assigned", expr="t + 1.0")


def test_loop_index_used_after_loop():
    # Python would leave k at its last value; a traced loop has none, so this is an error, not k == 0.
    err = launch_error(tl.TileSyntaxError, lambda: index_used_after_loop[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"`k`, the index of a tl.range loop, has no value after the loop",
          expr="tl.zeros((128,)) + k")  # fmt: skip


@tl.tile_kernel
def rebound_list(x, out, n):
    parts = []
    for k in tl.range(n):
        parts = parts + [k]
    tl.store(out, tl.zeros((128,)), index=(0,))


@tl.tile_kernel
def escaped_through_list(x, out, n):
    parts = []
    for k in tl.range(n):
        parts.append(tl.load(x, index=(k,), shape=(128,)))
    tl.store(out, parts[-1], index=(0,))


@tl.tile_kernel
def escaped_through_dict(x, out, n):
    d = {}
    for k in tl.range(n):
        d["t"] = tl.load(x, index=(k,), shape=(128,))
    tl.store(out, d["t"] * 2.0, index=(0,))


def test_rebound_list_in_loop():
    err = launch_error(tl.TileSyntaxError, lambda: rebound_list[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"`parts` \(a list\) is rebound in a tl.range loop body", expr="tl.range(n)")


def test_tile_escaping_a_loop_body():
    err = launch_error(tl.TileSyntaxError, lambda: escaped_through_list[1](X, OUT, 3))
    check(err, tl.TileSyntaxError, r"made inside a tl.range loop body .* escaped", expr="tl.store(out, parts[-1], "
          "index=(0,))")  # fmt: skip
    err = launch_error(tl.TileSyntaxError, lambda: escaped_through_dict[1](X, OUT, 3))  # (caught where it is stored)
    check(err, tl.TileSyntaxError, r"`d\['t'\]` is assigned inside a tl.range loop", expr='d["t"]')


# ------------------------------------------------------------ NumPy and Python builtins


@tl.tile_kernel
def numpy_exp(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, np.exp(a), index=(0,))


@tl.tile_kernel
def numpy_where(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, np.where(a > 0, a, 0.0), index=(0,))


@tl.tile_kernel
def numpy_isnan(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.where(np.isnan(a), 0.0, a), index=(0,))


@tl.tile_kernel
def numpy_asarray(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, np.asarray(a), index=(0,))


@tl.tile_kernel
def numpy_sum(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, a - np.sum(a), index=(0,))


@tl.tile_kernel
def numpy_exp_of_array(x, out):
    tl.store(out, np.exp(x), index=(0,))


@pytest.mark.parametrize(
    "kernel, match, expr",
    [
        (numpy_exp, r"^NumPy functions do not take tiles; use tl\.exp$", "np.exp(a)"),
        (numpy_where, r"^NumPy functions do not take tiles; use tl\.where$", "np.where(a > 0, a, 0.0)"),
        (numpy_isnan, r"^NumPy functions do not take tiles; use `x != x` for np\.isnan$", "np.isnan(a)"),
        (numpy_asarray, r"^NumPy functions do not take tiles", "np.asarray(a)"),
        (numpy_sum, r"^NumPy functions do not take tiles; use tl\.sum$", "np.sum(a)"),
        (numpy_exp_of_array, r"^NumPy functions do not take kernel array arguments; load a tile with tl\.load and "
         r"use tl\.exp$", "np.exp(x)"),
    ],
    ids=["exp", "where", "isnan", "asarray", "sum", "exp(array)"],
)  # fmt: skip
def test_numpy_functions_on_tiles(kernel, match, expr):
    err = launch_error(tl.TileTypeError, lambda: kernel[1](X, OUT))
    check(err, tl.TileTypeError, match, expr=expr)


@tl.tile_kernel
def array_plus_one(x, out):
    tl.store(out, x + 1, index=(0,))


@tl.tile_kernel
def one_minus_array(x, out):
    tl.store(out, 1.0 - x, index=(0,))


@tl.tile_kernel
def array_equals_zero(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, tl.where(x == 0.0, -1.0, a), index=(0,))  # (meant a == 0.0)


@tl.tile_kernel
def int_padding_minus_inf(x, out):
    a = tl.load(x, index=(0,), shape=(256,), padding=float("-inf"))
    tl.store(out, tl.max(a, keepdims=True), index=(0,))


@tl.tile_kernel
def scatter_a_fraction(x, out):
    tl.scatter(out, tl.arange(0, 4), 2.7)


@tl.tile_kernel
def divmod_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    q, _ = divmod(a, 3.0)
    tl.store(out, q, index=(0,))


@tl.tile_kernel
def round_tile(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    tl.store(out, round(a), index=(0,))


@pytest.mark.parametrize(
    "kernel, match, expr",
    [
        (array_plus_one, r"`\+` on an array argument: arrays are not tiles; load a tile with tl\.load", "x + 1"),
        (one_minus_array, r"`-` on an array argument", "1.0 - x"),
        (array_equals_zero, r"`==` on an array argument", "x == 0.0"),
        (divmod_tile, r"divmod\(\) does not take tiles; write `a // b, a % b`", "divmod(a, 3.0)"),
        (round_tile, r"round\(\) does not take tiles; use tl\.floor\(x \+ 0\.5\)", "round(a)"),
    ],
    ids=["array+1", "1-array", "array==0.0", "divmod", "round"],
)
def test_python_operations_that_tiles_do_not_take(kernel, match, expr):
    """`x == 0.0` on an array was Python's False: tl.where chose `a` everywhere, silently."""
    err = launch_error(tl.TileTypeError, lambda: kernel[1](X, OUT))
    check(err, tl.TileTypeError, match, expr=expr)


@pytest.mark.parametrize("kernel, match, expr", [
    (int_padding_minus_inf, r"padding is the Python float -inf but the array holds int32: .*np.iinfo\(np.int32\)",
     'tl.load(x, index=(0,), shape=(256,), padding=float("-inf"))'),
    (scatter_a_fraction, r"values is the Python float 2.7 but the array holds int32",
     "tl.scatter(out, tl.arange(0, 4), 2.7)"),
])  # fmt: skip
def test_a_python_float_that_an_int_array_cannot_hold(kernel, match, expr):
    """-inf padding on an int32 array read 0 (a max of negative values gave 0), 2.7 was
    scattered as 2; whole numbers (padding=0.0) stay fine."""
    x = np.arange(-300, -100, dtype=np.int32)
    err = launch_error(tl.TileTypeError, lambda: kernel[1](x, x.copy()))
    check(err, tl.TileTypeError, match, expr=expr)
    out = x.copy()
    int_padding_whole[1](x, out)
    assert out[0] == -5


@tl.tile_kernel
def int_padding_whole(x, out):
    a = tl.load(x, index=(0,), shape=(256,), padding=-5.0)
    tl.store(out, tl.max(a, keepdims=True), index=(0,))


@tl.tile_kernel
def misused(x, out, what: tl.Constant):
    a = tl.load(x, index=(0,), shape=(128,))
    if what == "sum":
        a = a.sum()
    elif what == "other":
        a = a.frobnicate
    elif what == "array":
        a = a + x.size
    elif what == "array_set":
        x.size = 4
    elif what == "literal":
        a = a + 2**64
    elif what == "cdiv0":
        a = a + tl.cdiv(16, 0)
    elif what == "cdiv_float":
        a = a + tl.cdiv(10.0, 3)
    elif what == "cdiv_str":
        a = a + tl.cdiv(16, "4")
    elif what == "explain":
        tl.explain(misused, x, out, what="sum")
    elif what == "store_array":
        tl.store(out, x, index=(0,))
    tl.store(out, a, index=(0,))


@pytest.mark.parametrize("what, cls, match, expr", [
    ("sum", tl.TileAttributeError, r"a tile has no attribute `sum`; use tl.sum\(t, ...\)", "a.sum"),
    ("other", tl.TileAttributeError, r"`frobnicate`; a tile has .shape, .dtype", "a.frobnicate"),
    ("array", tl.TileAttributeError, r"an array argument has no attribute `size`", "x.size"),
    ("array_set", tl.TileAttributeError, r"an array argument's attributes cannot be set \(`size`\)", "x.size"),
    ("literal", tl.TileTypeError, r"Python int 18446744073709551616 does not fit in int64 or uint64", "a + 2**64"),
    ("cdiv0", tl.TileValueError, r"tl.cdiv\(16, 0\): division by zero", "tl.cdiv(16, 0)"),
    ("cdiv_float", tl.TileTypeError, r"tl.cdiv takes integers or integer tiles, got 10.0 and 3", "tl.cdiv(10.0, 3)"),
    ("cdiv_str", tl.TileTypeError, r"tl.cdiv takes integers or integer tiles, got 16 and '4'", 'tl.cdiv(16, "4")'),
    ("explain", tl.TileSyntaxError, r"tl.explain inside a kernel", 'tl.explain(misused, x, out, what="sum")'),
    ("store_array", tl.TileTypeError, r"^the stored tile: an array argument is not a tile; load a tile from it",
     "tl.store(out, x, index=(0,))"),
])  # fmt: skip
def test_python_mistakes_at_their_line(what, cls, match, expr):
    """AttributeError (t.sum(), x.size), ZeroDivisionError and TypeError from inside tilelang
    (tl.cdiv), and an int past uint64 reported at the launch rather than its line."""
    err = launch_error(cls, lambda: misused[1](X, OUT, what=what))
    check(err, cls, match, expr=expr)
    assert not hasattr(tl.TileAttributeError, "__wrapped__") and issubclass(tl.TileAttributeError, AttributeError)


@tl.tile_kernel
def numpy_values(x, out):
    a = tl.load(x, index=(0,), shape=(128,))
    counts = tl.histogram(a.astype(tl.int32) % 16, np.int64(16))
    tl.store(out, tl.exp2(a * 0.0, flush_to_zero=np.True_) + tl.max(counts).astype(tl.float32), index=(0,))


def test_numpy_values_where_python_values_are_taken():
    """np.int64(16) bins and np.True_ were refused (TypeError, "got bool")."""
    out = np.zeros(128, np.float32)
    numpy_values[1](np.zeros(128, np.float32), out)
    np.testing.assert_array_equal(out, 129.0)


def test_dtypes_equal_what_numpy_names_alike():
    """`x.dtype == np.float32` was False for a float32 array: a branch on it went the other way."""
    assert tl.float32 == np.float32 and tl.float32 == "float32" and np.dtype("float32") == tl.float32
    assert tl.int64 == np.dtype("int64") and tl.bfloat16 == "bfloat16" and tl.float32 != np.float64
    assert tl.float32 != "no such dtype" and tl.float32 != None and tl.float32 != 3  # noqa: E711
    assert len({tl.float32, tl.float32, tl.int8}) == 2


def endless(a):
    return endless(a + 1.0)


@tl.tile_kernel
def recurses_without_end(x, out):
    tl.store(out, endless(tl.load(x, index=(0,), shape=(128,))), index=(0,))


@tl.tile_kernel
def launches_itself(x, out):
    launches_itself[1](x, out)


def copy_of(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(128,)), index=(0,))


@tl.tile_kernel
def calls_a_kernel(x, out):
    copy_kernel(x, out)


copy_kernel = tl.tile_kernel(copy_of)


def test_a_kernel_called_inside_a_kernel():
    """The error pointed at the outer launch, not at the call."""
    err = launch_error(tl.TileSyntaxError, lambda: calls_a_kernel[1](X, OUT))
    check(err, tl.TileSyntaxError, r"a kernel cannot launch kernels.*helper", expr="copy_kernel(x, out)")


def test_parameters_a_kernel_cannot_take():
    """A keyword-only parameter failed at every launch (the trace passed it by position); a
    parameter named `stream` or `backend` could not be passed by keyword (the launch took it)."""

    def keyword_only(x, out, *, s=2.0):
        pass

    def named_stream(x, out, stream):
        pass

    with pytest.raises(tl.TileSyntaxError, match=r"keyword-only parameters are not supported \(s=2.0\)"):
        tl.tile_kernel(keyword_only)
    with pytest.raises(tl.TileSyntaxError, match=r"cannot be named `stream`, a keyword of the launch"):
        tl.tile_kernel(named_stream)


@tl.tile_kernel
def scale_by(x, out, alpha):
    tl.store(out, tl.load(x, index=(0,), shape=(128,)) * alpha, index=(0,))


def test_a_signature_is_not_a_launch_argument():
    """It compiled, then failed inside the runner with a KeyError or ValueError."""
    for args, name in (((X, OUT, "f32"), "alpha"), ((X, "f32[:]", 2.0), "out")):
        err = launch_error(tl.TileArgumentError, lambda args=args: scale_by[1](*args))
        check(err, tl.TileArgumentError, rf"argument `{name}`: a launch takes arrays and scalars, got '.*' \(sig",
              expr="scale_by[1](*args)")  # fmt: skip


@tl.tile_kernel
def writes_nothing(x, out, s, TILE: tl.Constant):
    pass


@tl.tile_kernel
def doubles_with_a_constant_between(x, T: tl.Constant, out):
    tl.store(out, tl.load(x, index=(0,), shape=(T,)) * 2, index=(0,))


@pytest.mark.parametrize("outputs", [("out",), (-1,), (2,)])
def test_check_kernel_with_a_constant_given_by_position(outputs):
    from tilelang.testing import check_kernel

    x = np.arange(4, dtype=np.float32)
    args = [x, 4, np.zeros(4, np.float32)]
    check_kernel(doubles_with_a_constant_between, 1, args, reference=lambda x, t, o: x * 2, outputs=outputs)


@pytest.mark.parametrize(
    "outputs, match",
    [
        (("TILE",), r"'TILE' is not a runtime argument"),
        ((3,), r"output 3 is not a position among 3"),
        ((-1,), r"output `s` is a float, not an array"),
    ],  # fmt: skip
)
def test_check_kernel_refuses_outputs_that_are_not_arrays(outputs, match):
    """`TILE` and position 3 wrapped around to `x` (compared with itself: the check passed)."""
    from tilelang.testing import check_kernel

    with pytest.raises(ValueError, match=match):
        check_kernel(writes_nothing, 1, args=(X, OUT, 2.0), reference=lambda x, out, s: x, outputs=outputs, TILE=4)


@tl.tile_kernel
def triples(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(8,)) * 3.0, index=(0,))


class _ArrayLike:
    """An array by ``__array_interface__`` only (not a NumPy array)."""

    def __init__(self, a):
        self.a = a

    @property
    def __array_interface__(self):
        return self.a.__array_interface__

    @property
    def dtype(self):
        return self.a.dtype


def test_check_kernel_can_fail():
    """Each of these passed a wrong kernel: an array-like output was shared by the reference and
    the backends (compared with itself), no backends or no outputs checked nothing, a write to an
    argument not named as an output went unseen, a float reference of an int64 output hid an
    off-by-one past 2**53, and arrays() drew float32 values outside its bounds."""
    from hypothesis import given, settings

    from tilelang.testing import arrays, assert_close, check_kernel

    x = np.arange(8, dtype=np.float32)

    def doubled_in_place(x, out):
        out[...] = 2 * np.asarray(x)
        return np.asarray(out)

    with pytest.raises(AssertionError):
        check_kernel(triples, 1, (x, _ArrayLike(np.zeros(8, np.float32))), reference=doubled_in_place)
    for options in (dict(backends=()), dict(outputs=())):
        with pytest.raises(ValueError, match="nothing would be checked"):
            check_kernel(triples, 1, (x, np.zeros(8, np.float32)), reference=lambda x, o: x * 3, **options)
    with pytest.raises(ValueError, match="positions or parameter names"):
        check_kernel(triples, 1, (x, np.zeros(8, np.float32)), reference=lambda x, o: x * 3, outputs=(True,))
    check_kernel(triples, 1, (x, np.zeros(8, np.float32)), reference=lambda x, o: x * 3, backends="interpret")
    out = np.zeros(8, np.float32)
    with pytest.raises(AssertionError, match="`out`, not an output, was written"):  # (x named as the output)
        check_kernel(triples, 1, (x, out), reference=lambda x, o: x, outputs=(0,))
    with pytest.raises(AssertionError, match="compute the reference in int64"):
        assert_close(np.array([2**53 + 1], np.int64), np.array([2.0**53]))

    @settings(max_examples=50, database=None)
    @given(arrays(tl.float32, (8,), min_value=0.1, max_value=0.2))
    def within(a):
        assert a.min() >= np.float32(0.1) and float(a.max()) <= 0.2

    within()


def test_recursive_kernels():
    err = launch_error(tl.TileSyntaxError, lambda: recurses_without_end[1](X, OUT))
    check(err, tl.TileSyntaxError, r"recursion does not end while the kernel is traced.*tl\.Constant",
          expr="endless(a + 1.0)")  # fmt: skip
    err = launch_error(tl.TileSyntaxError, lambda: launches_itself[1](X, OUT))
    check(err, tl.TileSyntaxError, r"a kernel cannot launch kernels.*helper", expr="launches_itself[1](x, out)")
