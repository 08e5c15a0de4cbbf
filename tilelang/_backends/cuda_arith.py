"""Arithmetic the GPU has no single instruction for, written out as LLVM IR that calls nothing.

ptxas expands 64-bit integer division and remainder (``div.s64``, ``rem.u64``) and correctly
rounded float division (``div.rn.f32``) into calls of subroutines, and a function with any
call gets its ``wgmma.mma_async`` instructions serialized (ptxas info C7509: each one waits
for the one before). The matmul benchmark's grouped block order divides int64s, the
attention example's epilogue floats: without the calls the autotuned 4096^3 fp16 matmul went
from 327.8 to 391.0 TFLOP/s on the H200. These intrinsics compute the same values with
inline code only (each function takes an IR builder and the operands' LLVM values):

- ``floor_divmod(a, b, signed)``: Python's floor division and modulo of two
  integers of one type (x // 0 and x % 0 are 0, as NumPy's; ``MIN // -1`` wraps to MIN). The
  magnitudes divide with one 32-bit ``div.u32`` when both fit in 32 bits, else by shifting and
  subtracting, a bit at a time (64 steps; only for quotients of numbers past 2^32).
- ``div_rn_f32(a, b)``: ``a / b`` rounded to nearest even, through float64: the reciprocal
  estimate refined by Newton steps, the quotient corrected once with an fma; a float64
  quotient this close rounds to the correct float32 (53 >= 2 * 24 + 2 bits: rounding twice
  is innocuous for division). Zeros, infinities and NaNs take ``a`` times the reciprocal
  estimate, which gives IEEE's answer for each of them.

And instructions the GPU has but numba does not emit:

- ``instruction_f32("max.NaN.f32", a, b)`` (and ``min.NaN.f32``): NumPy's ``maximum``/``minimum`` of two
  float32s (NaN if either is NaN) as one ``max.NaN.f32`` (sm_80+) instead of a compare, a NaN
  test, an or and a select: the row maxima of attention's online softmax were a fifth of its
  loop's instructions.
- ``instruction_f32("ex2.approx.ftz.f32", x)``: ``exp2(x, flush_to_zero=True)``, one ``ex2.approx.ftz.f32`` (one
  MUFU.EX2); exp2 keeping subnormal results is four (a compare, two multiplies around it).
- ``instruction_f32("div.full.f32", a, b)``: ``div.full.f32``, within 2 ulps, for a quotient rounded to a 16-bit
  float next (a 16-bit division, computed in float32, or a float32 one whose every reader
  converts it to 16 bits: a softmax's ``(e / sum).astype(bf16)``, attention's epilogue):
  rounded to 16 bits it is within 0.5 + 2^-12 of their ulps (docs/dtypes.md: within 1), at a
  few instructions where a correctly rounded float32 quotient takes about ten.
"""

from __future__ import annotations

from llvmlite import ir

I32, I64, F32, F64 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.DoubleType()


