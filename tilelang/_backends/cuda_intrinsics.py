"""numba-cuda intrinsics the generated kernels call: masked global loads and stores through
raw pointers (scalar and 16-byte vector, with their lane-by-lane fallback in LLVM), atomics,
and 16-bit float conversions.

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
from numba.cuda import cgutils, nvvmutils
from numba.cuda.core import config
from numba.cuda.extending import intrinsic

from .. import dtypes
from ..dtypes import DType
from .cuda_mma import asm_statement, shared_address
from .numba_source import WRAPPING, intrinsic_table, llvm_math_intrinsic, select_intrinsic, wrapping_intrinsic

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


def _lane_ok(builder, ok, first, last, i: int):
    """Whether lane ``i`` of a group is accessed: ``ok and first <= i < last``."""
    lane = ir.Constant(I32, i)
    inside = builder.and_(builder.icmp_signed("<=", first, lane), builder.icmp_signed("<", lane, last))
    return builder.and_(ok, inside)


def _lanes_ok(builder, ok, first, last, lanes: int):
    """Whether each lane ``i`` of a group is accessed (``ok and first <= i < last``) as bits of
    one mask, each lane's test one AND. For cp.async's fallback: LLVM hoists the lane tests
    into the whole-group path of the pipelined copies, where ``_lane_ok``'s pairs of
    comparisons cost ~50 SASS instructions per 16-byte copy."""
    zero, width, one = ir.Constant(I32, 0), ir.Constant(I32, lanes), ir.Constant(I32, 1)

    def clamped(x):
        x = builder.select(builder.icmp_signed("<", x, zero), zero, x)
        return builder.select(builder.icmp_signed(">", x, width), width, x)

    below = [builder.sub(builder.shl(one, clamped(x)), one) for x in (last, first)]  # lanes under last, first
    mask = builder.select(ok, builder.and_(below[0], builder.not_(below[1])), zero)
    return [builder.icmp_unsigned("!=", builder.and_(mask, ir.Constant(I32, 1 << i)), zero) for i in range(lanes)]


def _whole(builder, ptr, offset, ok, first, last, d: DType, lanes: int):
    """Whether a group moves in one access: every lane in and the address aligned to its bytes."""
    byte = builder.add(ptr, builder.mul(offset, ir.Constant(I64, d.itemsize)))
    aligned = builder.icmp_unsigned(
        "==", builder.and_(byte, ir.Constant(I64, d.itemsize * lanes - 1)), ir.Constant(I64, 0)
    )
    inside = builder.and_(
        builder.icmp_signed("<=", first, ir.Constant(I32, 0)), builder.icmp_signed(">=", last, ir.Constant(I32, lanes))
    )
    return builder.and_(builder.and_(ok, inside), aligned)


def _shared_vector(d: DType, lanes: int):
    """``lds<N>_<type>(buffer, index)``: elements ``index`` to ``index + N - 1`` of a shared
    array as one ``ld.shared.v<N>`` (``index`` a multiple of N, the array so aligned)."""
    ret = types.UniTuple(getattr(types, d.name), lanes)

    @intrinsic
    def load(typingctx, buffer, index):
        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            at = builder.addrspacecast(
                builder.gep(data, [builder.sext(args[1], I64)]), ir.PointerType(data.type.pointee, 3)
            )
            vector = builder.load(builder.bitcast(at, ir.PointerType(ir.VectorType(data.type.pointee, lanes), 3)),
                                  align=lanes * d.itemsize)  # fmt: skip
            return context.make_tuple(
                builder, ret, [builder.extract_element(vector, ir.Constant(I32, i)) for i in range(lanes)]
            )

        return ret(buffer, types.int32), codegen

    return load


def _load(d: DType, lanes: int):
    """``ld_<dtype>(ptr, offset, ok, pad)``: the element, or ``pad`` where not ``ok``;
    ``ld<N>_<dtype>(ptr, offset, ok, first, last, pad)``: a tuple of ``N``, lane ``i`` loaded
    where ``ok and first <= i < last`` — in one access when all are and it is aligned."""
    reg = code_type(d)

    def element(builder, ptr, offset, i, slot):
        at = builder.add(offset, ir.Constant(I64, i)) if i else offset
        builder.store(_widen(builder, builder.load(_address(builder, ptr, at, d), align=d.itemsize), d), slot)

    if lanes == 1:

        @intrinsic
        def load(typingctx, ptr, offset, ok, pad):
            def codegen(context, builder, sig, args):
                ptr, offset, ok, pad = args
                slot = cgutils.alloca_once_value(builder, pad)
                with builder.if_then(ok):
                    element(builder, ptr, offset, 0, slot)
                return builder.load(slot)

            return reg(types.uint64, types.int64, types.boolean, reg), codegen

        return load

    @intrinsic
    def load_vector(typingctx, ptr, offset, ok, first, last, pad):
        ret = types.UniTuple(reg, lanes)

        def codegen(context, builder, sig, args):
            ptr, offset, ok, first, last, pad = args
            slots = [cgutils.alloca_once_value(builder, pad) for _ in range(lanes)]
            with builder.if_else(_whole(builder, ptr, offset, ok, first, last, d, lanes)) as (whole, lanewise):
                with whole:
                    raw = builder.load(_address(builder, ptr, offset, d, lanes), align=d.itemsize * lanes)
                    for slot, item in zip(slots, _elements(builder, raw, d, lanes)):
                        builder.store(_widen(builder, item, d), slot)
                with lanewise:
                    for i, slot in enumerate(slots):
                        with builder.if_then(_lane_ok(builder, ok, first, last, i)):
                            element(builder, ptr, offset, i, slot)
            return context.make_tuple(builder, ret, [builder.load(slot) for slot in slots])

        return ret(types.uint64, types.int64, types.boolean, types.int32, types.int32, reg), codegen

    return load_vector


def _load_words(d: DType, lanes: int):
    """``ld<N>w_<dtype>(ptr, offset, ok, first, last, pad)`` for 16-bit ``d``: as ``ld<N>``,
    but the raw bits, two lanes to a uint32 word (the first in the low half), ``pad`` the
    bits of one element. Nothing is cut out of the words here, so a thread's loads of several
    groups are all in flight before any of their data is used."""
    words = lanes // 2

    @intrinsic
    def load_words(typingctx, ptr, offset, ok, first, last, pad):
        ret = types.UniTuple(types.uint32, words)

        def codegen(context, builder, sig, args):
            ptr, offset, ok, first, last, pad = args
            pad32 = builder.zext(pad, I32)
            fill = builder.or_(pad32, builder.shl(pad32, ir.Constant(I32, 16)))
            slots = [cgutils.alloca_once_value(builder, fill) for _ in range(words)]
            with builder.if_else(_whole(builder, ptr, offset, ok, first, last, d, lanes)) as (whole, lanewise):
                with whole:
                    raw = builder.load(_address(builder, ptr, offset, d, lanes), align=d.itemsize * lanes)
                    for w, slot in enumerate(slots):
                        builder.store(builder.extract_element(raw, ir.Constant(I32, w)), slot)
                with lanewise:
                    for i in range(lanes):
                        with builder.if_then(_lane_ok(builder, ok, first, last, i)):
                            at = builder.add(offset, ir.Constant(I64, i)) if i else offset
                            bits = builder.zext(builder.load(_address(builder, ptr, at, dtypes.uint16), align=2), I32)
                            keep = ir.Constant(I32, 0xFFFF0000 if i % 2 == 0 else 0xFFFF)
                            word = builder.and_(builder.load(slots[i // 2]), keep)
                            shifted = builder.shl(bits, ir.Constant(I32, 16)) if i % 2 else bits
                            builder.store(builder.or_(word, shifted), slots[i // 2])
            return context.make_tuple(builder, ret, [builder.load(slot) for slot in slots])

        return ret(types.uint64, types.int64, types.boolean, types.int32, types.int32, types.uint16), codegen

    return load_words


def _store(d: DType, lanes: int):
    """``st_<dtype>(ptr, offset, ok, value)``; ``st<N>_<dtype>(ptr, offset, ok, first, last,
    values)`` stores the lanes of a tuple of ``N`` as ``ld<N>`` loads them."""
    reg = code_type(d)

    def element(builder, ptr, offset, i, value):
        at = builder.add(offset, ir.Constant(I64, i)) if i else offset
        builder.store(_narrow(builder, value, d), _address(builder, ptr, at, d), align=d.itemsize)

    if lanes == 1:

        @intrinsic
        def store(typingctx, ptr, offset, ok, value):
            def codegen(context, builder, sig, args):
                ptr, offset, ok, value = args
                with builder.if_then(ok):
                    element(builder, ptr, offset, 0, value)
                return context.get_dummy_value()

            return types.void(types.uint64, types.int64, types.boolean, reg), codegen

        return store

    @intrinsic
    def store_vector(typingctx, ptr, offset, ok, first, last, values):
        def codegen(context, builder, sig, args):
            ptr, offset, ok, first, last, vals = args
            items = [builder.extract_value(vals, i) for i in range(lanes)]
            with builder.if_else(_whole(builder, ptr, offset, ok, first, last, d, lanes)) as (whole, lanewise):
                with whole:
                    value = _words(builder, [_narrow(builder, x, d) for x in items], d, lanes)
                    builder.store(value, _address(builder, ptr, offset, d, lanes), align=d.itemsize * lanes)
                with lanewise:
                    for i, item in enumerate(items):
                        with builder.if_then(_lane_ok(builder, ok, first, last, i)):
                            element(builder, ptr, offset, i, item)
            return context.get_dummy_value()

        sig = types.void(types.uint64, types.int64, types.boolean, types.int32, types.int32, types.UniTuple(reg, lanes))
        return sig, codegen

    return store_vector


def _copy_addresses(builder, ptr, base, offset, itemsize: int):
    """The window's corner (``ptr`` plus ``base`` elements: the same for every copy of a
    window, so computed once) and the group's source address from it."""
    corner = builder.add(ptr, builder.mul(base, ir.Constant(I64, itemsize)))
    return corner, builder.add(corner, builder.mul(offset, ir.Constant(I64, itemsize)))


