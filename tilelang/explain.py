"""``tilelang.explain``: every stage of the compiler for one specialization, as text."""

from __future__ import annotations

from ._backends.cpu import host_facts
from ._frontend.tracing import tracing
from ._lower.thread_ir import format_thread_program, takes_arrays
from ._passes.estimate_cost import estimate_cost
from ._runtime import c_strides, device_peaks, host_array, launch_grid
from .errors import TileArgumentError, TileError, TileSyntaxError, at_user_call, user_location
from .kernel import TileKernel


class Explanation:
    """The stages of one compiled specialization. ``str()`` shows them all in pipeline
    order; ``explanation["tile_ir"]`` (or any name in ``.stages``) gives one."""

    def __init__(self, kernel_name: str, stages: dict):
        self.kernel_name = kernel_name
        self.stages = dict(stages)

    def __getitem__(self, stage: str) -> str:
        try:
            return self.stages[stage]
        except KeyError:
            raise KeyError(f"no stage {stage!r}; stages are {', '.join(self.stages)}") from None

    def __str__(self):
        parts = [f"=== {name} ===\n{text}" for name, text in self.stages.items()]
        return f"tilelang.explain({self.kernel_name})\n\n" + "\n\n".join(parts)

    __repr__ = __str__


def explain(kernel: TileKernel, *args, backend: str = "cuda", grid=None, **kwargs) -> Explanation:
    """Compile ``kernel`` for these arguments and return every stage as text.

    Arguments are what a launch would take, or signatures in place of arrays and scalars
    (``"f32[:]"`` a 1-d float32 array, ``"bf16[:, :]"`` a 2-d one, ``"i64"`` a scalar).
    Constants are given by value. The stages are the traced tile IR, the simplified IR,
    the layouts, the thread IR and the backend's code; for ``backend="cuda"`` (the
    default, no GPU needed) also the PTX and the resources ptxas reports. With real arrays
    and ``grid=``, a cost summary: bytes moved, flops, and the roofline floor they imply.
    Example::

        print(tl.explain(add, "f32[:]", "f32[:]", "f32[:]", TILE=1024))
        print(tl.explain(add, x, y, out, TILE=1024, grid=tl.cdiv(n, 1024))["cost"])
    """
    if hasattr(kernel, "variant") and isinstance(getattr(kernel, "kernel", None), TileKernel):  # @tl.autotune
        raise TileError(
            f"explain() takes one configuration of a tuned kernel: tl.explain({kernel.__name__}.variant(config), ..., "
            f"**config.constants), a config from tl.Config(...) or {kernel.__name__}.choices (what launches chose)",
            user_location(),
        )
    if not isinstance(kernel, TileKernel):
        raise TileError(f"explain() takes a @tl.tile_kernel function, got {type(kernel).__name__}", user_location())
    if tracing():
        raise TileSyntaxError("tl.explain inside a kernel: call it from Python, on the kernel", user_location())
    try:
        arguments = kernel.bind(args, kwargs)
        key, infos = kernel.specialize(arguments)
        compiled = kernel.compile(key, backend)
        stages, code = dict(compiled.stages), compiled.backend_kernel
        stages.pop("layouts (any array)", None)  # (shown in place of the layouts where that kernel runs)
        if code is not None and not takes_arrays(code.program, _facts(arguments, infos, backend)):
            code = code.general()  # what these arrays run: the stages from the layouts on are its
            note = "# not every array is as the kernel takes them (misaligned): the kernel for any array runs\n"
            stages["thread_ir"], stages["llvm_ir"] = note + format_thread_program(code.program), code.ir
            stages["layouts"] = note + compiled.stages.get("layouts (any array)", stages["layouts"])  # (else the same)
        if backend == "cuda":
            stages["ptx"] = code.ptx()
            stages["resources"] = _resources_text(code.resources())
        if grid is not None:
            if any(isinstance(v, str) for n, v in arguments.items() if n not in kernel.constants):
                raise TileArgumentError("explain(grid=) costs a launch on real arrays; pass arrays, not signatures")
            stages["cost"] = _cost_text(compiled.program, launch_grid(grid, arguments), arguments)
    except TileError as err:
        raise at_user_call(err) from None
    return Explanation(kernel.__name__, stages)


def _facts(arguments, infos, backend) -> dict:
    """Each real array's (pointer, shape, strides in elements, itemsize) as the backend's kernel
    sees it: a host array on cuda is copied whole and contiguous (to an aligned allocation)."""
    facts = {}
    for name, info in infos.items():
        if info.on_device:
            facts[name] = (info.ptr, info.shape, info.strides, info.dtype.itemsize)
        elif backend == "cuda":
            facts[name] = (0, info.shape, c_strides(info.shape), info.dtype.itemsize)
        else:
            facts[name] = host_facts(host_array(name, arguments[name], info)[0])
    return facts


def _resources_text(r: dict) -> str:
    return (
        f"threads per block {r['threads']}, registers per thread {r['registers']}, "
        f"shared memory per block {r['shared']} bytes, stack {r['stack']} bytes, "
        f"spills {r['spill_stores']} bytes stored / {r['spill_loads']} bytes loaded (sm_90, ptxas)"
        + (f"\nwgmma serialized by ptxas (each waits for the last): {why}" if (why := r["wgmma_serialized"]) else "")
        + ("\nwgmma wait injected by ptxas (registers of a product used before its wait)" * r["wgmma_wait_injected"])
    )


def _cost_text(program, grid, arguments) -> str:
    cost = estimate_cost(program, grid, arguments)
    name, bandwidth, flops = device_peaks()
    floor = cost.floor_seconds(bandwidth, flops)
    bound = "memory" if cost.bytes / bandwidth >= cost.flops / flops else "compute"
    loops = "" if cost.exact_loops else " (a loop's trip count is unknown: its body is counted once)"
    return (
        f"grid {grid}: {cost.bytes / 1e6:.3f} MB moved at least, {cost.flops / 1e6:.3f} MFLOP{loops}\n"
        f"on {name}: {bandwidth / 1e9:.0f} GB/s, {flops / 1e12:.1f} TFLOP/s fp32 -> "
        f"roofline floor {floor * 1e6:.2f} us ({bound}-bound)"
    )
