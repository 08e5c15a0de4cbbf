"""numba-cuda intrinsics for tensor cores: inline PTX the generated kernels call by name.

- ``pack_<d>(lo, hi)``: two float32 registers holding 16-bit ``d`` values → one uint32 of
  their bits, ``lo`` in the low half (``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32``: exact,
  the values are representable).
- ``mma_m16n8k16_<d>(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)``: one warp-wide
  ``mma.sync.aligned.m16n8k16.row.col.f32.<d>.<d>.f32``, the four float32 results as a
  tuple. Every lane of the warp must execute it together (the lowering emits it for all).
  ``mma_m16n8k8_tf32`` alike (``.m16n8k8 ... .tf32.tf32``, one TF32 value a word), its
  words made by ``tf32_bits(x)`` (``cvt.rna.tf32.f32``; ``f32_from_bits`` reads one as a float32).
- ``ldmatrix_x4[_trans](buffer, index)``: ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``
  from word ``index`` of a shared uint32 array, the four words as a tuple.
- Hopper (sm_90a): ``wgmma_desc(buffer, index, lbo, sbo, mode)`` the 64-bit matrix
  descriptor of a swizzled tile at word ``index``; ``wgmma_instruction(n, dtype, trans_a,
  trans_b)`` makes the intrinsic ``(acc, slot, desc_a, desc_b)`` of one
  ``wgmma.mma_async.m64nNk16`` accumulating into slots ``slot`` onwards of the register
  array ``acc`` in place (``wgmma_instruction_rs(n, dtype, trans_b)``: ``a`` from four
  words of a register array); ``wgmma_fence()``, ``wgmma_commit()``, ``wgmma_wait(n)``'s
  ``(acc)`` (its ``n`` registers tied to the wait, so nothing reads them before it) and
  ``proxy_fence()``; the generated module makes the variants it uses.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

from .._lower.layout import MMA_DTYPES

I32, F32 = ir.IntType(32), ir.FloatType()
_PTX = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}


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
    t, k = _PTX[name], 8 if name == "tf32" else 16
    fn = ir.FunctionType(ir.LiteralStructType([F32] * 4), [I32] * 6 + [F32] * 4)
    text = f"mma.sync.aligned.m16n8k{k}.row.col.f32.{t}.{t}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, {{$8,$9}}, "
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


_TF32 = ir.InlineAsm(ir.FunctionType(I32, [F32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")


@intrinsic
def tf32_bits(typingctx, x):
    """A float32 rounded to TF32 (to nearest, ties away from zero), as the tensor cores' word."""

    def codegen(context, builder, sig, args):
        return builder.call(_TF32, args)

    return types.uint32(types.float32), codegen


@intrinsic
def f32_from_bits(typingctx, u):
    """The float32 whose bits ``u`` holds (a TF32 word read as the value it rounds to)."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], F32)

    return types.float32(types.uint32), codegen


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


def asm_statement(text: str):
    """An intrinsic of no operands running the PTX ``text`` in order with memory accesses."""
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)

    @intrinsic
    def run(typingctx):
        def codegen(context, builder, sig, args):
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return run


@intrinsic
def wgmma_desc(typingctx, buffer, index, lbo, sbo, mode):
    """Start address (bits 0-13, 16-byte units of the shared window), leading and stride
    byte offsets (bits 16-29, 32-45, 16-byte units), swizzle mode (bits 62-63)."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        address = builder.zext(shared_address(context, builder, sig.args[0], args[0], args[1]), i64)
        out = builder.lshr(builder.and_(address, ir.Constant(i64, 0x3FFFF)), ir.Constant(i64, 4))
        for value, shift in ((args[2], 12), (args[3], 28)):  # (x >> 4) << 16, (x >> 4) << 32
            out = builder.or_(out, builder.shl(builder.lshr(value, ir.Constant(i64, 4)), ir.Constant(i64, shift + 4)))
        return builder.or_(out, builder.shl(args[4], ir.Constant(i64, 62)))

    return types.uint64(buffer, types.int32, types.int64, types.int64, types.int64), codegen


def _registers(context, builder, array_type, array, first, n):
    """Pointers to slots ``first`` to ``first + n - 1`` of a register array."""
    data = context.make_array(array_type)(context, builder, array).data
    return [builder.gep(data, [builder.add(first, ir.Constant(first.type, i))]) for i in range(n)]


def _tied(asm, n, context, builder, sig, args, first, operands=()):
    """Calls ``asm`` on ``operands`` and the ``n`` registers from slot ``first``, storing its results back there."""
    pointers = _registers(context, builder, sig.args[0], args[0], first, n)
    out = builder.call(asm, [*operands, *(builder.load(p) for p in pointers)])
    for i, p in enumerate(pointers):
        builder.store(builder.extract_value(out, i), p)
    return context.get_dummy_value()


