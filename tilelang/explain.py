"""``tilelang.explain``: every stage of the compiler for one specialization, as text."""

from __future__ import annotations

from .errors import TileError, user_location
from .kernel import TileKernel, default_backend


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


def explain(kernel: TileKernel, *args, backend: str | None = None, **kwargs) -> Explanation:
    """Compile ``kernel`` for these arguments and return every stage as text.

    Arguments are what a launch would take, or signatures in place of arrays and scalars
    (``"f32[:]"`` a 1-d float32 array, ``"bf16[:, :]"`` a 2-d one, ``"i64"`` a scalar).
    Constants are given by value. Example::

        print(tl.explain(add, "f32[:]", "f32[:]", "f32[:]", TILE=1024))
    """
    if not isinstance(kernel, TileKernel):
        raise TileError(f"explain() takes a @tl.tile_kernel function, got {type(kernel).__name__}", user_location())
    try:
        key, _ = kernel.specialize(kernel.bind(args, kwargs))
        compiled = kernel.compile(key, backend or kernel.backend or default_backend())
    except TileError as err:
        if err.loc is None:
            err.loc = user_location()
        raise err.with_traceback(None) from None
    return Explanation(kernel.__name__, compiled.stages)
