"""The launch fast path: after a call has gone the full way (bind, specialize, compile,
launch), a plan of calls like it is made, the way a JIT caches a call site, and run by C
(``tilelang._launch.FastPath``, tilelang/_fast_path.c): it checks that a call is alike
(argument types, dtypes, ranks, last-axis strides, device, constants), reads the
parameter values into the launch's buffer and launches; any difference and it declines,
and the call takes the full path. C because a launch of a small kernel is a few
microseconds and the same checks in Python cost ~3 more (docs/runtime.md).

A plan has one entry per argument (kinds defined in tilelang/_fast_path.c): a torch tensor,
a numba or CuPy array (its type, dtype, rank, unit last stride), another device array (a
reader and what it must return), a Python int (its dtype class), a scalar of a type, a
Constant.
``kernel._fast_paths`` holds the fast paths, most recent first; :func:`describe` shows them.
"""

from __future__ import annotations

import numpy as np

from . import dtypes
from ._backends.cuda_driver import launcher_module
from ._runtime import attribute_reading, gpu_count, is_torch_tensor, read_cuda_array, stream_handle

MAX_FAST_PATHS = 8  # signatures remembered per kernel (calls alternating between a few)


_NANS: dict = {}  # float type -> the NaN that stands for all of its NaNs


def constant_key(value):
    """What a Constant must equal to be alike (here and in the specialization key; its last
    part is the value the kernel is traced with): 1 == 1.0 == True and -0.0 == 0.0, so type
    and repr are compared too (a float's repr is exact); a NumPy scalar is its Python value
    (np.int64(64) is 64); every NaN of a type is one object, as nan != nan would make each call look new."""
    value = _normal(value)
    return type(value), repr(value), value


def _normal(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return _NANS.setdefault(type(value), value)
    if type(value) is tuple:
        return tuple(_normal(v) for v in value)
    return value


def _constant(value):
    if type(value) is int:
        return (launcher_module().CONST_INT, value)
    return (launcher_module().CONST, constant_key(value))


def _array(value, info, written: bool):
    kind, ndim = type(value), len(info.shape)
    flags = int(info.unit) | (2 if written else 0)  # (written: an array with a zero stride declines)
    if is_torch_tensor(value):  # the common case: read by its methods in C
        return (launcher_module().TENSOR, kind, value.dtype, ndim, flags)
    reading = attribute_reading(value)
    if reading is not None:  # numba's, CuPy's: read by their attributes in C, as array_info reads them
        pointer, device_of = reading
        device_of = None if gpu_count() <= 1 else device_of  # None: the only GPU
        return (launcher_module().ARRAY, kind, value.dtype, ndim, flags, value.dtype.itemsize, pointer, device_of)
    # any other __cuda_array_interface__ or DLPack: a reader gives the facts and the values
    return (launcher_module().READER, kind, read_cuda_array, read_cuda_array(value, []))


_INT_CLASSES = {"int32": 0, "int64": 1, "uint64": 2}  # a Python int's dtype by its magnitude


def _scalar(value, bounds=None):
    if type(value) is int:
        return (launcher_module().INT, _INT_CLASSES[dtypes.scalar_dtype(value).name], *([bounds] if bounds else []))
    return (launcher_module().TYPED, type(value))  # bool, float (a weak float32, passed as its double), NumPy scalar


def generate(kernel, args, kwargs, backend, infos, launch, written=frozenset()):
    """A fast path for calls like this one (``args``, ``kwargs`` as given to the launch,
    ``infos`` the array facts the full path read), or None if later calls cannot skip
    the full path: an argument by keyword that is not a Constant, a parameter left to
    its default. ``launch`` is ``(launcher, current_stream, device)`` from the CUDA
    runner, and the ``(low, high)`` each runtime int must be in, by name, where the launch
    checks that (``runtime_checks.Checked``); ``written``: the arrays the kernel writes."""
    launcher, current_stream, device, *checked = launch
    bounds = checked[0] if checked else {}
    names, constants = kernel.param_names, kernel.constants
    if any(name not in constants for name in kwargs):
        return None
    if any(name not in constants for name in names[len(args) :]):  # left to its default
        return None
    plan = tuple(
        _constant(value)
        if name in constants
        else _array(value, infos[name], name in written)
        if name in infos
        else _scalar(value, bounds.get(name))
        for name, value in zip(names, args)
    )
    keyword_plan = tuple((name, _constant(value)) for name, value in kwargs.items())
    FastPath = launcher_module().FastPath
    guards = kernel.captures.guards() if kernel.captures else ()  # (what it read when compiled)
    return FastPath(launcher, plan, keyword_plan, backend, device, current_stream, stream_handle, constant_key, guards)


def remember(kernel, fast_path):
    """Most recent first; the oldest is forgotten past MAX_FAST_PATHS."""
    kernel._fast_paths.insert(0, fast_path)
    del kernel._fast_paths[MAX_FAST_PATHS:]


def describe(kernel) -> str:
    """What the fast paths of ``kernel`` take, most recent first (for the curious)."""
    names = ("TENSOR", "ARRAY", "READER", "INT", "TYPED", "CONST_INT", "CONST")
    kinds = {getattr(launcher_module(), name): name for name in names}

    def entry(e):
        kind, *rest = e
        if kinds[kind] in ("TENSOR", "ARRAY"):
            kind, dtype, ndim, flags, *_ = rest
            stride = f"{'unit' if flags & 1 else 'any'} last-axis stride{', written' if flags & 2 else ''}"
            return f"{kind.__qualname__} of {dtype}, rank {ndim}, {stride}"
        if kinds[kind] == "READER":
            return f"{rest[0].__qualname__} alike {rest[2]}"
        if kinds[kind] == "INT":
            return f"int, {list(_INT_CLASSES)[rest[0]]} by magnitude" + (f", in {list(rest[1])}" if rest[1:] else "")
        if kinds[kind] == "TYPED":
            return rest[0].__qualname__
        return f"Constant {rest[0] if kinds[kind] == 'CONST_INT' else rest[0][1]}"

    lines = []
    for path in kernel._fast_paths:
        lines.append(f"fast path on cuda:{path.device}:")
        lines += [f"  {name}: {entry(e)}" for name, e in zip(kernel.param_names, path.plan)]
        lines += [f"  {name}=: {entry(e)}" for name, e in path.keyword_plan]
    return "\n".join(lines)
