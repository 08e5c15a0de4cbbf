"""numba-cuda intrinsics the generated kernels call: global loads and stores through raw
pointers (scalar and 16-byte vector), atomics, and 16-bit float conversions.

Arrays reach a kernel as a ``uint64`` data pointer plus int64 shapes and strides, so
every access is ``ptr + offset * itemsize``, loaded through the global address space
(``ld.global``) with the alignment the access has: a vector load of 16 bytes is one
``ld.global.v4.b32``-class instruction. 16-bit floats live in float32 registers:
loads widen, stores narrow (exactly: values are kept representable), and ``round_*``
rounds a float32 result to the 16-bit type with round-to-nearest-even (``cvt.rn``).

The functions are named ``<what>_<dtype>`` (``ld_float32``, ``ld4_float32``,
``st8_bfloat16``, ``atomic_add_int32``, ``round_float16``) and looked up by name. Under
numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same names are plain Python
functions on host memory, from ``cuda_simulated.py``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda import nvvmutils
from numba.cuda.core import config
from numba.cuda.extending import intrinsic

from ..dtypes import DType
from .cuda import intrinsic_table
from .numba_source import select_intrinsic

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
NUMBA = {
    "bool": types.boolean, "int8": types.int8, "int16": types.int16, "int32": types.int32,
    "int64": types.int64, "uint8": types.uint8, "uint16": types.uint16, "uint32": types.uint32,
    "uint64": types.uint64, "float16": types.float32, "bfloat16": types.float32,
    "float32": types.float32, "float64": types.float64,
}  # fmt: skip
MEMORY = {"bool": I8, "float16": I16, "bfloat16": I16, "float32": F32, "float64": F64}


def code_type(d: DType):
    """The numba type of a register of dtype ``d`` (16-bit floats compute in float32)."""
    return NUMBA[d.name]


def _memory_type(d: DType):
    return MEMORY.get(d.name) or ir.IntType(d.bits)


def _address(builder, ptr, offset, d: DType, lanes=1, addrspace=1):
    byte = builder.add(ptr, builder.mul(offset, ir.Constant(I64, d.itemsize)))
    return builder.inttoptr(byte, _access_type(d, lanes).as_pointer(addrspace))


def _access_type(d: DType, lanes: int):
    """What one access moves: vectors of narrow elements as 32-bit words (so 8 halves are
    one ``ld.global.v4.b32``, not two ``v4.u16``); one element as itself."""
    if lanes == 1:
        return _memory_type(d)
    if d.itemsize < 4 and d.itemsize * lanes >= 4:
        return ir.VectorType(I32, d.itemsize * lanes // 4)
    return ir.VectorType(_memory_type(d), lanes)


def _elements(builder, raw, d: DType, lanes: int):
    """The elements of a vector access. Narrow elements are cut out of 32-bit words with
    shifts (a bitcast to a vector of them lets LLVM split the access into narrower ones)."""
    if raw.type.element == _memory_type(d):
        return [builder.extract_element(raw, ir.Constant(I32, i)) for i in range(lanes)]
    per_word, bits = 4 // d.itemsize, d.itemsize * 8
    out = []
    for w in range(lanes // per_word):
        word = builder.extract_element(raw, ir.Constant(I32, w))
        for k in range(per_word):
            part = builder.lshr(word, ir.Constant(I32, k * bits)) if k else word
            out.append(builder.trunc(part, ir.IntType(bits)))
    return out


def _words(builder, elements, d: DType, lanes: int):
    """The inverse of :func:`_elements`: narrow elements packed into the access's vector."""
    ty = _access_type(d, lanes)
    value = ir.Constant(ty, ir.Undefined)
    if ty.element == _memory_type(d):
        for i, e in enumerate(elements):
            value = builder.insert_element(value, e, ir.Constant(I32, i))
        return value
    per_word, bits = 4 // d.itemsize, d.itemsize * 8
    for w in range(lanes // per_word):
        word = ir.Constant(I32, 0)
        for k in range(per_word):
            part = builder.zext(elements[w * per_word + k], I32)
            word = builder.or_(word, builder.shl(part, ir.Constant(I32, k * bits)) if k else part)
        value = builder.insert_element(value, word, ir.Constant(I32, w))
    return value


def _widen(builder, raw, d: DType):
    """Memory value → register value."""
    if d.name == "float16":
        return builder.fpext(builder.bitcast(raw, ir.HalfType()), F32)
    if d.name == "bfloat16":
        return builder.bitcast(builder.shl(builder.zext(raw, I32), ir.Constant(I32, 16)), F32)
    if d.is_bool:
        return builder.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
    return raw


def _narrow(builder, value, d: DType):
    """Register value → memory value (exact: 16-bit float registers are representable)."""
    if d.name == "float16":
        return builder.bitcast(builder.fptrunc(value, ir.HalfType()), I16)
    if d.name == "bfloat16":
        return builder.trunc(builder.lshr(builder.bitcast(value, I32), ir.Constant(I32, 16)), I16)
    if d.is_bool:
        return builder.zext(value, I8)
    return value


def _load(d: DType, lanes: int):
    reg = code_type(d)

    @intrinsic
    def load(typingctx, ptr, offset):
        ret = reg if lanes == 1 else types.UniTuple(reg, lanes)

        def codegen(context, builder, sig, args):
            raw = builder.load(_address(builder, *args, d, lanes), align=d.itemsize * lanes)
            if lanes == 1:
                return _widen(builder, raw, d)
            items = [_widen(builder, element, d) for element in _elements(builder, raw, d, lanes)]
            return context.make_tuple(builder, ret, items)

        return ret(types.uint64, types.int64), codegen

    return load


def _store(d: DType, lanes: int):
    """``st_<dtype>(ptr, offset, value)``; vector stores take a tuple of ``lanes`` values."""
    reg = code_type(d)
    value_type = reg if lanes == 1 else types.UniTuple(reg, lanes)

    @intrinsic
    def store(typingctx, ptr, offset, values):
        def codegen(context, builder, sig, args):
            ptr, offset, vals = args
            if lanes == 1:
                value = _narrow(builder, vals, d)
            else:
                items = [_narrow(builder, builder.extract_value(vals, i), d) for i in range(lanes)]
                value = _words(builder, items, d, lanes)
            builder.store(value, _address(builder, ptr, offset, d, lanes), align=d.itemsize * lanes)
            return context.get_dummy_value()

        return types.void(types.uint64, types.int64, value_type), codegen

    return store


def _round(d: DType):
    """float32 → nearest ``d`` (round to nearest even) → float32."""
    asm = {
        "float16": "cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h;",
        "bfloat16": "cvt.rn.bf16.f32 h, $1; cvt.f32.bf16 $0, h;",
    }

    @intrinsic
    def round_(typingctx, x):
        def codegen(context, builder, sig, args):
            fn = ir.FunctionType(F32, [F32])
            return builder.call(ir.InlineAsm(fn, "{ .reg .b16 h; " + asm[d.name] + " }", "=f,f"), args)

        return types.float32(types.float32), codegen

    return round_


_ATOMIC_ADD_FLOAT = {"float32": nvvmutils.declare_atomic_add_float32, "float64": nvvmutils.declare_atomic_add_float64}


def _atomic_float_max_min(builder, address, value, op: str):
    """``address`` becomes NumPy's maximum/minimum of itself and ``value`` (NaN wins, as in
    the interpreter), by a compare-and-swap loop on the bits: numba's float atomics drop
    NaN. Nothing is written when the stored value already is the result."""
    bits = I32 if value.type == F32 else I64
    word = builder.bitcast(address, bits.as_pointer())
    entry = builder.block
    loop, swap, done = (builder.append_basic_block(f"atomic_{op}_{n}") for n in ("loop", "swap", "done"))
    first = builder.load(word)
    builder.branch(loop)
    builder.position_at_end(loop)
    seen = builder.phi(bits)
    seen.add_incoming(first, entry)
    stored = builder.bitcast(seen, value.type)
    beats = builder.fcmp_ordered(">" if op == "max" else "<", value, stored)
    value_nan, stored_nan = (builder.fcmp_unordered("uno", x, x) for x in (value, stored))
    builder.cbranch(builder.and_(builder.or_(beats, value_nan), builder.not_(stored_nan)), swap, done)
    builder.position_at_end(swap)
    result = builder.cmpxchg(word, seen, builder.bitcast(value, bits), "monotonic", "monotonic")
    seen.add_incoming(builder.extract_value(result, 0), swap)
    builder.cbranch(builder.extract_value(result, 1), done, loop)
    builder.position_at_end(done)


def _atomic(op: str, d: DType):
    reg = code_type(d)

    @intrinsic
    def atomic(typingctx, ptr, offset, value):
        def codegen(context, builder, sig, args):
            ptr, offset, value = args
            address = _address(builder, ptr, offset, d, addrspace=0)
            if d.is_float and op == "add":
                builder.call(_ATOMIC_ADD_FLOAT[d.name](builder.module), (address, value))
            elif d.is_float:
                _atomic_float_max_min(builder, address, value, op)
            else:
                llvm_op = {"add": "add", "max": "max", "min": "min"}[op]
                if d.kind == "u" and op != "add":
                    llvm_op = "u" + llvm_op
                builder.atomic_rmw(llvm_op, address, value, "monotonic")
            return context.get_dummy_value()

        return types.void(types.uint64, types.int64, reg), codegen

    return atomic


if config.ENABLE_CUDASIM:  # numba's CUDA simulator runs kernels as Python: no LLVM intrinsics
    from .cuda_simulated import INTRINSICS
else:
    INTRINSICS = intrinsic_table(_load, _store, _atomic, _round)
globals().update(INTRINSICS)


if not config.ENABLE_CUDASIM:
    select = intrinsic(select_intrinsic)
