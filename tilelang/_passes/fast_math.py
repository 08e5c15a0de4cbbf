"""Triton's float math for kernels made with ``tile_kernel(fast_math=True)``.

By default tilelang's float math is as exact as CUDA's own library: ``exp`` and ``log``
within 2 ulps, ``/`` correctly rounded. Triton's defaults are cheaper and less exact, and a
kernel doing a few operations per element of a memory-bound row (a softmax: an ``exp`` and
a division per element) is measurably faster with them. This pass rewrites the tile IR so
every backend runs Triton's formulas (the interpreter and the CPU backend exactly, the GPU
with its approximate instructions):

- ``exp(x)`` becomes ``exp2(x * log2(e))``: on the GPU one ``ex2.approx`` after a multiply
  (about 8 instructions fewer). Rounding the product and log2(e) costs up to
  ``1.2 * |x| * 2^-24`` relative: at ``|x| = 80``, ~6e-6 (Triton's ``tl.exp`` has the same error).
- ``log(x)`` becomes ``log2(x) * ln(2)``: ``log2``'s error (2 ulps, relative) and two
  roundings, within 5.5 ulps (Triton's ``lg2.approx`` is absolute near ``x = 1``; this is not).
- ``x / y`` becomes ``div_approx``: PTX ``div.full.f32``, within 2 ulps (a correctly rounded
  quotient takes ~10 instructions and a branch); exact on the interpreter and the CPU.
- ``sigmoid(x)`` becomes ``1 / (1 + exp(-x))`` of the two above (Triton's ``tl.sigmoid``):
  0 below x = -88.7, where ``exp(-x)`` overflows (the exact value is below 3e-39 there).

Only float32 math changes (16-bit floats compute in float32 and round: their ``exp`` and
``log`` rewrite in float32 and convert back); float64 is left exact.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from .._ir.core import PRIMITIVES, Combine, Eqn, Literal, Program, TileType, Var, nested_blocks

LOG2E, LN2 = 1 / math.log(2), math.log(2)


def relax_numerics(program: Program) -> Program:
    for block in nested_blocks(program.body):
        block.eqns = [new for eqn in block.eqns for new in _relaxed(eqn)]
        for combine in (v for eqn in block.eqns for v in eqn.params.values() if isinstance(v, Combine)):
            combine.body.eqns = [new for eqn in combine.body.eqns for new in _relaxed(eqn)]  # (tl.reduce's function)
    return program


def _relaxed(eqn: Eqn) -> list:
    name, out = eqn.prim.name, eqn.outputs[0] if eqn.outputs else None
    if name not in ("exp", "log", "div", "sigmoid") or not out.type.dtype.is_float or out.type.dtype.bits > 32:
        return [eqn]
    if name == "div":
        return [Eqn(PRIMITIVES["div_approx"], eqn.inputs, eqn.outputs, {}, eqn.loc)]
    made = []

    def bind(prim, inputs, dtype, params=None, result=None):
        result = result or Var(TileType(out.type.shape, dtype), out.hint)
        made.append(Eqn(PRIMITIVES[prim], tuple(inputs), (result,), params or {}, eqn.loc))
        return result

    def constant(value):
        return Literal(f32.cast(value)[()], TileType((), f32))

    d, f32 = out.type.dtype, D.float32
    x = eqn.inputs[0]
    if d is not f32:  # the rewrite's products and sums in float32, as the 16-bit op's math
        x = bind("convert", [x], f32, {"dtype": f32})
    final = out if d is f32 else None
    if name == "exp":
        y = bind("exp2", [bind("mul", [x, constant(LOG2E)], f32)], f32, result=final)
    elif name == "log":
        y = bind("mul", [bind("log2", [x], f32), constant(LN2)], f32, result=final)
    else:  # sigmoid: 1 / (1 + exp(-x)), as Triton's
        e = bind("exp2", [bind("mul", [x, constant(-LOG2E)], f32)], f32)
        y = bind("div_approx", [constant(1.0), bind("add", [constant(1.0), e], f32)], f32, result=final)
    if d is not f32:
        bind("convert", [y], d, {"dtype": d}, result=out)
    return made
