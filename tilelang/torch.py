"""tilelang kernels as PyTorch custom operators (``torch.library``): for ``torch.compile``,
autograd, CUDA graphs and ``torch.distributed``.

A Python function that allocates its outputs with torch and launches tile kernels on them
becomes an operator torch can trace, differentiate and capture::

    import torch
    import tilelang as tl

    @tl.torch.custom_op("mylib::scale", mutates_args=())
    def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        scale_kernel[tl.cdiv(x.numel(), 1024)](x.reshape(-1), out.view(-1), factor, TILE=1024)
        return out

The function is its own fake implementation: on torch's fake (or meta) tensors a launch
does nothing, so what remains is the allocation of the outputs, which gives their shapes,
dtypes and devices. A function whose outputs depend on the data, not only on the shapes,
passes ``fake=``. A backward is registered as with ``torch.library.custom_op``:
``op.register_autograd(backward, setup_context=...)``, with a backward that is another such
op; ``torch.library.opcheck(op.op, args)`` tests the operator. docs/pytorch.md walks through
an RMSNorm with forward and backward kernels, compiled, captured in a CUDA graph and trained
under DDP.

Why not ``torch.library.custom_op`` itself: its calls pass through Python wrappers on
several dispatch keys (an aliasing check, an autograd kernel that redispatches), ~25 µs a
call on the H200's host, which a model of short kernels pays on every norm. Here the
operator is defined with ``torch.library.Library`` (``define``/``impl``): the dispatcher
calls the function directly, and autograd is a ``torch.autograd.Function`` around the call,
taken only when a gradient is needed.

torch stays optional: it is imported when this module is first used, and its absence is a
:class:`~tilelang.TileError` naming the package.
"""

from __future__ import annotations

import functools
import importlib
import inspect

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
    """A torch operator (a :class:`TileOp`) from a function that launches tile kernels, with
    the function itself (launches skipped) as the fake implementation unless ``fake`` is given.

    ``name`` is ``"namespace::op"``; ``mutates_args`` names the arguments the function
    writes in place (``()`` when it only writes tensors it allocates); the schema comes from
    the type annotations (``torch.Tensor``, ``float``, ``int``, ...) unless ``schema`` is
    given; ``device_types`` (``"cuda"``, ``"cpu"`` or a list) limits where the function is
    the implementation (default: everywhere). Used as a decorator, with or without ``fn``::

        @tl.torch.custom_op("mylib::add_", mutates_args=("out",))
        def add_(x: torch.Tensor, out: torch.Tensor) -> None:
            add_kernel[tl.cdiv(x.numel(), 1024)](x, out, out, TILE=1024)
    """
    if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
        raise TileError(f'custom_op: the name is "namespace::op" (e.g. "mylib::rms_norm"), got {name!r}')
    if isinstance(mutates_args, str) and mutates_args != "unknown":
        raise TileError(f"custom_op: mutates_args is a tuple of argument names, got the string {mutates_args!r}")
    torch = torch_module()

    def define(fn):
        return TileOp(torch, name, fn, mutates_args, device_types, schema, fake)

    return define if fn is None else define(fn)


_DEFINED: dict = {}  # name -> TileOp: kept alive (compiled graphs hold its overload), replaced when defined again