def _async_copy(d: DType):
    """``cp_async16_<dtype>(buffer, index, ptr, base, offset, ok, first, last)``: the 16 bytes
    of lanes ``ptr[base + offset + i]`` (8 of a 16-bit ``d``, 4 of a 32-bit one; ``ok and
    first <= i < last``, else 0) to words ``index`` to ``+ 3`` of a shared 32-bit array,
    16-bit ones as raw bits two to a word. A whole, aligned group is one ``cp.async.cg``
    (16 bytes, asynchronous); any other is copied lane by lane: 32-bit lanes each by a
    4-byte ``cp.async.ca`` (still asynchronous: a float32 matrix with an odd number of
    columns stays pipelined), 16-bit ones loaded and stored now (no cp.async moves 2 bytes)."""
    lanes, halves = 16 // d.itemsize, d.itemsize == 2

    @intrinsic
    def async_copy(typingctx, buffer, index, ptr, base, offset, ok, first, last):
        def codegen(context, builder, sig, args):
            buf, index, ptr, base, offset, ok, first, last = args
            ptr, source = _copy_addresses(builder, ptr, base, offset, d.itemsize)
            words = context.make_array(sig.args[0])(context, builder, buf).data
            with builder.if_else(_whole(builder, ptr, offset, ok, first, last, d, lanes)) as (whole, lanewise):
                with whole:
                    builder.call(_COPY16, [shared_address(context, builder, sig.args[0], buf, index), source, _ONE])
                with lanewise:
                    inside = _lanes_ok(builder, ok, first, last, lanes)
                    if halves:
                        _copy_halves(builder, words, builder.sext(index, I64), ptr, offset, inside)
                    else:
                        to = shared_address(context, builder, sig.args[0], buf, index)
                        for i in range(lanes):
                            four = [
                                builder.add(to, ir.Constant(I32, 4 * i)),
                                builder.add(source, ir.Constant(I64, 4 * i)),
                            ]
                            builder.call(_COPY4, [*four, builder.zext(inside[i], I32)])
            return context.get_dummy_value()

        i32, i64 = types.int32, types.int64
        sig = types.void(buffer, i32, types.uint64, i64, i64, types.boolean, i32, i32)
        return sig, codegen

    return async_copy


