"""Helpers for testing tile kernels against NumPy.

- Hypothesis strategies: :func:`dtypes`, :func:`shapes` (sizes that straddle tile edges)
  and :func:`arrays` (NumPy arrays of any tilelang dtype, bfloat16 included).
- :func:`tolerance` and :func:`assert_close`: comparisons whose tolerance follows from
  the dtype.
- :func:`check_kernel`: launch a kernel on every available backend (or those named in
  ``TILELANG_TEST_BACKENDS``) and compare its output arrays with a NumPy reference.
- :func:`bench` and :func:`sweep` (timing.py): median milliseconds of a function (CUDA
  events on the GPU), and a table and plot of implementations over sizes.
- The compiler's fuzzer: :mod:`tilelang.testing.programs` (random kernels) and
  :mod:`tilelang.testing.fuzz` (differential runs; ``python -m tilelang.testing.fuzz``).

Example::

    import numpy as np
    from hypothesis import given
    import tilelang as tl
    from tilelang import testing as tlt

    @tl.tile_kernel
    def double(x, out, TILE: tl.Constant):
        i = tl.block_id(0)
        tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * 2, index=(i,))

    @given(tlt.dtypes("f").flatmap(lambda d: tlt.arrays(d, tlt.shapes(64))))
    def test_double(x):
        tlt.check_kernel(double, tl.cdiv(x.shape[0], 64), args=(x, np.zeros_like(x)),
                         reference=lambda x, out: x * 2, outputs=("out",), TILE=64)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import hypothesis.extra.numpy as hnp
import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from .. import dtypes as _dt
from ..dtypes import ALL_DTYPES, DType
from .timing import bench, sweep

__all__ = [
    "dtypes", "shapes", "arrays", "tolerance", "assert_close", "available_backends", "default_backends", "check_kernel",
    "bench", "sweep",
]  # fmt: skip


# ----------------------------------------------------------------- strategies


def dtypes(kinds: str = "biuf", *, exclude: Sequence = ()) -> st.SearchStrategy[DType]:
    """tilelang dtypes whose kind is in ``kinds``: ``"b"`` bool, ``"i"`` signed, ``"u"`` unsigned, ``"f"`` float.

    Example: ``dtypes("iu")`` draws any integer dtype; ``dtypes("f", exclude=[tl.float64])``.
    """
    excluded = {_dt.dtype(d) for d in exclude}
    choices = [d for d in ALL_DTYPES if d.kind in kinds and d not in excluded]
    if not choices:
        raise ValueError(f"no dtype of kinds {kinds!r} is left after excluding {sorted(d.name for d in excluded)}")
    return st.sampled_from(choices)


def shapes(tile, *, max_tiles: int = 3, slack: int = 2) -> st.SearchStrategy[tuple[int, ...]]:
    """Array shapes around multiples of ``tile`` (an int, or one int per dimension).

    Each size is ``tile*k + d`` with ``0 <= k <= max_tiles`` and ``|d| <= slack`` (at least 1),
    so partial edge tiles, exact multiples and arrays smaller than one tile all occur.
    """
    tiles = (tile,) if isinstance(tile, int) else tuple(tile)

    def size(t):
        return st.builds(lambda k, d: max(t * k + d, 1), st.integers(0, max_tiles), st.integers(-slack, slack))

    return st.tuples(*(size(t) for t in tiles))


def _float_bounds(np_dtype, lo, hi):
    """``lo``/``hi`` moved inward to finite values ``np_dtype`` represents exactly (Hypothesis needs that)."""
    big = float(ml_dtypes.finfo(np_dtype).max)
    lo, hi = max(-big if lo is None else lo, -big), min(big if hi is None else hi, big)
    v, w = np_dtype.type(lo), np_dtype.type(hi)  # (compared as Python floats: NumPy 2 would round lo to the dtype)
    lo = float(v if float(v) >= lo else np.nextafter(v, np_dtype.type(big)))  # (float8_e4m3fn has no inf)
    hi = float(w if float(w) <= hi else np.nextafter(w, np_dtype.type(-big)))
    return lo, hi


def arrays(
    dtype, shape, *, allow_nan_inf: bool = False, min_value=None, max_value=None
) -> st.SearchStrategy[np.ndarray]:
    """NumPy arrays of a tilelang ``dtype`` and ``shape`` (a tuple or a strategy of tuples).

    Integers cover the dtype's whole range unless ``min_value``/``max_value`` narrow it.
    Floats lie in ``[min_value, max_value]`` (the finite range by default), plus NaN and
    infinities if ``allow_nan_inf``; bfloat16 and float8 arrays are drawn as float32 and
    rounded with ml_dtypes.
    """
    d = _dt.dtype(dtype)
    if d.is_bool:
        return hnp.arrays(np.bool_, shape)
    if d.is_int:
        info = np.iinfo(d.np)
        lo = info.min if min_value is None else max(int(min_value), int(info.min))
        hi = info.max if max_value is None else min(int(max_value), int(info.max))
        return hnp.arrays(d.np, shape, elements=st.integers(lo, hi))
    draw = np.dtype(np.float32) if d.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else d.np
    lo, hi = _float_bounds(d.np, min_value, max_value)  # also keeps float32 draws from rounding to bfloat16 inf
    lo, hi = _float_bounds(draw, lo, hi)
    elements = st.floats(lo, hi, width=draw.itemsize * 8, allow_nan=False, allow_infinity=False)
    if allow_nan_inf:  # added explicitly so that they also come with bounds
        elements = elements | st.sampled_from([np.nan, np.inf, -np.inf])
    strategy = hnp.arrays(draw, shape, elements=elements)
    return strategy if draw is d.np else strategy.map(lambda a: a.astype(d.np))


# ----------------------------------------------------------------- comparison

_EXACT = (0.0, 0.0)


def tolerance(dtype, fast_math: bool = False) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing one short chain of operations in ``dtype`` with a reference.

    Each op is computed in at least float32 and rounded once to ``dtype``. The bounds leave room
    for a backend whose math functions are a few float32 ulps off (which can flip that final
    rounding by one ulp of ``dtype``); ``atol`` covers results near zero for O(1) inputs. Scale
    both for long reductions or large magnitudes. ``fast_math``: for a kernel made with
    ``tile_kernel(fast_math=True)``, whose float32 ``exp(x)`` is within ``2 + 1.25 * abs(x)``
    ulps (docs/dtypes.md): float32's rtol is 2^-15 (256 ulps: exp of arguments up to ~200).
    """
    d = _dt.dtype(dtype)
    if fast_math and d.name == "float32":
        return 2.0**-15, 2.0**-19
    if not d.is_float:
        return _EXACT  # integer arithmetic wraps exactly; bool is exact
    if d.name == "float16":
        return 2.0**-9, 2.0**-10  # eps = 2^-10 (10 stored mantissa bits): one flipped rounding plus slack
    if d.name == "bfloat16":
        return 2.0**-6, 2.0**-7  # eps = 2^-7 (7 stored mantissa bits): one flipped rounding plus slack
    if d.name == "float8_e4m3fn":
        return 2.0**-2, 2.0**-3  # eps = 2^-3, as above
    if d.name == "float8_e5m2":
        return 2.0**-1, 2.0**-2  # eps = 2^-2, as above
    if d.name == "float32":
        return 2.0**-19, 2.0**-19  # 16 eps (eps = 2^-23): GPU libm functions are within a few ulps
    return 2.0**-48, 2.0**-48  # float64: 16 eps (eps = 2^-52), same reasoning as float32


