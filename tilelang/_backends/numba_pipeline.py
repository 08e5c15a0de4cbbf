"""numba's compiler pipeline without the passes generated kernels never need.

numba runs ~25 passes on every function; a dozen of them exist for Python that tilelang's
generated source never contains (closures, ``with`` blocks, ``literally``/``literal_unroll``,
branches on constants, ``len`` of tuples, NumPy array expressions), and each that changes
the IR recomputes liveness over every block, which grows with the number of slot loops. The
generated code is the same without them (byte-identical PTX on sm_90; tests/test_ptx.py),
and compiles sooner: attention d64's PTX in 4.7-5.5 s instead of 6.5-7.9 s (2-core machine,
docs/performance.md).

The CPU backend passes :class:`LeanCompiler` to ``njit(pipeline_class=...)``, numba's
extension point; numba-cuda's ``compile_ptx`` takes no pipeline class, so
:func:`lean_cuda_pipeline` swaps its module's ``CUDACompiler`` for the compile, holding
numba's compiler lock (no other thread compiles meanwhile). Where a numba version lacks
what this relies on, the default pipeline runs.
"""

from __future__ import annotations

import contextlib
import functools

from numba.core.compiler import Compiler

# the passes dropped, by class name; SSA, type inference, overload inlining and the rewrite
# of raises with run-time arguments (the CPU backend's ZeroStep) stay
DROPPED = frozenset({
    "WithLifting",  # `with` blocks
    "InlineClosureLikes", "MakeFunctionToJitFunction",  # closures, lambdas
    "InlineInlinables",  # @njit(inline="always") callees
    "RewriteSemanticConstants",  # len(tuple), array.ndim as constants
    "DeadBranchPrune",  # `if` on constants (run three times)
    "GenericRewrites", "NopythonRewrites",  # constant getitems, NumPy array expressions
    "FindLiterallyCalls", "LiteralUnroll", "LiteralPropagationSubPipelinePass",  # literally(), literal_unroll()
})  # fmt: skip


def _lean(passes) -> list:
    return [(p, why) for p, why in passes if p.__name__ not in DROPPED]


@functools.cache  # one subclass per numba compiler class
def _lean_compiler_class(base):
    class Lean(base):
        def define_pipelines(self):
            pipelines = super().define_pipelines()
            for pm in pipelines:
                pm.passes[:] = _lean(pm.passes)
            return pipelines

    Lean.__name__ = Lean.__qualname__ = f"Lean{base.__name__}"
    return Lean


LeanCompiler = _lean_compiler_class(Compiler)


@contextlib.contextmanager
def lean_cuda_pipeline():
    """Within: numba-cuda compiles with the lean pipeline."""
    try:
        from numba.cuda import compiler
        from numba.cuda.core.compiler_lock import global_compiler_lock
    except ImportError:  # another numba-cuda layout: its default pipeline
        compiler = None
    default = getattr(compiler, "CUDACompiler", None)
    if default is None:
        yield
        return
    with global_compiler_lock:
        compiler.CUDACompiler = _lean_compiler_class(default)
        try:
            yield
        finally:
            compiler.CUDACompiler = default
