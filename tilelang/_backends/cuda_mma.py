"""Tensor-core instructions of the CUDA backend as inline PTX in LLVM IR (each function takes an
IR builder and its operands' LLVM values).

- :func:`pack`: two float32 registers holding 16-bit values → one uint32 of their bits, the
  first in the low half (``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32``: exact, the values are
  representable); :func:`tf32_bits`: a float32 rounded to TF32 (``cvt.rna.tf32.f32``).
- :func:`mma`: one warp-wide ``mma.sync.aligned.m16n8k16.row.col.f32.<d>.<d>.f32`` (or
  ``.m16n8k8 ... .tf32.tf32``) on four ``a`` words, two ``b`` words and four float32
  accumulators, the four float32 results. Every lane of the warp executes it together.
- :func:`ldmatrix`: ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`` from a 32-bit
  shared address, its four words.
- Hopper (sm_90a): :func:`wgmma_desc` the 64-bit matrix descriptor of a swizzled tile;
  :func:`wgmma` one ``wgmma.mma_async.m64nNk16`` accumulating into its ``n / 2`` float32
  operands (``a`` from a descriptor or four words of registers), the accumulators tied
  through the asm; :func:`wgmma_wait` ties its registers to the wait, so nothing reads them
  before it; :func:`asm_statement` the fences, commits and waits without operands.
"""

from __future__ import annotations

from llvmlite import ir

from .._lower.swizzled import k_major_only, ptx_type
from .._lower.thread_ir import k_step

I32, F32 = ir.IntType(32), ir.FloatType()
_PTX = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}


def pack(builder, name: str, lo, hi):
    fn = ir.FunctionType(I32, [F32, F32])
    asm = ir.InlineAsm(fn, f"cvt.rn.{_PTX[name]}x2.f32 $0, $2, $1;", "=r,f,f")  # (the first source goes high)
    return builder.call(asm, [lo, hi])


def mma(builder, name: str, a: list, b: list, c: list) -> list:
    t, k = _PTX[name], 8 if name == "tf32" else 16
    fn = ir.FunctionType(ir.LiteralStructType([F32] * 4), [I32] * 6 + [F32] * 4)
    text = f"mma.sync.aligned.m16n8k{k}.row.col.f32.{t}.{t}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, {{$8,$9}}, "
    text += "{$10,$11,$12,$13};"
    asm = ir.InlineAsm(fn, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=True)  # (convergent: keep in place)
    out = builder.call(asm, [*a, *b, *c])
    return [builder.extract_value(out, i) for i in range(4)]


_TF32 = ir.InlineAsm(ir.FunctionType(I32, [F32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")


def tf32_bits(builder, x):
    """A float32 rounded to TF32 (to nearest, ties away from zero), as the tensor cores' word."""
    return builder.call(_TF32, [x])


def ldmatrix(builder, trans: bool, address) -> list:
    fn = ir.FunctionType(ir.LiteralStructType([I32] * 4), [I32])
    text = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 {{$0,$1,$2,$3}}, [$4];"
    asm = ir.InlineAsm(fn, text, "=r,=r,=r,=r,r,~{memory}", side_effect=True)  # (it reads memory: in order)
    out = builder.call(asm, [address])
    return [builder.extract_value(out, i) for i in range(4)]


def asm_statement(builder, text: str):
    """The PTX ``text``, of no operands, in order with memory accesses."""
    builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True), [])


def wgmma_desc(builder, address, lbo: int, sbo: int, mode: int):
    """Start address (bits 0-13, 16-byte units of the shared window), leading and stride
    byte offsets (bits 16-29, 32-45, 16-byte units), swizzle mode (bits 62-63)."""
    i64 = ir.IntType(64)
    out = builder.lshr(builder.and_(builder.zext(address, i64), ir.Constant(i64, 0x3FFFF)), ir.Constant(i64, 4))
    fields = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (mode << 62)
    return builder.or_(out, ir.Constant(i64, fields - (1 << 64) if fields >> 63 else fields))  # (as LLVM reads i64s)


def _tied(builder, asm, acc: list, operands) -> list:
    out = builder.call(asm, [*operands, *acc])
    return [builder.extract_value(out, i) for i in range(len(acc))]


def _wgmma_asm(n: int, dtypes, a: str, a_types: list, trans: str):
    """The inline asm of one ``wgmma.mma_async.m64nNk16`` (``k32`` on 8-bit ``dtypes``)
    accumulating into its ``n / 2`` tied float32 operands, ``a`` (the operand text) read
    from the operands of ``a_types``; ``trans`` the transpose immediates (none for 8-bit
    operands: K-major only)."""
    q, na = n // 2, len(a_types)
    fn = ir.FunctionType(ir.LiteralStructType([F32] * q), [*a_types, ir.IntType(64), I32] + [F32] * q)
    d, kinds = ",".join(f"${i}" for i in range(q)), ".".join(ptx_type(t) for t in dtypes)
    text = f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${q + na + 1}, 0;\n"
    text += f"wgmma.mma_async.sync.aligned.m64n{n}k{k_step(dtypes[0])}.f32.{kinds} "
    text += f"{{{d}}}, {a}, ${q + na}, p, 1, 1{'' if k_major_only(dtypes[0]) else ', ' + trans};\n}}"  # (p: add)
    constraints = ",".join(["=f"] * q + ["l" if x == ir.IntType(64) else "r" for x in a_types] + ["l", "r"])
    return ir.InlineAsm(fn, text, constraints + "," + ",".join(str(i) for i in range(q)), side_effect=True)


def wgmma(builder, dtypes, acc: list, a, desc_b, trans_a: int, trans_b: int, add: bool) -> list:
    """One ``wgmma.mma_async.m64nNk16`` (``n`` twice the accumulators; ``k32`` on 8-bit
    operands of ``dtypes``, a's and b's) into ``acc``, adding to them unless ``add`` is
    false: ``a`` a descriptor (an i64) or four words of registers (then ``trans_a`` is
    unused); the accumulators after it."""
    q = len(acc)
    if isinstance(a, list):
        asm = _wgmma_asm(2 * q, dtypes, f"{{${q},${q + 1},${q + 2},${q + 3}}}", [I32] * 4, f"{trans_b}")
        return _tied(builder, asm, acc, [*a, desc_b, ir.Constant(I32, int(add))])
    asm = _wgmma_asm(2 * q, dtypes, f"${q}", [ir.IntType(64)], f"{trans_a}, {trans_b}")
    return _tied(builder, asm, acc, [a, desc_b, ir.Constant(I32, int(add))])


def wgmma_wait(builder, acc: list, pending: int = 0) -> list:
    """All but the last ``pending`` wgmma groups done, ``acc``'s registers tied to the wait."""
    n = len(acc)
    fn = ir.FunctionType(ir.LiteralStructType([F32] * n), [F32] * n)
    tied = ",".join(["=f"] * n + [str(i) for i in range(n)])
    asm = ir.InlineAsm(fn, f"wgmma.wait_group.sync.aligned {pending};", tied + ",~{memory}", side_effect=True)
    return _tied(builder, asm, acc, [])