def _copy_halves(builder, words, at, ptr, offset, inside):
    """The 8 16-bit lanes at ``offset`` (zeros where not ``inside``) loaded now and stored to
    words ``at`` to ``+ 3``, two to a word, the first low."""
    for w in range(4):
        word = ir.Constant(I32, 0)
        for h in range(2):
            slot = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(16), 0))
            with builder.if_then(inside[2 * w + h]):
                lane = builder.add(offset, ir.Constant(I64, 2 * w + h))
                builder.store(builder.load(_address(builder, ptr, lane, dtypes.uint16), align=2), slot)
            part = builder.zext(builder.load(slot), I32)
            word = builder.or_(word, builder.shl(part, ir.Constant(I32, 16)) if h else part)
        builder.store(word, builder.gep(words, [builder.add(at, ir.Constant(I64, w))]))


_ONE = ir.Constant(I32, 1)
# 16 bytes, or zeros where the last operand is 0 (cp.async's ignore-src predicate)
_COPY4 = ir.InlineAsm(  # (the same, 4 bytes)
    ir.FunctionType(ir.VoidType(), [I32, I64, I32]),
    "{\n\t.reg .pred p;\n\tsetp.eq.u32 p, $2, 0;\n\tcp.async.ca.shared.global [$0], [$1], 4, p;\n\t}",
    "r,l,r,~{memory}",
    True,
)
_COPY16 = ir.InlineAsm(
    ir.FunctionType(ir.VoidType(), [I32, I64, I32]),
    "{\n\t.reg .pred p;\n\tsetp.eq.u32 p, $2, 0;\n\tcp.async.cg.shared.global [$0], [$1], 16, p;\n\t}",
    "r,l,r,~{memory}",
    True,
)


