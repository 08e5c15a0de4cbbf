"""Thread IR operations as LLVM instructions: the expression table of the LLVM backend.

:func:`op_value` builds one slot of an ``Op`` from its operands' LLVM values, with the
interpreter's semantics: registers have the LLVM type of their dtype (``register_type``:
16- and 8-bit floats are float32 values exactly representable in them, booleans ``i1``); integers
wrap at their width (no ``nsw``/``nuw``: LLVM may not reason past a wrap); every op
producing a 16- or 8-bit float computes in float32 and rounds once; conversions to such a
float from float64 or a wide integer go through float32 rounded to odd (rounded once).
What a target does its own way (math functions, rounding to 16 bits, faster instructions)
comes from the ``target`` object: ``math(name, x)``, ``rounded(x, d)``, ``from_bits(h, d)``,
``float32_odd(x, d)``, ``floor_divmod(x, y, signed)`` and ``fast(op, args)`` (a value, or
None for the general rule).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from .._ir.primitives import ftz_exponent
from .._lower.thread_ir import Imm
from ..dtypes import DType
from ..dtypes import dtype as dtype_named
from ..dtypes import float32 as FLOAT32
from ..errors import TileCompilerError

COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
MATH = {"exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tanh", "erf", "pow", "fmod", "fabs", "floor", "ceil",
        "fma"}  # fmt: skip


def register_type(d: DType):
    """The LLVM type of a register of dtype ``d`` (16- and 8-bit floats compute in float32)."""
    if d.is_bool:
        return ir.IntType(1)
    if d.is_float:
        return ir.DoubleType() if d.bits == 64 else ir.FloatType()
    return ir.IntType(d.bits)


def constant(x: Imm):
    """An immediate as an LLVM constant of its register type."""
    t = register_type(x.dtype)
    if x.dtype.is_bool:
        return ir.Constant(t, int(bool(x.value)))
    if x.dtype.is_float:  # (a float32 past its range is inf, as NumPy rounds it: llvmlite would raise)
        with np.errstate(over="ignore"):
            return ir.Constant(t, float(x.value if t == ir.DoubleType() else np.float32(x.value)))
    v = int(x.value) & ((1 << x.dtype.bits) - 1)  # two's complement, as LLVM reads integer literals
    return ir.Constant(t, v - (1 << x.dtype.bits) if v >> (x.dtype.bits - 1) else v)


def compute_dtype(d: DType) -> DType:
    """The dtype an op producing ``d`` computes in (16- and 8-bit floats: float32)."""
    return FLOAT32 if d.is_narrow_float else d


def convert(t, x, src: DType, dst: DType):
    """``x`` of dtype ``src`` as a register of dtype ``dst``: to bool ``x != 0`` (NaN is
    true); floats truncate toward zero into integers; a 16- or 8-bit float result rounded once."""
    b = t.builder
    to = register_type(dst)
    if dst.is_bool:
        if src.is_bool:
            return x
        zero = ir.Constant(x.type, 0)
        return b.fcmp_unordered("!=", x, zero) if src.is_float else b.icmp_unsigned("!=", x, zero)
    if dst.is_narrow_float:
        return x if src is dst else t.rounded(_unrounded(t, x, src), dst)
    if dst.is_float:
        if src.is_float:
            if x.type == to:
                return x
            return b.fpext(x, to) if to == ir.DoubleType() else b.fptrunc(x, to)
        return b.uitofp(x, to) if src.is_bool or src.kind == "u" else b.sitofp(x, to)
    if src.is_float:
        return b.fptosi(x, to) if dst.kind == "i" else b.fptoui(x, to)
    if x.type.width == to.width:
        return x
    if x.type.width > to.width:
        return b.trunc(x, to)
    return b.zext(x, to) if src.is_bool or src.kind == "u" else b.sext(x, to)


def _unrounded(t, x, src: DType):
    """``x`` as a float32 that rounds to a narrower float as ``x`` itself would, once: float64
    and 32- and 64-bit integers rounded to odd, anything else exactly."""
    if src.name == "float64" or (src.is_int and src.bits >= 32):
        return t.float32_odd(x, src)
    return convert(t, x, src, FLOAT32)


def op_value(t, op, args: list, rounded: bool = True):
    """One slot of ``op`` (``dst = op(args)``) from the LLVM values of its arguments (a
    16- or 8-bit float result computed in float32 and left so where not ``rounded``)."""
    d, name = op.dst.dtype, op.op
    kinds = [a.dtype for a in op.args]
    if name == "convert":
        if not rounded and op.attr.is_narrow_float:  # (its readers round it, once)
            return _unrounded(t, args[0], kinds[0])
        return convert(t, args[0], kinds[0], op.attr)
    if name in COMPARE:
        common = _common(*kinds)
        return _compare(t.builder, name, common, *(convert(t, a, k, common) for a, k in zip(args, kinds)))
    if name == "select":
        c, x, y = args
        return t.builder.select(c, *(convert(t, v, k, d) for v, k in zip((x, y), kinds[1:])))
    if name == "from_bits":  # a 16-bit float from the raw bits a load left in a uint16
        return t.from_bits(args[0], d)
    c = compute_dtype(d)
    args = [convert(t, a, k, c) if compute_dtype(k) is not c else a for a, k in zip(args, kinds)]
    fast = t.fast(op, args)
    out = fast if fast is not None else _arithmetic(t, name, c, args)
    return t.rounded(out, d) if d is not c and rounded else out


def _common(a: DType, b: DType) -> DType:
    """The dtype two operands of a comparison meet in (each value exactly): the wider float,
    or the wider integer (of twice the width, signed, where their signedness differs)."""
    if a is b:
        return a
    if a.is_float or b.is_float:
        return max((d for d in (a, b) if d.is_float), key=lambda d: d.bits)
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    return dtype_named(f"int{min(64, 2 * max(a.bits, b.bits))}")


def _compare(b, name, d: DType, x, y):
    if d.is_float:  # ordered, but != true on a NaN (as NumPy's)
        return b.fcmp_unordered("!=", x, y) if name == "ne" else b.fcmp_ordered(COMPARE[name], x, y)
    signed = d.kind == "i"
    return (b.icmp_signed if signed else b.icmp_unsigned)(COMPARE[name], x, y)


def _arithmetic(t, name: str, d: DType, args):
    b = t.builder
    if d.is_float:
        return _float_op(t, name, d, args)
    x = args[0]
    y = args[1] if len(args) > 1 else None
    signed = d.kind == "i"
    if name in ("add", "sub", "mul"):
        return getattr(b, name)(x, y)
    if name in ("and", "land"):
        return b.and_(x, y)
    if name in ("or", "lor"):
        return b.or_(x, y)
    if name == "xor":
        return b.xor(x, y)
    if name == "neg":
        return b.sub(ir.Constant(x.type, 0), x)
    if name == "invert":
        return b.not_(x)
    if name == "abs":
        if not signed:
            return x
        return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.sub(ir.Constant(x.type, 0), x), x)
    if name in ("maximum", "minimum"):
        if d.is_bool:
            return b.or_(x, y) if name == "maximum" else b.and_(x, y)
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        return b.select(cmp(">" if name == "maximum" else "<", x, y), x, y)
    if name in ("floordiv", "mod"):
        return _floor_divmod(t, name, signed, x, y)
    if name in ("shl", "shr"):
        return _shift(b, name, signed, x, y)
    if name == "umulhi":  # (the CUDA target: mul.hi)
        wide = ir.IntType(max(2 * d.bits, 32))
        product = b.mul(b.zext(x, wide), b.zext(y, wide))
        return b.trunc(b.lshr(product, ir.Constant(wide, d.bits)), x.type)
    raise TileCompilerError(f"the LLVM backend has no rule for thread op '{name}' on {d.name}")


def _floor_divmod(t, name, signed, x, y):
    """Python's ``//`` and ``%`` (0 where ``y`` is 0; ``MIN // -1`` wraps to MIN). By a
    constant: LLVM's division (multiplied out) with the floor's correction."""
    b = t.builder
    if not isinstance(y, ir.Constant) or y.constant in (0, -1):
        return t.floor_divmod(x, y, signed)[name == "mod"]
    if not signed:
        return b.udiv(x, y) if name == "floordiv" else b.urem(x, y)
    q, r = b.sdiv(x, y), b.srem(x, y)
    zero = ir.Constant(x.type, 0)
    wrong = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<" if y.constant > 0 else ">", r, zero))
    if name == "floordiv":
        return b.select(wrong, b.sub(q, ir.Constant(x.type, 1)), q)
    return b.select(wrong, b.add(r, y), r)


def _shift(b, name, signed, x, y):
    """Counts of the bit width or more (or negative) shift everything out, as PTX does."""
    bits = x.type.width
    if isinstance(y, ir.Constant) and 0 <= y.constant < bits:
        return b.shl(x, y) if name == "shl" else (b.ashr(x, y) if signed else b.lshr(x, y))
    ok = b.icmp_unsigned("<", y, ir.Constant(y.type, bits))  # (a negative count reads huge unsigned)
    if name == "shr" and signed:
        return b.ashr(x, b.select(ok, y, ir.Constant(y.type, bits - 1)))
    safe = b.select(ok, y, ir.Constant(y.type, 0))
    shifted = b.shl(x, safe) if name == "shl" else b.lshr(x, safe)
    return b.select(ok, shifted, ir.Constant(x.type, 0))


def _float_op(t, name: str, d: DType, args):
    b = t.builder
    x = args[0]
    y = args[1] if len(args) > 1 else None
    one = ir.Constant(x.type, 1.0)
    if name in ("add", "sub", "mul"):
        return getattr(b, "f" + name)(x, y)
    if name in ("div", "div_approx"):  # (the GPU's approximate division is cuda_emit.py's)
        return b.fdiv(x, y)
    if name == "neg":
        return b.fsub(ir.Constant(x.type, -0.0), x)  # (NVVM: no fneg)
    if name in ("maximum", "minimum"):  # NumPy's: a NaN wins
        bigger = b.fcmp_ordered(">" if name == "maximum" else "<", x, y)
        return b.select(b.or_(bigger, b.fcmp_unordered("uno", x, x)), x, y)
    if name == "abs":
        return t.math("fabs", x)
    if name == "rsqrt":
        return b.fdiv(one, t.math("sqrt", x))
    if name == "sigmoid":  # exp(x) / (1 + exp(x)) below 0: 1 / (1 + exp(-x)) is 0 once exp(-x) overflows
        e = t.math("exp", b.fsub(ir.Constant(x.type, -0.0), t.math("fabs", x)))
        return b.fdiv(b.select(b.fcmp_ordered(">=", x, ir.Constant(x.type, 0.0)), one, e), b.fadd(one, e))
    if name == "exp2_ftz":  # exp2 turns subnormal below the threshold: exp2(-inf) is 0 there
        low = b.fcmp_ordered("<", x, ir.Constant(x.type, ftz_exponent(d)))
        return t.math("exp2", b.select(low, ir.Constant(x.type, -math.inf), x))
    if name in MATH:  # (fma: libdevice's __nv_fmaf, fma.rn.f32; the host's llvm.fma)
        return t.math(name, *args)
    raise TileCompilerError(f"the LLVM backend has no rule for thread op '{name}' on {d.name}")
