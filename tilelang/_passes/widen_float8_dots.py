"""float8 dots that Hopper's float8 tensor cores cannot take as they are become float16 dots.

``tl.dot`` keeps float8 operands (either format, mixed too) as they are. wgmma multiplies
them with its own instructions (``m64nNk32.f32.e4m3.e5m2``, twice float16's rate) only where
layout assignment gave the dot a wgmma accumulator (sm_90a, tiles big enough:
``lower_dot.dot_layouts``) and both operands are read K-major, the PTX ISA's rule for 8-bit
operands: ``a`` as it was loaded (not a transpose) and ``b`` a transpose (``x @ w.T``, the
float8 GEMM's usual form: weights stored as (N, K), as ``torch._scaled_mm`` also wants
them) whose one use is the dot, of a tile held four elements of a row to a word (so it is
stored to shared memory as it is, each row of ``w`` a row of K-major ``b``).

Every other float8 dot converts its operands to float16 (exact: each float8 value is a
float16) and runs where float16 dots run (wgmma, mma.sync or CUDA cores), as the ``convert``
equations this pass adds before it show in the ``layouts`` stage. Layout assignment then
runs again on the rewritten program.
"""

from __future__ import annotations

from .. import dtypes as D
from .._ir.core import PRIMITIVES, Eqn, Program, TileType, Var, nested_blocks, uses
from .._lower.layout import WgmmaLayout
from .._lower.lowering import stored_as_words
from .lower_wgmma import is_matrix_transpose


def widen_float8_dots(program: Program, layouts: dict) -> bool:
    """Rewrites ``program`` in place: each float8 dot wgmma cannot take (under ``layouts``,
    the first assignment) takes float16 operands. Whether it changed anything."""
    producer = {out: eqn for block in nested_blocks(program.body) for eqn in block.eqns for out in eqn.outputs}
    used, changed = uses(program.body), False
    for block in nested_blocks(program.body):
        eqns = []
        for eqn in block.eqns:
            eight = eqn.prim.name == "dot" and eqn.inputs[0].type.dtype.is_float8
            if eight and not _takes(eqn, layouts, producer, used):
                eqn.inputs = (*(_widened(x, eqn, eqns) for x in eqn.inputs[:2]), *eqn.inputs[2:])
                changed = True
            eqns.append(eqn)
        block.eqns = eqns
    return changed


def _takes(dot: Eqn, layouts: dict, producer: dict, used: dict) -> bool:
    """Whether wgmma takes the float8 ``dot`` as it is: a wgmma result, both operands K-major."""
    a, b = dot.inputs[:2]
    if not isinstance(layouts.get(dot.outputs[0]), WgmmaLayout) or a is b:
        return False
    if a in producer and is_matrix_transpose(producer[a]):  # (x.T as a: read MN-major)
        return False
    transpose = producer.get(b)
    if transpose is None or not is_matrix_transpose(transpose) or used.get(b) != [dot]:
        return False
    w = transpose.inputs[0]
    return isinstance(w, Var) and w in layouts and stored_as_words(w.type, layouts[w])


def _widened(x, dot: Eqn, eqns: list) -> Var:
    """``x`` as float16, by a ``convert`` appended to ``eqns`` (before the dot)."""
    out = Var(TileType(x.type.shape, D.float16), getattr(x, "hint", None))
    eqns.append(Eqn(PRIMITIVES["convert"], (x,), (out,), {"dtype": D.float16}, dot.loc))
    return out