def _whole_copy(itemsize: int):
    """``cp_async16_whole_<itemsize>``: ``cp_async16_<dtype>`` for a window whose groups are each
    whole or empty and 16-byte aligned (``AsyncCopy.aligned``, the array's pointer aligned
    too): one ``cp.async.cg`` of 16 bytes per group, zeros for an empty one, no branch (every
    dtype of that size: raw bits)."""

    @intrinsic
    def whole_copy(typingctx, buffer, index, ptr, base, offset, ok, first, last):
        def codegen(context, builder, sig, args):
            buf, index, ptr, base, offset, ok, first, last = args
            zero = ir.Constant(I32, 0)
            _, source = _copy_addresses(builder, ptr, base, offset, itemsize)
            inside = builder.and_(builder.icmp_signed("<=", first, zero), builder.icmp_signed(">", last, zero))
            read = builder.zext(builder.and_(ok, inside), I32)
            builder.call(_COPY16, [shared_address(context, builder, sig.args[0], buf, index), source, read])
            return context.get_dummy_value()

        i32, i64 = types.int32, types.int64
        return types.void(buffer, i32, types.uint64, i64, i64, types.boolean, i32, i32), codegen

    return whole_copy


_ROUND = {
    "float16": "cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h;",
    "bfloat16": "cvt.rn.bf16.f32 h, $1; cvt.f32.bf16 $0, h;",
}


def _rounded(builder, x, d: DType):
    """float32 → nearest ``d`` (round to nearest even) → float32."""
    fn = ir.FunctionType(F32, [F32])
    return builder.call(ir.InlineAsm(fn, "{ .reg .b16 h; " + _ROUND[d.name] + " }", "=f,f"), [x])


def _float32_of(emit, argument):
    """A factory of one-argument intrinsics per 16-bit float ``d``: ``emit(builder, x, d)``,
    a float32, from an ``argument``-typed ``x``."""

    def make(d: DType):
        @intrinsic
        def fn(typingctx, x):
            def codegen(context, builder, sig, args):
                return emit(builder, args[0], d)

            return types.float32(argument), codegen

        return fn

    return make


_round = _float32_of(_rounded, types.float32)  # round_<d>: float32 -> nearest d, as float32
_value = _float32_of(_widen, types.uint16)  # <d>_value: raw bits -> float32