def _as_float64(a):
    return np.asarray(a).astype(np.float64)


def assert_close(
    actual, expected, dtype=None, *, rtol=None, atol=None, err_msg: str = "", fast_math: bool = False
) -> None:
    """Assert ``actual`` matches ``expected`` within :func:`tolerance` of ``dtype`` (``actual``'s dtype if None;
    ``fast_math``: a ``fast_math`` kernel's output).

    Shapes must agree exactly. Integers and bools must be equal; floats are compared in
    float64 with NaN equal to NaN and infinities matched by position and sign.
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    d = _dt.dtype(actual.dtype if dtype is None else dtype)
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}. {err_msg}"
    if not d.is_float:
        if expected.dtype.kind == "f" and np.any(np.abs(expected[np.isfinite(expected)]) >= 2.0**53):
            raise AssertionError(
                f"a float reference for an integer output from 2**53 on: it cannot hold every integer there (compared "
                f"in float64, off-by-one results would pass); compute the reference in {d.name}. {err_msg}"
            )
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg, strict=False)
        return
    default_rtol, default_atol = tolerance(d, fast_math)
    rtol, atol = default_rtol if rtol is None else rtol, default_atol if atol is None else atol
    assert np.isfinite(rtol) and np.isfinite(atol), f"tolerances must be finite, got rtol={rtol}, atol={atol}"
    np.testing.assert_allclose(
        _as_float64(actual),
        _as_float64(expected),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        err_msg=err_msg,
    )


# ------------------------------------------------------------------- kernels


def available_backends() -> tuple[str, ...]:
    """The backends kernels can run on here: the interpreter (the reference) first, the CPU backend, CUDA with a GPU."""
    from .._runtime import gpu_available

    return ("interpret", "cpu") + (("cuda",) if gpu_available() else ())


def default_backends() -> tuple[str, ...]:
    """What :func:`check_kernel` runs on unless told: the comma-separated ``TILELANG_TEST_BACKENDS``
    (e.g. ``interpret,cpu``) if set, else every available backend."""
    chosen = os.environ.get("TILELANG_TEST_BACKENDS", "")
    return tuple(b.strip() for b in chosen.split(",") if b.strip()) or available_backends()


def _copy(value):
    """A fresh copy of an array argument (a torch tensor by ``clone``, any other array-like by
    NumPy: shared, the reference and each backend would see each other's writes)."""
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__") and not isinstance(value, np.generic):
        return np.array(value, copy=True)
    return value.clone() if callable(getattr(value, "clone", None)) and hasattr(value, "dtype") else value


def _identical(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _output_positions(kernel, outputs, args) -> list[int]:
    """Positions among ``args`` (negative ones count from the last) or their parameter names,
    as positions; each must be an array."""
    runtime = list(kernel.signature.parameters)[: len(args)]  # (as ``args`` bind: Constants given by position too)
    positions = []
    for o in outputs:
        if isinstance(o, str):
            if o not in runtime:
                raise ValueError(f"check_kernel: {o!r} is not a runtime argument of {kernel.__name__} ({runtime})")
            o = runtime.index(o)
        elif not -len(args) <= o < len(args):
            raise ValueError(f"check_kernel: output {o} is not a position among {len(args)} runtime arguments")
        o %= len(args)
        if not hasattr(args[o], "dtype") or np.ndim(args[o]) == 0:
            raise ValueError(f"check_kernel: output `{runtime[o]}` is a {type(args[o]).__name__}, not an array")
        positions.append(o)
    return positions


def check_kernel(
    kernel,
    grid,
    args: Sequence | None = None,
    *,
    args_factory: Callable[[], Sequence] | None = None,
    reference: Callable,
    outputs: Sequence = (-1,),
    backends: Sequence[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    **constants,
) -> list[np.ndarray]:
    """Launch ``kernel[grid](*args, **constants)`` on each backend and compare with ``reference``.

    ``args`` (copied afresh for each launch) or ``args_factory()`` (called for the reference
    and for each launch; it must return equal arguments each time) gives the runtime
    arguments. ``outputs`` names the arguments the kernel writes, by position or parameter
    name. ``reference(*args)`` gets its own copy of the arguments (and runs with NumPy's
    floating-point warnings off); it returns the expected final contents of the outputs:
    one array, or a sequence in the order of ``outputs``. Each output is compared with
    :func:`assert_close` (its own dtype's tolerance, a ``fast_math`` kernel's where it is one,
    unless ``rtol``/``atol`` are given).
    ``backends`` defaults to :func:`default_backends`. Returns the outputs of the last
    backend run.
    """
    if (args is None) == (args_factory is None):
        raise ValueError("check_kernel: give exactly one of args= or args_factory=")
    backends = (backends,) if isinstance(backends, str) else backends
    outputs = (outputs,) if isinstance(outputs, (str, int)) else tuple(outputs)
    if backends is not None and not backends or not outputs:
        raise ValueError("check_kernel: no backends or no outputs: nothing would be checked")
    if any(isinstance(o, bool) or not isinstance(o, (int, str)) for o in outputs):
        raise ValueError(f"check_kernel: outputs are positions or parameter names, got {outputs!r}")

    first = [_copy(a) for a in (args if args is not None else args_factory())]

    def fresh():
        if args is not None:
            return [_copy(a) for a in args]
        made = list(args_factory())
        if len(made) != len(first) or not all(map(_identical, made, first)):
            raise ValueError("check_kernel: args_factory() must return equal arguments on every call")
        return made

    positions = _output_positions(kernel, outputs, first)
    with np.errstate(all="ignore"):  # references overflow and divide by zero on purpose
        expected = reference(*[_copy(a) for a in first])
    if len(positions) == 1 and not isinstance(expected, (tuple, list)):
        expected = [expected]
    if len(expected) != len(positions):
        raise ValueError(f"check_kernel: reference returned {len(expected)} arrays for {len(positions)} outputs")
    result, fast = [], getattr(kernel, "fast_math", False)
    for backend in default_backends() if backends is None else backends:
        run_args = fresh()
        kernel[grid](*run_args, backend=backend, **constants)
        result = [run_args[p] for p in positions]
        names = list(kernel.signature.parameters)
        for p, got, want in zip(positions, result, expected):
            where = f"output `{names[p]}` on backend {backend!r}"
            assert_close(got, want, got.dtype, rtol=rtol, atol=atol, err_msg=where, fast_math=fast)
        for i, (now, was) in enumerate(zip(run_args, first)):  # the other arrays: left as they were
            if i not in positions and isinstance(now, np.ndarray) and not _identical(now, was):
                raise AssertionError(f"check_kernel: `{names[i]}`, not an output, was written on backend {backend!r}")
    return result
