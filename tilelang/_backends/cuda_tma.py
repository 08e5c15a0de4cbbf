"""The tensor memory accelerator and mbarriers (sm_90a) as inline PTX in LLVM IR, for
``thread_ir.TmaLoad``, ``Mbarriers`` and ``MbarrierWait`` (each function takes an IR
builder and 32-bit shared addresses).

- :func:`mbarrier_op` runs ``mbarrier.init`` (an arrival count of 1), ``mbarrier.inval`` or
  ``mbarrier.arrive.expect_tx`` (the one arrival of the phase, which then completes when
  ``bytes`` more have landed) on an mbarrier; ``fence.mbarrier_init`` makes the inits
  visible to the async proxy before a barrier publishes them.
- :func:`mbarrier_try_wait`: 1 once the phase of ``parity`` has completed (the emitter
  loops on it).
- :func:`tma_load`: one ``cp.async.bulk.tensor`` of a box of tensor map ``map_index`` at
  coordinates innermost first to a shared address, completing on an mbarrier. The map is
  the kernel parameter ``tl_map_<map>`` (128 bytes, 64-byte aligned), which the backend
  adds to the PTX (an LLVM kernel cannot declare one) and the launcher fills
  (tilelang/_launch.c).
"""

from __future__ import annotations

from llvmlite import ir

I32 = ir.IntType(32)
MBARRIER = {
    "init": "mbarrier.init.shared::cta.b64 [$0], 1;",
    "inval": "mbarrier.inval.shared::cta.b64 [$0];",
    "expect_tx": "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
}


def mbarrier_op(builder, what: str, address, *operands):
    """``MBARRIER[what]`` on the mbarrier at ``address`` (and an int32 operand)."""
    fn = ir.FunctionType(ir.VoidType(), [I32] * (1 + len(operands)))
    constraints = ",".join(["r"] * (1 + len(operands))) + ",~{memory}"
    builder.call(ir.InlineAsm(fn, MBARRIER[what], constraints, side_effect=True), [address, *operands])


_TRY_WAIT = ir.InlineAsm(
    ir.FunctionType(I32, [I32, I32]),
    "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\tselp.u32 $0, 1, 0, p;\n\t}",
    "=r,r,r,~{memory}",
    side_effect=True,
)


def mbarrier_try_wait(builder, address, parity):
    return builder.call(_TRY_WAIT, [address, parity])


def tma_load(builder, map_index: int, to, barrier, coords: list):
    rank = len(coords)
    text = (
        f"{{\n\t.reg .b64 m;\n\tmov.b64 m, tl_map_{map_index};\n\tcvta.param.u64 m, m;\n\t"
        f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        f"[$0], [m, {{{', '.join(f'${2 + d}' for d in range(rank))}}}], [$1];\n\t}}"
    )
    fn = ir.FunctionType(ir.VoidType(), [I32] * (2 + rank))
    asm = ir.InlineAsm(fn, text, ",".join(["r"] * (2 + rank)) + ",~{memory}", side_effect=True)
    builder.call(asm, [to, barrier, *coords])
