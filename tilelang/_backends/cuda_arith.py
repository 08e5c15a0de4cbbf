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
  estimate refined by Newton steps to within 2^-52 of 1 / b, times ``a``, that product
  corrected once by an fma. A quotient of float32s that is not a float32 lies at least 2^-49
  (relative) from every point halfway between two normal float32s (a - m b, for such a point
  m, is a nonzero multiple of ulp(m) ulp(b) / 2), so the product alone would round right;
  but a subnormal halfway point m has few bits and can be the quotient exactly (147 * 2^-149
  / 98 = 1.5 * 2^-149), where only m itself rounds right (ties to even): the corrected
  quotient is m, exactly. Where either is a zero, an infinity or NaN, the product without
  the correction is IEEE's answer (for such a b the reciprocal is the unrefined estimate:
  inf, 0 or NaN), where the fmas would give NaN, or +0 for -0 / b.
- ``divide_by_shared(xs, bs)``: many quotients by few divisors (a softmax's ``e / sum``): b's
  float32 reciprocal y = RN(1 / b) once, then q = RN(x y) and twice q = RN(q + (x - q b) y)
  by fmas. RN(x y) is within 1.5 ulps of x / b, and the first correction, its remainder
  rounded or not, brings q within a few 2^-24 ulps before rounding: q is then faithful. Its
  remainder x - q b is exact (a multiple of ulp(q) ulp(b), fewer than 2^24 of them), and the
  second correction is correctly rounded (Markstein's theorem: |b y - 1| < 2^-24 keeps
  (x / b - q)(b y) on the side of the halfway point x / b is on). That needs normal
  quotients and exact remainders, which a range test of each x's bits checks; a group of 4
  of a thread's quotients with any x outside it divides the float64 way instead. (tests/test_division.py runs
  this IR on the host: all 2^23 dividend mantissas of the divisors whose reciprocal rounds
  worst.)

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

import numpy as np
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


def reciprocal64(builder, b) -> tuple:
    """:func:`divisor64` of a float32 ``b`` from ``rcp.approx.ftz.f64``'s estimate of 1 / b (a
    constant's reciprocal computed here: the Newton steps fold away)."""
    if isinstance(b, ir.Constant):
        with np.errstate(divide="ignore"):
            return divisor64(builder, b, ir.Constant(F64, float(np.float64(1.0) / np.float64(b.constant))))
    rcp = ir.InlineAsm(ir.FunctionType(F64, [F64]), "rcp.approx.ftz.f64 $0, $1;", "=d,d")
    return divisor64(builder, b, builder.call(rcp, [builder.fpext(b, F64)]))  # (b, a float32, is a normal float64)


def divisor64(builder, b, estimate) -> tuple:
    """What dividing by a float32 ``b`` takes, as float64 values: (-b, 1 / b, whether b is
    finite and not zero). 1 / b is ``estimate`` (relative error ~2^-22) after two Newton
    steps, each squaring the error (2^-44, then below float64's ulp), or ``estimate`` itself
    where ``b`` is 0, an infinity or NaN (IEEE's inf, 0 or NaN)."""
    y = builder.fpext(b, F64)
    minus_y, ordinary = builder.fsub(ir.Constant(F64, -0.0), y), _ordinary(builder, y)  # (NVVM: no fneg)
    r = estimate
    for _ in range(2):
        r = builder.fma(r, builder.fma(minus_y, r, ir.Constant(F64, 1.0)), r)
    return minus_y, builder.select(ordinary, r, estimate), ordinary


def _ordinary(builder, v):
    """Whether float ``v`` is finite and not zero."""
    zero = ir.Constant(v.type, 0.0)
    finite = builder.fcmp_ordered("==", builder.fsub(v, v), zero)  # (NVVM: no llvm.fabs)
    return builder.and_(finite, builder.fcmp_ordered("!=", v, zero))


def quotient_f32(builder, a, divisor):
    """``a / b`` correctly rounded to float32, from ``divisor`` = :func:`divisor64` (b): the
    product with the reciprocal corrected once by an fma (the module docstring); where ``a``
    or ``b`` is a zero, an infinity or NaN, the product alone: IEEE's answer for each (the
    fmas would give NaN, or +0 for -0 / b)."""
    minus_b, reciprocal, ordinary_b = divisor
    x = builder.fpext(a, F64)
    q = builder.fmul(x, reciprocal)
    corrected = builder.fma(builder.fma(minus_b, q, x), reciprocal, q)
    return builder.fptrunc(builder.select(builder.and_(_ordinary(builder, a), ordinary_b), corrected, q), F32)


def div_rn_f32(builder, a, b):
    """``a / b`` of two float32s, correctly rounded, with no call (the module docstring)."""
    return quotient_f32(builder, a, reciprocal64(builder, b))


GROUP = 4  # quotients that take a route together: ptxas interleaves no further (softmax 42 -> 34 registers)