class TileOp:
    """A torch operator that runs a Python function launching tile kernels.

    Call it like the function. A call where autograd records a gradient (grad mode on, an
    input that requires grad) goes through a ``torch.autograd.Function`` whose backward is
    the one given to :meth:`register_autograd` (without one, a backward through the call is
    a TileError); any other call goes straight to the operator. ``op`` is the ``torch.ops``
    overload, for ``torch.library.opcheck``: a call of it (or of ``torch.ops.ns.name``, or
    one recorded by ``torch.fx.symbolic_trace``) is not differentiable; torch warns when a
    backward passes through it, and the gradient is missing.
    """

    def __init__(self, torch, name, fn, mutates_args, device_types, schema, fake):
        namespace, op_name = name.split("::")
        parameters = inspect.signature(fn).parameters
        keyword_only = [k for k, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        if keyword_only:
            raise TileError(f"custom_op {name}: keyword-only parameters ({', '.join(keyword_only)}) are not supported")
        previous = _DEFINED.pop(name, None)
        if previous is not None:  # defined again (a re-run cell, a reloaded module): this one replaces it
            previous._lib._destroy()
        self.name, self._torch = name, torch
        self._lib = torch.library.Library(namespace, "FRAGMENT")  # (the registrations live as long as it)
        schema = schema or torch.library.infer_schema(fn, mutates_args=mutates_args)
        self._lib.define(op_name + schema, tags=(torch.Tag.pt2_compliant_tag,))
        types = [device_types] if device_types is None or isinstance(device_types, str) else device_types
        for device in types:
            key = "CompositeExplicitAutograd" if device is None else torch._C._dispatch_key_for_device(device)
            self._lib.impl(op_name, fn, key)
        torch.library.register_fake(name, fake or fn, lib=self._lib)
        self.op = getattr(getattr(torch.ops, namespace), op_name).default
        self._mutated = [i for i, a in enumerate(self.op._schema.arguments) if a.alias_info and a.alias_info.is_write]
        self._no_backward = _autograd_function(torch, name, self.op, None, None)
        self._written = _written_function(torch, name)
        if self._mutated:  # autograd's version counters see the writes (what torch does for its custom ops)
            self._lib.impl(op_name, self._bump_versions, "ADInplaceOrView", with_keyset=True)
        self._names = tuple(parameters)
        self._defaults = {k: p.default for k, p in parameters.items() if p.default is not inspect.Parameter.empty}
        # where a call's tensors are (asked for requires_grad on each call): single ones, lists
        kinds = [str(a.type) for a in self.op._schema.arguments]
        self._tensors = tuple(i for i, k in enumerate(kinds) if k in ("Tensor", "Optional[Tensor]", "Tensor?"))
        self._tensor_lists = tuple(i for i, k in enumerate(kinds) if "Tensor" in k and i not in self._tensors)
        self._backward = None  # the Function of register_autograd's backward
        functools.update_wrapper(self, fn)
        _DEFINED[name] = self

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) < len(self._names):  # (a Function and setup_context take every argument, in order)
            args = self._positional(args, kwargs)
        if self._torch.is_grad_enabled():  # (the schema's tensor arguments alone: a call costs ~1 us less)
            for i in self._tensors:
                if getattr(args[i], "requires_grad", False):
                    return self._differentiated(args)
            for i in self._tensor_lists:
                if _requires_grad(self._torch, args[i]):
                    return self._differentiated(args)
        return self.op(*args)

    def register_autograd(self, backward, /, *, setup_context=None):
        """The operator's backward, as for ``torch.library.custom_op``:
        ``setup_context(ctx, inputs, output)`` saves what the backward needs (``inputs``: the
        call's arguments, all positional, defaults filled in), ``backward(ctx, *output_grads)``
        returns one gradient per input (None for those that have none)."""
        if self._mutated:
            raise TileError(f"{self.name} writes its arguments in place: autograd needs an op that does not")
        self._backward = _autograd_function(self._torch, self.name, self.op, backward, setup_context)

    def _differentiated(self, args):
        if any(isinstance(a, (list, tuple)) and _requires_grad(self._torch, a) for a in args):
            raise TileError(
                f"{self.name}: a tensor in a list argument requires grad, and gradients through lists of tensors "
                "are not supported (call it under torch.no_grad(), or with detached tensors)"
            )
        if self._backward is not None:
            return _rebuilt(self._backward.apply(*args))
        if self._torch.compiler.is_compiling():  # (dynamo traces a Function's backward: this one would raise)
            return self.op(*args)
        written = self._written_tensors(args)
        if any(t.requires_grad and t.is_leaf for t in written):
            raise TileError(
                f"{self.name} writes a leaf tensor that requires grad (torch refuses in-place writes there)"
            )
        output = _rebuilt(self._no_backward.apply(*args))
        inputs = [a for a in args if isinstance(a, self._torch.Tensor) and a.requires_grad]
        for t in written:  # (a gradient through what the op wrote reaches the missing backward)
            self._written.apply(t, *inputs)
        return output

    def _positional(self, args, kwargs):
        rest = self._names[len(args) :]
        unknown = set(kwargs) - set(rest)
        if unknown:
            raise TypeError(f"{self.name}() got unexpected or repeated keyword arguments {sorted(unknown)}")
        missing = [n for n in rest if n not in kwargs and n not in self._defaults]
        if missing:
            raise TypeError(f"{self.name}() missing arguments {missing}")
        return args + tuple(kwargs[n] if n in kwargs else self._defaults[n] for n in rest)

    def _written_tensors(self, args) -> list:
        """The tensors a call with these (positional) arguments writes: each of a written list's,
        none for an optional one given None."""
        picked = [args[i] for i in self._mutated if i < len(args)]
        flat = [t for a in picked for t in (a if isinstance(a, (list, tuple)) else (a,))]
        return [t for t in flat if isinstance(t, self._torch.Tensor)]

    def _bump_versions(self, keyset, *args, **kwargs):
        torch = self._torch
        result = self.op.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args, **kwargs)
        for tensor in self._written_tensors(self._positional(args, kwargs) if kwargs else args):
            torch.autograd.graph.increment_version(tensor)
        return result

    def __repr__(self):
        return f"<tilelang op {self.name}>"


