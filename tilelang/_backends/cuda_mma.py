"""numba-cuda intrinsics for tensor cores: inline PTX the generated kernels call by name.

- ``pack_<d>(lo, hi)``: two float32 registers holding 16-bit ``d`` values → one uint32 of
  their bits, ``lo`` in the low half (``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32``: exact,
  the values are representable).
- ``mma_m16n8k16_<d>(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)``: one warp-wide
  ``mma.sync.aligned.m16n8k16.row.col.f32.<d>.<d>.f32``, the four float32 results as a
  tuple. Every lane of the warp must execute it together (the lowering emits it for all).
- ``ldmatrix_x4[_trans](buffer, index)``: ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``
  from word ``index`` of a shared uint32 array, the four words as a tuple.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

I32, F32 = ir.IntType(32), ir.FloatType()
_PTX = {"float16": "f16", "bfloat16": "bf16"}


def _pack(name: str):
    fn = ir.FunctionType(I32, [F32, F32])
    asm = ir.InlineAsm(fn, f"cvt.rn.{_PTX[name]}x2.f32 $0, $2, $1;", "=r,f,f")  # (the first source goes high)

    @intrinsic
    def pack(typingctx, lo, hi):
        def codegen(context, builder, sig, args):
            return builder.call(asm, args)

        return types.uint32(types.float32, types.float32), codegen

    return pack


def _mma(name: str):
    t = _PTX[name]
    fn = ir.FunctionType(ir.LiteralStructType([F32] * 4), [I32] * 6 + [F32] * 4)
    text = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, {{$8,$9}}, "
    text += "{$10,$11,$12,$13};"
    asm = ir.InlineAsm(fn, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=True)  # (convergent: keep in place)
    ret = types.UniTuple(types.float32, 4)

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        def codegen(context, builder, sig, args):
            out = builder.call(asm, args)
            return context.make_tuple(builder, ret, [builder.extract_value(out, i) for i in range(4)])

        return ret(*[types.uint32] * 6, *[types.float32] * 4), codegen

    return mma


def shared_address(context, builder, array_type, array, index):
    """The 32-bit shared-memory address of word ``index`` of a shared array (a cast LLVM can
    hoist and fold, where a ``cvta`` inside each instruction's asm would be repeated)."""
    data = context.make_array(array_type)(context, builder, array).data
    at = builder.gep(data, [builder.sext(index, ir.IntType(64))])
    return builder.ptrtoint(builder.addrspacecast(at, ir.PointerType(at.type.pointee, 3)), I32)


def _ldmatrix(trans: bool):
    fn = ir.FunctionType(ir.LiteralStructType([I32] * 4), [I32])
    text = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 {{$0,$1,$2,$3}}, [$4];"
    asm = ir.InlineAsm(fn, text, "=r,=r,=r,=r,r,~{memory}", side_effect=True)  # (it reads memory: in order)
    ret = types.UniTuple(types.uint32, 4)

    @intrinsic
    def ldmatrix(typingctx, buffer, index):
        def codegen(context, builder, sig, args):
            out = builder.call(asm, [shared_address(context, builder, sig.args[0], args[0], args[1])])
            return context.make_tuple(builder, ret, [builder.extract_value(out, i) for i in range(4)])

        return ret(buffer, types.int32), codegen

    return ldmatrix


MMA_INTRINSICS = (
    {f"pack_{name}": _pack(name) for name in _PTX}
    | {f"mma_m16n8k16_{name}": _mma(name) for name in _PTX}
    | {"ldmatrix_x4": _ldmatrix(False), "ldmatrix_x4_trans": _ldmatrix(True)}
)