def divide_by_shared(builder, dividends: list, divisors: list) -> list:
    """``x / b`` for each float32 ``x`` of ``dividends`` by its ``b`` of ``divisors``, correctly
    rounded, where few divisors serve many quotients (a row's sum, its elements): each
    divisor's float32 reciprocal once, then a multiply and two Markstein corrections a quotient
    (:func:`markstein_quotient`, five float32 instructions); should any ``x`` of a group of
    :data:`GROUP` leave the range where that is exact for its divisor (:func:`in_exact_range`),
    the group takes :func:`quotient_f32`. (A branch a group: one for all let ptxas interleave
    all the float64 fallbacks, which held the softmax at 42 registers.)"""
    shared = {}  # a divisor (LLVM value) -> (its divisor64, y = RN(1 / b), -b in float32, start, span)
    for b in divisors:
        if id(b) not in shared:
            divisor = reciprocal64(builder, b)
            y, minus_b = builder.fptrunc(divisor[1], F32), builder.fsub(ir.Constant(F32, -0.0), b)
            shared[id(b)] = (divisor, y, minus_b, *exact_range(builder, b))
    each = [shared[id(b)] for b in divisors]
    out = []
    for at in range(0, len(dividends), GROUP):
        out += _divided_group(builder, dividends[at : at + GROUP], each[at : at + GROUP])
    return out


def _divided_group(builder, dividends: list, each: list) -> list:
    exact = [in_exact_range(builder, x, start, span) for x, (*_, start, span) in zip(dividends, each)]
    every = exact[0]
    for e in exact[1:]:
        every = builder.and_(every, e)
    with builder.if_else(every) as (fast, slow):
        with fast:
            quick = [markstein_quotient(builder, x, y, minus_b) for x, (_, y, minus_b, *_) in zip(dividends, each)]
            quick_end = builder.block
        with slow:
            wide, wide_end = [quotient_f32(builder, x, v) for x, (v, *_) in zip(dividends, each)], builder.block
    out = []
    for q, w in zip(quick, wide):
        phi = builder.phi(F32)
        phi.add_incoming(q, quick_end)
        phi.add_incoming(w, wide_end)
        out.append(phi)
    return out


def markstein_quotient(builder, x, y, minus_b):
    """``x / b`` from ``y`` = RN(1 / b) (float32): q0 = RN(x y) (within 1.5 ulps), then twice q +=
    (x - q b) y by fmas: the first (its remainder rounded or not) makes q faithful, the
    second, whose remainder is then exact, correctly rounded (Markstein's theorem). Exact
    for x, b in :func:`exact_range`."""
    q = builder.fmul(x, y)
    for _ in range(2):
        q = builder.fma(builder.fma(q, minus_b, x), y, q)
    return q


def exact_range(builder, b):
    """(start, span) of the magnitudes' bits of the dividends ``x`` that :func:`markstein_quotient`
    divides by ``b`` exactly: 2^-101 <= |x| (remainders on float32's grid, subnormal or
    not), 2^-125 |b| <= |x| (a normal quotient, with a margin) and |x| < 2^126 |b| (no
    overflow), for a ``b`` of 2^-126 <= |b| < 2^126 (1 / b normal; else the span is empty).
    Magnitudes of floats order as their bits do; scaling by 2^k moves the exponent field."""
    magnitude = builder.and_(builder.bitcast(b, I32), ir.Constant(I32, 0x7FFFFFFF))
    # the bits of 2^-126, 2^-101, 2^126 and infinity
    tiny, smallest, largest, infinity = (ir.Constant(I32, v) for v in (0x00800000, 0x0D000000, 0x7E800000, 0x7F800000))
    normal = builder.and_(builder.icmp_unsigned(">=", magnitude, tiny), builder.icmp_unsigned("<", magnitude, largest))
    scaled_down = builder.sub(magnitude, ir.Constant(I32, 125 << 23))  # 2^-125 |b| (2^-126 and a margin)
    start = builder.select(builder.icmp_signed(">", scaled_down, smallest), scaled_down, smallest)
    end = builder.add(magnitude, ir.Constant(I32, 126 << 23))  # 2^126 |b|, or past infinity's bits
    end = builder.select(builder.icmp_unsigned("<", end, infinity), end, infinity)
    return start, builder.select(normal, builder.sub(end, start), ir.Constant(I32, 0))


def in_exact_range(builder, x, start, span):
    """Whether float32 ``x``'s magnitude lies in [start, start + span) (bits; NaN never does)."""
    magnitude = builder.and_(builder.bitcast(x, I32), ir.Constant(I32, 0x7FFFFFFF))
    return builder.icmp_unsigned("<", builder.sub(magnitude, start), span)


def instruction_f32(builder, instruction: str, *args):
    """One PTX ``instruction`` on float32 operands, its float32 result."""
    operands, constraints = ", ".join(f"${i}" for i in range(len(args) + 1)), ",".join(["=f"] + ["f"] * len(args))
    asm = ir.InlineAsm(ir.FunctionType(F32, [F32] * len(args)), f"{instruction} {operands};", constraints)
    return builder.call(asm, list(args))
