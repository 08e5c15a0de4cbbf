"""tilelang kernels as PyTorch custom operators (``torch.library``): for ``torch.compile``,
autograd, CUDA graphs and ``torch.distributed``.

A Python function that allocates its outputs with torch and launches tile kernels on them
becomes an operator torch can trace, differentiate and capture::

    import torch
    import tilelang as tl

    @tl.torch.custom_op("mylib::scale", mutates_args=())
    def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
        out = torch.empty_like(x)
        scale_kernel[tl.cdiv(x.numel(), 1024)](x.view(-1), out.view(-1), factor, TILE=1024)
        return out

The function is its own fake implementation: on torch's fake (or meta) tensors a launch
does nothing, so what remains is the allocation of the outputs, which gives their shapes,
dtypes and devices. A function whose outputs depend on the data, not only on the shapes,
passes ``fake=`` (or calls ``op.register_fake``). The rest is torch's own API:
``op.register_autograd(backward, setup_context=...)`` with a backward that is another such
op, ``torch.library.opcheck(op, args)`` to test it. docs/pytorch.md walks through an RMSNorm
with forward and backward kernels, compiled, captured in a CUDA graph and trained under DDP.

torch stays optional: it is imported when this module is first used, and its absence is a
:class:`~tilelang.TileError` naming the package.
"""

from __future__ import annotations

import importlib

from .errors import TileError


def torch_module():
    """The ``torch`` package, or a TileError saying how to get it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise TileError(
            "tilelang.torch needs PyTorch (the `torch` package), which is not installed: "
            "pip install torch (tilelang's kernels themselves do not need it)"
        ) from None


def custom_op(name: str, fn=None, *, mutates_args, device_types=None, schema: str | None = None, fake=None):
    """``torch.library.custom_op`` over a function that launches tile kernels, with the
    function itself (launches skipped) as the fake implementation unless ``fake`` is given.

    ``name`` is ``"namespace::op"``; ``mutates_args`` names the arguments the function
    writes in place (``()`` when it only writes tensors it allocates); torch reads the
    schema from the type annotations (``torch.Tensor``, ``float``, ``int``, ...) unless
    ``schema`` is given. Used as a decorator, with or without ``fn``::

        @tl.torch.custom_op("mylib::add_", mutates_args=("out",))
        def add_(x: torch.Tensor, out: torch.Tensor) -> None:
            add_kernel[tl.cdiv(x.numel(), 1024)](x, out, out, TILE=1024)

    Returns torch's ``CustomOpDef``: call it like the function, and register a backward on
    it with ``register_autograd``.
    """
    if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
        raise TileError(f'custom_op: the name is "namespace::op" (e.g. "mylib::rms_norm"), got {name!r}')
    if isinstance(mutates_args, str) and mutates_args != "unknown":
        raise TileError(f"custom_op: mutates_args is a tuple of argument names, got the string {mutates_args!r}")
    torch = torch_module()

    def define(fn):
        op = torch.library.custom_op(name, mutates_args=mutates_args, device_types=device_types, schema=schema)(fn)
        op.register_fake(fake or fn)
        return op

    return define if fn is None else define(fn)
