"""numba's compiler pipeline without the passes generated kernels never need.

numba runs ~25 passes on every function; a dozen of them exist for Python that tilelang's
generated source never contains (closures, ``with`` blocks, ``literally``/``literal_unroll``,
branches on constants, ``len`` of tuples, NumPy array expressions), and each that changes
the IR recomputes liveness over every block, which grows with the number of slot loops. The
generated code is the same without them (byte-identical PTX on sm_90; tests/test_ptx.py),
and compiles sooner: attention d64's PTX in 4.7-5.5 s instead of 6.5-7.9 s (2-core machine,
docs/performance.md).

The CPU backend passes :class:`LeanCompiler` to ``njit(pipeline_class=...)``, numba's
extension point. (The CUDA backend builds its LLVM IR itself: cuda_emit.py.)
"""

from __future__ import annotations

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


class LeanCompiler(Compiler):
    def define_pipelines(self):
        pipelines = super().define_pipelines()
        for pm in pipelines:
            pm.passes[:] = [(p, why) for p, why in pm.passes if p.__name__ not in DROPPED]
        return pipelines