def _odd_asm(ptx_type: str, constraint: str, back: str, differs: str):
    """``x`` → float32 rounded to odd: toward zero (``cvt.rz``), the last bit set where that was
    inexact. Rounding it to a 16-bit float is then correctly rounded, once, on every sm."""
    return ir.InlineAsm(
        ir.FunctionType(F32, [ir.IntType(int(ptx_type[1:])) if constraint in "lr" else F64]),
        "{ .reg .pred p; .reg .b32 u; .reg ." + ptx_type + " b; "
        f"cvt.rz.f32.{ptx_type} $0, $1; {back}.{ptx_type}.f32 b, $0; setp.{differs}.{ptx_type} p, b, $1; "
        "mov.b32 u, $0; @p or.b32 u, u, 1; mov.b32 $0, u; }",
        f"=f,{constraint}",
    )


@intrinsic
def float32_odd_float(typingctx, x):
    def codegen(context, builder, sig, args):  # (a NaN stays NaN: unordered counts as inexact)
        return builder.call(_odd_asm("f64", "d", "cvt", "neu"), args)

    return types.float32(types.float64), codegen


@intrinsic
def float32_odd_int(typingctx, x):
    if not isinstance(x, types.Integer) or x.bitwidth not in (32, 64):
        return None
    ptx_type = f"{'s' if x.signed else 'u'}{x.bitwidth}"

    def codegen(context, builder, sig, args):  # back to the integer exactly: |rz(x)| <= |x| fits
        return builder.call(_odd_asm(ptx_type, "l" if x.bitwidth == 64 else "r", "cvt.rzi", "ne"), args)

    return types.float32(x), codegen


_ATOMIC_ADD_FLOAT = {"float32": nvvmutils.declare_atomic_add_float32, "float64": nvvmutils.declare_atomic_add_float64}


def _combined(builder, op: str, d: DType, old, value):
    """NumPy's add, maximum or minimum of two registers of dtype ``d``: integers wrap, a
    NaN wins, 16-bit floats are rounded once."""
    if d.is_float and op == "add":
        total = builder.fadd(old, value)
        return _rounded(builder, total, d) if d.bits == 16 else total
    if d.is_float:
        takes = builder.or_(builder.fcmp_ordered(">" if op == "max" else "<", value, old), _is_nan(builder, value))
        return builder.select(builder.and_(takes, builder.not_(_is_nan(builder, old))), value, old)
    if op == "add":
        return builder.add(old, value)
    beats = (builder.icmp_signed if d.kind == "i" else builder.icmp_unsigned)(">" if op == "max" else "<", value, old)
    return builder.select(beats, value, old)


def _is_nan(builder, x):
    return builder.fcmp_unordered("uno", x, x)


def _compare_and_swap_loop(builder, word, update):
    """``*word = update(*word)`` atomically: retried until no other write came between the
    read and the compare-and-swap."""
    entry = builder.block
    loop, done = builder.append_basic_block("cas_loop"), builder.append_basic_block("cas_done")
    first = builder.load(word)
    builder.branch(loop)
    builder.position_at_end(loop)
    seen = builder.phi(word.type.pointee)
    seen.add_incoming(first, entry)
    if word.type.pointee == I16:  # (NVVM's cmpxchg takes 32- and 64-bit words only)
        fn = ir.FunctionType(I16, [I64, I16, I16])
        asm = ir.InlineAsm(fn, "atom.cas.b16 $0, [$1], $2, $3;", "=h,l,h,h,~{memory}", side_effect=True)
        old = builder.call(asm, [builder.ptrtoint(word, I64), seen, update(seen)])
        swapped = builder.icmp_unsigned("==", old, seen)
    else:
        result = builder.cmpxchg(word, seen, update(seen), "monotonic", "monotonic")
        old, swapped = builder.extract_value(result, 0), builder.extract_value(result, 1)
    seen.add_incoming(old, builder.block)
    builder.cbranch(swapped, done, loop)
    builder.position_at_end(done)


