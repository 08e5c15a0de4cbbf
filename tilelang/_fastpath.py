"""The launch fast path: after a call has gone the full way (bind, specialize, compile,
launch), a function is generated for the calls like it, the way a JIT caches a call
site. It checks that a call is alike (argument types, dtypes, ranks, last-axis
strides, device, constants), reads the parameter values and launches; any difference
and it declines, and the call takes the full path. Generated source rather than a loop
over arguments: a launch of a small kernel is a few microseconds, and interpreting a
description of the call would cost as much again.

``kernel._fast_paths`` holds the functions, most recent first; :func:`fast_path_source`
shows one.
"""

from __future__ import annotations

import numpy as np

from . import dtypes
from ._backends.cuda_driver import on_device
from ._runtime import is_torch_tensor, read_cuda_array, stream_handle

MAX_FAST_PATHS = 8  # signatures remembered per kernel (calls alternating between a few)
MISSING = object()


_NAN = float("nan")


def constant_key(value):
    """What a Constant must equal to be alike (here and in the specialization key):
    1 == 1.0 == True and -0.0 == 0.0, so type and repr are compared too (a float's repr is
    exact); every NaN is one object, as nan != nan would make each call look new."""
    value = _one_nan(value)
    return type(value), repr(value), value


def _one_nan(value):
    if type(value) is float and value != value:
        return _NAN
    if type(value) is tuple:
        return tuple(_one_nan(v) for v in value)
    return value


class _Source:
    """The generated function's text and the objects its names stand for."""

    def __init__(self):
        self.names, self.fetches, self.guards, self.reads, self.flat = {}, [], [], [], []

    def name(self, value, hint: str) -> str:
        name = f"{hint}{len(self.names)}"
        self.names[name] = value
        return name


def _constant(src: _Source, var: str, value):
    if type(value) is int:
        src.guards.append(f"type({var}) is int and {var} == {value!r}")
    else:
        src.guards.append(f"constant_key({var}) == {src.name(constant_key(value), 'K')}")


def _array(src: _Source, var: str, value, info, ndim: int, device: int):
    kind = src.name(type(value), "T")
    if is_torch_tensor(value):  # the common case, read inline
        shape, strides = f"{var}_shape", f"{var}_strides"
        src.guards.append(f"type({var}) is {kind} and {var}.dtype is {src.name(value.dtype, 'D')}")
        src.guards.append(f"{var}.get_device() == {device}")
        src.reads.append(f"{shape}, {strides} = {var}.shape, {var}.stride()")
        unit = f"({strides}[-1] == 1 or {shape}[-1] <= 1)" if ndim else "True"
        src.reads.append(f"if len({shape}) != {ndim} or {'not ' if info.unit else ''}{unit}: return False")
        src.flat.append(f"{var}.data_ptr(), *{shape}, *{strides}")
    else:  # numba, CuPy, any __cuda_array_interface__: a reader gives the facts and the values
        values = f"{var}_values"
        signature = read_cuda_array(value, [])
        src.guards.append(f"type({var}) is {kind}")
        src.reads.append(f"{values} = []")
        src.reads.append(f"if read_cuda_array({var}, {values}) != {src.name(signature, 'S')}: return False")
        src.flat.append(f"*{values}")


def _scalar(src: _Source, var: str, value):
    kind = type(value)
    if kind is int:  # its dtype depends on its magnitude (and past uint64 the full path says why)
        in_range = f"-(2**63) <= {var} < 2**64"
        dtype = src.name(dtypes.scalar_dtype(value), "D")
        src.guards.append(f"type({var}) is int and {in_range} and scalar_dtype({var}) is {dtype}")
    else:  # bool, float, or a NumPy scalar type (its own dtype)
        src.guards.append(f"type({var}) is {src.name(kind, 'T')}")
    src.flat.append(f"float32({var})" if kind is float else var)  # a Python float is a weak float32


def generate(kernel, args, kwargs, backend, infos, launch):
    """A fast path for calls like this one (``args``, ``kwargs`` as given to the launch,
    ``infos`` the array facts the full path read), or None if later calls cannot skip
    the full path: an argument by keyword that is not a Constant, a parameter left to
    its default, a host array. ``launch`` is ``(launcher, current_stream, device,
    switch_context)`` from the CUDA runner."""
    launcher, current_stream, device, switch_context = launch
    names, constants = kernel.param_names, kernel.constants
    if any(name not in constants for name in kwargs):
        return None
    if any(name not in constants for name in names[len(args) :]):  # left to its default
        return None
    src = _Source()
    for i, value in enumerate(args):
        name, var = names[i], f"a{i}"
        if name in constants:
            _constant(src, var, value)
        elif name in infos:
            _array(src, var, value, infos[name], len(infos[name].shape), device)
        else:
            _scalar(src, var, value)
    for j, (name, value) in enumerate(kwargs.items()):
        src.fetches.append(f"k{j} = kwargs.get({name!r}, MISSING)")
        _constant(src, f"k{j}", value)
    lines = [
        "def fast_path(grid, args, kwargs, backend, stream):",
        f"    if len(args) != {len(args)} or len(kwargs) != {len(kwargs)} or backend != {backend!r}:",
        "        return False",
        *([f"    {''.join(f'a{i}, ' for i in range(len(args)))}= args"] if args else []),
        *(f"    {line}" for line in src.fetches),
        f"    if not ({' and '.join(src.guards) or 'True'}):",
        "        return False",
        *(f"    {line}" for line in src.reads),
        f"    flat = ({', '.join(src.flat)},)" if src.flat else "    flat = ()",
        "    if 0 in grid:",
        "        return True",
        f"    handle = current_stream({device}) if stream is None else stream_handle(stream)",
    ]
    if switch_context:
        lines += [f"    with on_device({device}):", "        launcher(grid, handle, flat)"]
    else:
        lines += ["    launcher(grid, handle, flat)"]
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    namespace = dict(
        src.names,
        MISSING=MISSING,
        constant_key=constant_key,
        read_cuda_array=read_cuda_array,
        scalar_dtype=dtypes.scalar_dtype,
        float32=np.float32,
        launcher=launcher,
        current_stream=current_stream,
        stream_handle=stream_handle,
        on_device=on_device,
    )
    exec(compile(source, f"<tilelang fast path of {kernel.__name__}>", "exec"), namespace)
    fast_path = namespace["fast_path"]
    fast_path.source = source
    return fast_path


def remember(kernel, fast_path):
    """Most recent first; the oldest is forgotten past MAX_FAST_PATHS."""
    kernel._fast_paths.insert(0, fast_path)
    del kernel._fast_paths[MAX_FAST_PATHS:]


def fast_path_source(kernel) -> str:
    """The generated fast paths of ``kernel``, most recent first (for the curious)."""
    return "\n".join(f.source for f in kernel._fast_paths)