def _wgmma_asm(n: int, dtype: str, a: str, a_types: list, trans: str):
    """The inline asm of one ``wgmma.mma_async.m64nNk16`` accumulating into its ``n / 2``
    tied float32 operands, ``a`` (the operand text) read from the operands of ``a_types``."""
    t, q, na = _PTX[dtype], n // 2, len(a_types)
    fn = ir.FunctionType(ir.LiteralStructType([F32] * q), [*a_types, ir.IntType(64), I32] + [F32] * q)
    d = ",".join(f"${i}" for i in range(q))
    text = f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${q + na + 1}, 0;\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "
    text += f"{{{d}}}, {a}, ${q + na}, p, 1, 1, {trans};\n}}"  # (p: add to the accumulators)
    constraints = ",".join(["=f"] * q + ["l" if x == ir.IntType(64) else "r" for x in a_types] + ["l", "r"])
    return ir.InlineAsm(fn, text, constraints + "," + ",".join(str(i) for i in range(q)), side_effect=True)


@functools.cache
def wgmma_instruction(n: int, dtype: str, trans_a: int, trans_b: int, add: int = 1):
    """One ``wgmma.mma_async.m64nNk16`` from two descriptors: ``(acc, slot, desc_a, desc_b)``
    multiplies into ``acc``'s slots from ``slot`` on, adding to them unless ``add`` is 0."""
    q = n // 2
    asm = _wgmma_asm(n, dtype, f"${q}", [ir.IntType(64)], f"{trans_a}, {trans_b}")

    @intrinsic
    def wgmma(typingctx, acc, slot, desc_a, desc_b):
        def codegen(context, builder, sig, args):
            return _tied(asm, q, context, builder, sig, args, args[1], operands=[*args[2:], ir.Constant(I32, add)])

        return types.void(acc, types.int64, types.uint64, types.uint64), codegen

    return wgmma


@functools.cache
def wgmma_instruction_rs(n: int, dtype: str, trans_b: int, add: int = 1):
    """``wgmma_instruction`` with ``a`` from registers: ``(acc, slot, words, word, desc_b)``
    reads the fragment from words ``word`` to ``+ 3`` of the uint32 register array ``words``."""
    q = n // 2
    asm = _wgmma_asm(n, dtype, f"{{${q},${q + 1},${q + 2},${q + 3}}}", [I32] * 4, f"{trans_b}")

    @intrinsic
    def wgmma(typingctx, acc, slot, words, word, desc_b):
        def codegen(context, builder, sig, args):
            a = [builder.load(p) for p in _registers(context, builder, sig.args[2], args[2], args[3], 4)]
            return _tied(asm, q, context, builder, sig, args, args[1], operands=[*a, args[4], ir.Constant(I32, add)])

        return types.void(acc, types.int64, words, types.int64, types.uint64), codegen

    return wgmma


@functools.cache
def wgmma_wait(n: int):
    fn = ir.FunctionType(ir.LiteralStructType([F32] * n), [F32] * n)
    tied = ",".join(["=f"] * n + [str(i) for i in range(n)])
    asm = ir.InlineAsm(fn, "wgmma.wait_group.sync.aligned 0;", tied + ",~{memory}", side_effect=True)

    @intrinsic
    def wait(typingctx, acc):
        def codegen(context, builder, sig, args):
            return _tied(asm, n, context, builder, sig, args, ir.Constant(ir.IntType(64), 0))

        return types.void(acc), codegen

    return wait


MMA_INTRINSICS = (
    {f"pack_{name}": _pack(name) for name in MMA_DTYPES}
    | {f"mma_m16n8k16_{name}": _mma(name) for name in MMA_DTYPES}
    | {"mma_m16n8k8_tf32": _mma("tf32"), "tf32_bits": tf32_bits, "f32_from_bits": f32_from_bits}
    | {"ldmatrix_x4": _ldmatrix(False), "ldmatrix_x4_trans": _ldmatrix(True)}
    | {"wgmma_desc": wgmma_desc, "wgmma_instruction": wgmma_instruction, "wgmma_wait": wgmma_wait}
    | {"wgmma_instruction_rs": wgmma_instruction_rs}
    | {"wgmma_fence": asm_statement("wgmma.fence.sync.aligned;")}
    | {"wgmma_commit": asm_statement("wgmma.commit_group.sync.aligned;")}
    | {"wgmma_wait_group_1": asm_statement("wgmma.wait_group.sync.aligned 1;")}
    | {"proxy_fence": asm_statement("fence.proxy.async.shared::cta;")}
)