def _atomic(op: str, d: DType):
    """``atomic_<op>_<dtype>(ptr, offset, value)``: the hardware's atomics for 32- and 64-bit
    integers and float add; compare-and-swap loops for float max/min (numba's drop NaN),
    16-bit types (``atom.cas.b16``, the element alone) and 8-bit ones (no 8-bit atomics: on
    the aligned 32-bit word holding the element, whose other bytes it leaves as they are)."""
    reg = code_type(d)

    @intrinsic
    def atomic(typingctx, ptr, offset, value):
        def codegen(context, builder, sig, args):
            ptr, offset, value = args
            address = _address(builder, ptr, offset, d, addrspace=0)
            if d.itemsize == 1:
                byte = builder.ptrtoint(address, I64)
                word = builder.inttoptr(builder.and_(byte, ir.Constant(I64, ~3)), I32.as_pointer())
                shift = builder.trunc(builder.shl(builder.and_(byte, ir.Constant(I64, 3)), ir.Constant(I64, 3)), I32)
                field = builder.shl(ir.Constant(I32, (1 << d.bits) - 1), shift)

                def update(old):
                    element = _widen(builder, builder.trunc(builder.lshr(old, shift), ir.IntType(d.bits)), d)
                    new = builder.zext(_narrow(builder, _combined(builder, op, d, element, value), d), I32)
                    return builder.or_(builder.and_(old, builder.not_(field)), builder.shl(new, shift))

                _compare_and_swap_loop(builder, word, update)
            elif d.itemsize == 2:
                word = builder.bitcast(address, I16.as_pointer())

                def update(old):
                    return _narrow(builder, _combined(builder, op, d, _widen(builder, old, d), value), d)

                _compare_and_swap_loop(builder, word, update)
            elif d.is_float and op == "add":
                builder.call(_ATOMIC_ADD_FLOAT[d.name](builder.module), (address, value))
            elif d.is_float:
                bits = ir.IntType(d.bits)
                word = builder.bitcast(address, bits.as_pointer())

                def update(old):
                    return builder.bitcast(_combined(builder, op, d, builder.bitcast(old, value.type), value), bits)

                _compare_and_swap_loop(builder, word, update)
            else:
                llvm_op = op if d.kind == "i" or op == "add" else "u" + op
                builder.atomic_rmw(llvm_op, address, value, "monotonic")
            return context.get_dummy_value()

        return types.void(types.uint64, types.int64, reg), codegen

    return atomic


if config.ENABLE_CUDASIM:  # numba's CUDA simulator runs kernels as Python: no LLVM intrinsics
    from .cuda_simulated import INTRINSICS
else:
    INTRINSICS = intrinsic_table(_load, _load_words, _store, _atomic, _round, _value)
globals().update(INTRINSICS)


if not config.ENABLE_CUDASIM:
    from .cuda_arith import div_full_f32, div_rn_f32, ex2_ftz_f32, floordiv_int, max_nan_f32, min_nan_f32, mod_int  # noqa: F401 - called by generated kernels
    from .cuda_mma import MMA_INTRINSICS  # (the simulator refuses kernels using tensor cores)
    from .cuda_tma import (  # noqa: F401 - called by generated kernels
        mbarrier_expect_tx,
        mbarrier_init,
        mbarrier_init_fence,
        mbarrier_inval,
        mbarrier_try_wait,
        tma_load,
    )

    globals().update(MMA_INTRINSICS)
    copied = (dtypes.float16, dtypes.bfloat16, dtypes.float32)
    globals().update({f"cp_async16_{d.name}": _async_copy(d) for d in copied})
    globals().update({f"cp_async16_whole_{n}": _whole_copy(n) for n in (2, 4)})
    globals().update({f"cp_async_wait_{n}": asm_statement(f"cp.async.wait_group {n};") for n in range(8)})
    cp_async_commit = asm_statement("cp.async.commit_group;")
    globals().update({f"lds{n}_{d.name}": _shared_vector(d, n) for d in (dtypes.float32,) for n in (2, 4)})
    select = intrinsic(select_intrinsic)
    floor = intrinsic(llvm_math_intrinsic("floor"))
    ceil = intrinsic(llvm_math_intrinsic("ceil"))
    globals().update({f"wrapping_{name}": intrinsic(wrapping_intrinsic(name)) for name in WRAPPING})