def _requires_grad(torch, value) -> bool:
    """(Tensors alone are asked: dynamo cannot trace a getattr on the SymInt of a dynamic size.)"""
    if isinstance(value, (list, tuple)):
        return any(_requires_grad(torch, v) for v in value)
    return isinstance(value, torch.Tensor) and value.requires_grad


class _Spec(tuple):
    """The last output of a differentiated call that returns lists of tensors: the lists'
    lengths (None for a single output) and whether the op returns one list alone. autograd
    tracks only tensors returned directly or in a tuple: they travel flattened and are rebuilt
    on both sides of the Function (its backward gets a list's gradients as a list, as
    ``torch.library.custom_op``'s does)."""

    def __new__(cls, lengths, alone: bool):
        self = super().__new__(cls, lengths)
        self.alone = alone
        return self


def _flattened(output):
    parts = output if isinstance(output, tuple) else (output,)
    if not any(isinstance(o, list) for o in parts):
        return output
    flat = [t for o in parts for t in (o if isinstance(o, list) else (o,))]
    return (*flat, _Spec((len(o) if isinstance(o, list) else None for o in parts), not isinstance(output, tuple)))


def _rebuilt(flat):
    """The op's outputs (or their gradients) from ``_flattened``'s form."""
    if not (isinstance(flat, tuple) and flat and isinstance(flat[-1], _Spec)):
        return flat
    spec, parts, at = flat[-1], [], 0
    for n in spec:
        parts.append(flat[at] if n is None else list(flat[at : at + n]))
        at += 1 if n is None else n
    return parts[0] if spec.alone else tuple(parts)


def _no_backward(name) -> TileError:
    return TileError(
        f"{name} has no backward: give it one with register_autograd, or call it where no "
        "gradient is needed (torch.no_grad(), detached inputs)"
    )


def _written_function(torch, name):
    """The ``torch.autograd.Function`` that gives a tensor an op wrote in place the call as its
    history (one Function a tensor: torch takes a written view only as a Function's sole
    output): a gradient through it raises (ops that write have no backward)."""

    def forward(ctx, written, *inputs):
        ctx.mark_dirty(written)
        return written

    def differentiate(ctx, *grads):
        raise _no_backward(name)

    methods = {"forward": staticmethod(forward), "backward": staticmethod(differentiate)}
    return type(name.replace("::", "_") + "_written", (torch.autograd.Function,), methods)


def _autograd_function(torch, name, overload, backward, setup_context):
    """The ``torch.autograd.Function`` a differentiated call of the operator ``name`` goes
    through (its methods hold the ``torch.ops`` overload, not the TileOp: dynamo traces them)."""

    def forward(ctx, *args):  # (not torch's setup_context form: its apply binds a signature each call, ~10 us)
        output = overload(*args)
        if setup_context is not None:
            setup_context(ctx, args, output)
        flat = _flattened(output)
        ctx.spec = flat[-1] if flat is not output else None
        return flat

    def differentiate(ctx, *grads):
        if backward is None:
            raise _no_backward(name)
        if ctx.spec is not None:  # (the spec's own gradient, None, is dropped)
            grads = _rebuilt((*grads[:-1], ctx.spec))
            grads = (grads,) if ctx.spec.alone else grads
        grads_in = backward(ctx, *grads)
        return grads_in if isinstance(grads_in, tuple) else (grads_in,)

    methods = {"forward": staticmethod(forward), "backward": staticmethod(differentiate)}
    return type(name.replace("::", "_") + "_autograd", (torch.autograd.Function,), methods)
