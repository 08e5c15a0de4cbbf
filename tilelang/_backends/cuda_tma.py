"""numba-cuda intrinsics for the tensor memory accelerator and mbarriers (sm_90a): inline
PTX the generated kernels call by name (``thread_ir.TmaLoad``, ``Mbarriers``,
``MbarrierWait``).

- ``mbarrier_init(bars, i)``: ``mbarrier.init`` of uint64 word ``i`` of a shared array with
  an arrival count of 1; ``mbarrier_init_fence()`` makes the inits visible to the async
  proxy (``fence.mbarrier_init``) before a barrier publishes them; ``mbarrier_inval(bars, i)``.
- ``mbarrier_expect_tx(bars, i, bytes)``: the one arrival of the mbarrier's phase, which
  then completes when ``bytes`` more have landed.
- ``mbarrier_try_wait(bars, i, parity)``: 1 once the phase of ``parity`` has completed
  (the generated code loops on it; the PTX has no labels LLVM's inline asm would accept).
- ``tma_load(rank, map)`` makes ``(buffer, index, bars, i, (c0, ..))``: one
  ``cp.async.bulk.tensor`` of a box of tensor map ``map`` at coordinates ``c0, ..``
  (innermost first) to word ``index`` of a shared uint32 array, completing on mbarrier
  ``i``. The map is the kernel parameter ``tl_map_<map>`` (128 bytes, 64-byte aligned),
  which the backend adds to the PTX numba makes (numba cannot declare one) and the
  launcher fills (tilelang/_launch.c).
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

from .cuda_mma import asm_statement, shared_address

I32 = ir.IntType(32)


def _barrier_op(text: str, operands: int = 0):
    """An intrinsic ``(bars, i[, x])`` running ``text`` on the address of mbarrier ``i``
    (``$0``) and, with ``operands`` 1, the int32 ``x`` (``$1``)."""
    fn = ir.FunctionType(ir.VoidType(), [I32] * (1 + operands))
    asm = ir.InlineAsm(fn, text, ",".join(["r"] * (1 + operands)) + ",~{memory}", side_effect=True)

    def codegen(context, builder, sig, args):
        at = shared_address(context, builder, sig.args[0], args[0], args[1])
        builder.call(asm, [at, *args[2:]])
        return context.get_dummy_value()

    if operands:

        @intrinsic
        def with_operand(typingctx, bars, i, x):
            return types.void(bars, types.int32, types.int32), codegen

        return with_operand

    @intrinsic
    def op(typingctx, bars, i):
        return types.void(bars, types.int32), codegen

    return op


mbarrier_init = _barrier_op("mbarrier.init.shared::cta.b64 [$0], 1;")
mbarrier_inval = _barrier_op("mbarrier.inval.shared::cta.b64 [$0];")
mbarrier_expect_tx = _barrier_op("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", operands=1)
mbarrier_init_fence = asm_statement("fence.mbarrier_init.release.cluster;")

_TRY_WAIT = ir.InlineAsm(
    ir.FunctionType(I32, [I32, I32]),
    "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\tselp.u32 $0, 1, 0, p;\n\t}",
    "=r,r,r,~{memory}",
    side_effect=True,
)


@intrinsic
def mbarrier_try_wait(typingctx, bars, i, parity):
    def codegen(context, builder, sig, args):
        return builder.call(_TRY_WAIT, [shared_address(context, builder, sig.args[0], args[0], args[1]), args[2]])

    return types.int32(bars, types.int32, types.int32), codegen


@functools.cache
def tma_load(rank: int, map_index: int):
    coords = ", ".join(f"${2 + d}" for d in range(rank))  # (after the two addresses)
    text = (
        f"{{\n\t.reg .b64 m;\n\tmov.b64 m, tl_map_{map_index};\n\tcvta.param.u64 m, m;\n\t"
        f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        f"[$0], [m, {{{coords}}}], [$1];\n\t}}"
    )
    fn = ir.FunctionType(ir.VoidType(), [I32] * (2 + rank))
    asm = ir.InlineAsm(fn, text, ",".join(["r"] * (2 + rank)) + ",~{memory}", side_effect=True)

    @intrinsic
    def load(typingctx, buffer, index, bars, i, coords):
        def codegen(context, builder, sig, args):
            dst = shared_address(context, builder, sig.args[0], args[0], args[1])
            bar = shared_address(context, builder, sig.args[2], args[2], args[3])
            builder.call(asm, [dst, bar, *(builder.extract_value(args[4], d) for d in range(rank))])
            return context.get_dummy_value()

        return types.void(buffer, types.int32, bars, types.int32, types.UniTuple(types.int32, rank)), codegen

    return load