def _long_division(builder, n, d):
    """(n // d, n % d) of unsigned 64-bit ``n`` and nonzero ``d``, a bit a step."""
    one, zero = ir.Constant(I64, 1), ir.Constant(I64, 0)
    entry, loop, done = builder.block, builder.append_basic_block("long_div"), builder.append_basic_block("long_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    bit, q, r = (builder.phi(I64) for _ in range(3))
    carry = builder.icmp_unsigned("!=", builder.lshr(r, ir.Constant(I64, 63)), zero)  # r << 1 passes 2^64
    shifted = builder.or_(builder.shl(r, one), builder.and_(builder.lshr(n, bit), one))
    fits = builder.or_(carry, builder.icmp_unsigned(">=", shifted, d))
    r_next = builder.select(fits, builder.sub(shifted, d), shifted)
    q_next = builder.or_(q, builder.shl(builder.zext(fits, I64), bit))
    bit_next = builder.sub(bit, one)
    for phi, first, then in ((bit, ir.Constant(I64, 63), bit_next), (q, zero, q_next), (r, zero, r_next)):
        phi.add_incoming(first, entry)
        phi.add_incoming(then, loop)
    builder.cbranch(builder.icmp_unsigned("!=", bit, zero), loop, done)
    builder.position_at_end(done)
    return q_next, r_next


def _unsigned_divmod(builder, n, d):
    """(n // d, n % d) of unsigned ``n`` and nonzero ``d`` without a 64-bit divide instruction."""
    if n.type.width <= 32:
        return builder.udiv(n, d), builder.urem(n, d)
    short = builder.icmp_unsigned("==", builder.lshr(builder.or_(n, d), ir.Constant(I64, 32)), ir.Constant(I64, 0))
    with builder.if_else(short) as (then, otherwise):
        with then:
            n32, d32 = builder.trunc(n, I32), builder.trunc(d, I32)
            q32, r32 = builder.zext(builder.udiv(n32, d32), I64), builder.zext(builder.urem(n32, d32), I64)
            short_block = builder.block
        with otherwise:
            q64, r64 = _long_division(builder, n, d)
            long_block = builder.block
    q, r = builder.phi(I64), builder.phi(I64)
    q.add_incoming(q32, short_block)
    q.add_incoming(q64, long_block)
    r.add_incoming(r32, short_block)
    r.add_incoming(r64, long_block)
    return q, r


def floor_divmod(builder, a, b, signed: bool):
    """Python's (a // b, a % b), both 0 where b is 0."""
    zero, one = ir.Constant(a.type, 0), ir.Constant(a.type, 1)
    by_zero = builder.icmp_unsigned("==", b, zero)
    if not signed:
        q, r = _unsigned_divmod(builder, a, builder.select(by_zero, one, b))
        return builder.select(by_zero, zero, q), builder.select(by_zero, zero, r)
    neg_a, neg_b = builder.icmp_signed("<", a, zero), builder.icmp_signed("<", b, zero)
    magnitude_a = builder.select(neg_a, builder.neg(a), a)  # |MIN| is 2^(w-1) read unsigned
    magnitude_b = builder.select(by_zero, one, builder.select(neg_b, builder.neg(b), b))
    uq, ur = _unsigned_divmod(builder, magnitude_a, magnitude_b)
    signs_differ = builder.xor(neg_a, neg_b)
    q = builder.select(signs_differ, builder.neg(uq), uq)  # truncated, wrapping: MIN // -1 is MIN
    r = builder.select(neg_a, builder.neg(ur), ur)  # takes a's sign
    floor = builder.and_(signs_differ, builder.icmp_unsigned("!=", r, zero))
    q, r = builder.select(floor, builder.sub(q, one), q), builder.select(floor, builder.add(r, b), r)
    return builder.select(by_zero, zero, q), builder.select(by_zero, zero, r)


def div_rn_f32(builder, a, b):
    """``a / b`` of two float32s, correctly rounded, with no call (the module docstring)."""
    x, y = builder.fpext(a, F64), builder.fpext(b, F64)
    rcp = ir.InlineAsm(ir.FunctionType(F64, [F64]), "rcp.approx.ftz.f64 $0, $1;", "=d,d")
    estimate = builder.call(rcp, [y])  # ~2^-22 relative error; y (a float32) is a normal float64
    r, one, minus_y = estimate, ir.Constant(F64, 1.0), builder.fsub(ir.Constant(F64, -0.0), y)  # (NVVM: no fneg)
    for _ in range(2):  # each Newton step squares the error: 2^-44, then below float64's ulp
        r = builder.fma(r, builder.fma(minus_y, r, one), r)
    q = builder.fmul(x, r)
    q = builder.fma(builder.fma(minus_y, q, x), r, q)
    zero = ir.Constant(F64, 0.0)
    finite = [builder.fcmp_ordered("==", builder.fsub(v, v), zero) for v in (x, y)]  # (NVVM: no llvm.fabs)
    nonzero = builder.and_(builder.fcmp_ordered("!=", x, zero), builder.fcmp_ordered("!=", y, zero))
    ordinary = builder.and_(builder.and_(*finite), nonzero)
    special = builder.fmul(x, estimate)  # 1/0 = inf, 1/inf = 0, -0/y = -0 (the fma would give +0), NaN: IEEE's
    return builder.fptrunc(builder.select(ordinary, q, special), F32)


def instruction_f32(builder, instruction: str, *args):
    """One PTX ``instruction`` on float32 operands, its float32 result."""
    operands, constraints = ", ".join(f"${i}" for i in range(len(args) + 1)), ",".join(["=f"] + ["f"] * len(args))
    asm = ir.InlineAsm(ir.FunctionType(F32, [F32] * len(args)), f"{instruction} {operands};", constraints)
    return builder.call(asm, list(args))
