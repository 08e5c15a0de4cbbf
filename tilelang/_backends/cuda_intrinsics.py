"""Memory accesses as LLVM IR: masked global loads and stores through raw pointers (scalar
and 16-byte vector, with their lane-by-lane fallback) and atomics, for both backends (given
the ``host`` target on the CPU: address space 0, no NVVM intrinsic or PTX); and for the GPU,
asynchronous copies to shared memory and 16- and 8-bit float rounding (``cvt``).

Each function takes an ``llvmlite`` IR builder and the LLVM values of its operands
(pointers ``i64``, element offsets ``i64``, masks ``i1``, a group's first and last lanes
``i32``) and builds the access. Arrays reach a kernel as a data pointer plus int64 shapes
and strides, so every access is ``ptr + offset * itemsize``, loaded through the global
address space (``ld.global``) with the alignment the access has: a vector load of 16
bytes is one ``ld.global.v4.b32``-class instruction. 16- and 8-bit floats live in
float32 registers: loads widen, stores narrow (exactly: values are kept representable; a
float8 store also rounds a float32 given it, two at a time), and :func:`rounded` rounds a
float32 result to the narrow type (``cvt.rn``).
"""

from __future__ import annotations

import functools
import struct

from llvmlite import ir

from .. import dtypes
from ..dtypes import DType

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
MEMORY = {"bool": I8, "float16": I16, "bfloat16": I16, "float32": F32, "float64": F64}


def memory_type(d: DType):
    return MEMORY.get(d.name) or ir.IntType(d.bits)


def local(builder, value):
    """A stack slot holding ``value`` (in the entry block, where NVVM promotes it to a register)."""
    with builder.goto_entry_block():
        slot = builder.alloca(value.type)
    builder.store(value, slot)
    return slot


def _byte(builder, ptr, offset, itemsize: int):
    """The address (an ``i64``) of element ``offset`` of ``itemsize`` bytes from ``ptr``."""
    return builder.add(ptr, builder.mul(offset, ir.Constant(I64, itemsize)))


def _address(builder, ptr, offset, d: DType, lanes=1, addrspace=1):
    return builder.inttoptr(_byte(builder, ptr, offset, d.itemsize), _access_type(d, lanes).as_pointer(addrspace))


def _access_type(d: DType, lanes: int):
    """What one access moves: vectors of narrow elements as 32-bit words (so 8 halves are
    one ``ld.global.v4.b32``, not two ``v4.u16``); one element as itself."""
    if lanes == 1:
        return memory_type(d)
    if d.itemsize < 4 and d.itemsize * lanes >= 4:
        return ir.VectorType(I32, d.itemsize * lanes // 4)
    return ir.VectorType(memory_type(d), lanes)


def _elements(builder, raw, d: DType, lanes: int):
    """The elements of a vector access. Narrow elements are cut out of 32-bit words with
    shifts (a bitcast to a vector of them lets LLVM split the access into narrower ones)."""
    if raw.type.element == memory_type(d):
        return [builder.extract_element(raw, ir.Constant(I32, i)) for i in range(lanes)]
    per_word, bits = 4 // d.itemsize, d.itemsize * 8
    out = []
    for w in range(lanes // per_word):
        word = builder.extract_element(raw, ir.Constant(I32, w))
        for k in range(per_word):
            part = builder.lshr(word, ir.Constant(I32, k * bits)) if k else word
            out.append(builder.trunc(part, ir.IntType(bits)))
    return out


def vector(builder, values: list):
    """``values`` (of one LLVM type) as one vector of them, for a vector access."""
    value = ir.Constant(ir.VectorType(values[0].type, len(values)), ir.Undefined)
    for i, v in enumerate(values):
        value = builder.insert_element(value, v, ir.Constant(I32, i))
    return value


def _words(builder, values, d: DType, lanes: int, host):
    """The inverse of :func:`_elements`: register ``values`` narrowed to ``d`` and packed into
    the access's vector."""
    if _access_type(d, lanes).element == memory_type(d):
        return vector(builder, narrowed(builder, values, d, host))
    return vector(builder, narrowed_words(builder, values, d, host))


def packed_word(builder, parts):
    """The integers ``parts`` (two i16 or four i8) in one ``i32``, the first lowest."""
    word = builder.zext(parts[0], I32)
    for k, part in enumerate(parts[1:], 1):
        shift = ir.Constant(I32, k * part.type.width)
        word = builder.or_(word, builder.shl(builder.zext(part, I32), shift))
    return word


def widen(builder, raw, d: DType, host=None):
    """Memory value → register value (``host``: the host target, which converts float16 and
    float8 in integer arithmetic: no host instruction does everywhere)."""
    if host and d.is_narrow_float and d.name != "bfloat16":
        return host.from_bits(raw, d)
    if d.is_float8:
        return _float8_values(builder, builder.zext(raw, I16), d)[0]
    if d.name == "float16":
        return builder.fpext(builder.bitcast(raw, ir.HalfType()), F32)
    if d.name == "bfloat16":
        return builder.bitcast(builder.shl(builder.zext(raw, I32), ir.Constant(I32, 16)), F32)
    if d.is_bool:
        return builder.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
    return raw


def narrow(builder, value, d: DType, host=None):
    """Register value → memory value (exact: 16- and 8-bit float registers are representable)."""
    if host and d.is_narrow_float and d.name != "bfloat16":
        return host.bits(value, d)
    if d.is_float8:
        return builder.trunc(_float8_pair(builder, value, ir.Constant(F32, 0.0), d), I8)
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
    """Whether a group moves in one access: every lane in and the address aligned to its bytes
    (without ``first``, a group known whole or empty and aligned: where ``ok``)."""
    if first is None:
        return ok
    byte = _byte(builder, ptr, offset, d.itemsize)
    aligned = builder.icmp_unsigned(
        "==", builder.and_(byte, ir.Constant(I64, d.itemsize * lanes - 1)), ir.Constant(I64, 0)
    )
    return builder.and_(_inside(builder, ok, first, last, lanes), aligned)


def _inside(builder, ok, first, last, lanes: int):
    """Whether every lane of a group is accessed: ``ok and first <= 0 and last >= lanes``."""
    inside = builder.and_(
        builder.icmp_signed("<=", first, ir.Constant(I32, 0)), builder.icmp_signed(">=", last, ir.Constant(I32, lanes))
    )
    return builder.and_(ok, inside)


def _lane_by_lane(builder, ok, first, last, lanes: int, move):
    """``move(i)`` for each lane ``i``, the lanes moved one by one: with no test at all
    where every lane is in (a group inside its row but not aligned, as every group of a
    row of 4095 float32s that starts off 16 bytes: a load each, no branch), else each lane
    under its own test."""
    with builder.if_else(_inside(builder, ok, first, last, lanes)) as (every, some):
        with every:
            for i in range(lanes):
                move(i)
        with some:
            for i in range(lanes):
                with builder.if_then(_lane_ok(builder, ok, first, last, i)):
                    move(i)


def _load_element(builder, ptr, offset, i, slot, d: DType, host):
    at = builder.add(offset, ir.Constant(I64, i)) if i else offset
    raw = builder.load(_address(builder, ptr, at, d, 1, _space(host)), align=d.itemsize)
    builder.store(widen(builder, raw, d, host), slot)


def _space(host) -> int:
    """Global memory's address space: NVPTX's global (1), or the host's only one."""
    return 0 if host else 1


def load(builder, d: DType, ptr, offset, ok, pad, host=None):
    """The element ``ptr[offset]`` of dtype ``d``, or ``pad`` where not ``ok`` (``host``: the
    host target where the code runs on the CPU)."""
    slot = local(builder, pad)
    with builder.if_then(ok):
        _load_element(builder, ptr, offset, 0, slot, d, host)
    return builder.load(slot)


# a thread's load of 16-bit words from up to PREDICATED groups, each whole or empty, in a block of
# up to PREDICATED_THREADS threads, is one predicated ld.global a group with no branch: ptxas then
# places each load where it likes. On the H200 that took a bf16 layernorm's weights and biases from
# 78 registers to 62 (6 -> 8 blocks an SM; 0.0723 -> 0.0701 ms) and softmax, rmsnorm, layernorm bf16
# at 512 threads 5-15% faster, but it issued a float32 layernorm's (weight, bias) pairs each next to
# its use, one latency after another (4096 wide: 0.0377 -> 0.0389 ms at 128 threads, 0.0407 ->
# 0.0492 at 512; 8192 wide at 512: 0.264 -> 0.435, registers 64 -> 79), and an 8192-wide bf16
# rmsnorm at 512 threads 0.0387 -> 0.0449 (registers 40 -> 48)
PREDICATED, PREDICATED_THREADS = 4, 256
# the most groups of one access tested together: every test is made before the first group
# moves, and a matmul epilogue's 32 groups held so many values that its stores spilled
TOGETHER = 8


def load_elements(builder, d: DType, ptr, elements, pads, host=None) -> list:
    """Each ``ptr[offset]`` of ``elements`` (``(offset, ok)``) where ``ok``, else its pad. Up
    to :data:`TOGETHER` at a time are loaded under one test of all their ``ok``, with no
    branch between them: their addresses are then one register and constant offsets, where
    a branch around each load had its address computed afresh in it (a row of 4095 float32s
    read lane by lane: ~7 instructions a load)."""
    slots = [local(builder, pad) for pad in pads]

    def move(g):
        raw = builder.load(_address(builder, ptr, elements[g][0], d, 1, _space(host)), align=d.itemsize)
        builder.store(widen(builder, raw, d, host), slots[g])

    _move_in_chunks(builder, [ok for _, ok in elements], move)
    return [builder.load(slot) for slot in slots]


def store_elements(builder, d: DType, ptr, elements, values, host=None):
    """Each ``ptr[offset] = value`` of ``elements`` (``(offset, ok)``) where ``ok``, chunked as
    :func:`load_elements` loads."""

    def move(g):
        address = _address(builder, ptr, elements[g][0], d, 1, _space(host))
        builder.store(narrow(builder, values[g], d, host), address, align=d.itemsize)

    _move_in_chunks(builder, [ok for _, ok in elements], move)


def _move_in_chunks(builder, oks, move):
    for start in range(0, len(oks), TOGETHER):
        chunk = oks[start : start + TOGETHER]
        _move_groups(builder, chunk, lambda g, start=start: move(start + g), None)


def load_vectors(builder, d: DType, lanes: int, ptr, groups, pads, host=None, words=False, threads=None) -> list:
    """Each group's lanes ``ptr[offset + i]`` (``groups``: ``(offset, ok, first, last)``),
    loaded where ``ok and first <= i < last``, else the group's pad: in one access where all
    lanes are and the address is aligned to the group's bytes. With ``words`` (16-bit ``d``)
    the raw bits come back two lanes to a uint32 word (the first in the low half), nothing
    cut out of them, so a thread's loads of several groups are all in flight before any of
    their data is used; such groups, each whole or empty (an aligned array's), with constant
    pads, are each one predicated load (:data:`PREDICATED`; ``threads``: the block's).
    Otherwise, when every group of the thread is whole, all are loaded under that one test
    without a branch between them: a test and branch around each 16-bit group made a
    bfloat16 layernorm 18-29% slower on the H200."""
    width = lanes // 2 if words else lanes
    unit = dtypes.uint16 if words else d
    if words and host is None and _predicable(groups, pads, threads):
        loaded = [_predicated_words(builder, ptr, group[0], group[1], pad, width) for group, pad in zip(groups, pads)]
        return [word for group_words in loaded for word in group_words]
    slots = []
    for pad in pads:
        if words:
            pad32 = builder.zext(pad, I32)
            pad = builder.or_(pad32, builder.shl(pad32, ir.Constant(I32, 16)))
        slots.append([local(builder, pad) for _ in range(width)])

    def load_whole(g):
        raw = builder.load(_address(builder, ptr, groups[g][0], unit, lanes, _space(host)), align=unit.itemsize * lanes)
        if words:
            items = [builder.extract_element(raw, ir.Constant(I32, w)) for w in range(width)]
        else:
            items = _widened(builder, _elements(builder, raw, d, lanes), d, host)
        for slot, item in zip(slots[g], items):
            builder.store(item, slot)

    def lanewise(g):
        _load_lanes(builder, d, lanes, ptr, *groups[g], slots[g], host, words)

    wholes = [_whole(builder, ptr, *group, unit, lanes) for group in groups]
    _move_groups(builder, wholes, load_whole, lanewise if groups[0][2] is not None else None)
    return [builder.load(slot) for group_slots in slots for slot in group_slots]


def _predicable(groups, pads, threads) -> bool:
    whole_or_empty = groups[0][2] is None  # (no first and last lanes)
    few = len(groups) <= PREDICATED and threads is not None and threads <= PREDICATED_THREADS
    return whole_or_empty and few and all(isinstance(p, ir.Constant) for p in pads)


def _predicated_words(builder, ptr, offset, ok, pad, n: int) -> list:
    """The ``n`` 32-bit words of 16-bit lanes at ``ptr + offset`` (in lanes) where ``ok``, else
    words of two ``pad`` bits (a constant): one predicated ``ld.global``, the pad moved into its
    registers first (as Triton loads)."""
    fill = (int(pad.constant) & 0xFFFF) * 0x10001
    outs = ", ".join(f"${i}" for i in range(n))
    vec, regs = (f".v{n}", "{" + outs + "}") if n > 1 else ("", outs)
    text = "".join(f"mov.b32 ${i}, {fill};\n\t" for i in range(n)) + f"@${n + 1} ld.global{vec}.b32 {regs}, [${n}];"
    result = ir.LiteralStructType([I32] * n) if n > 1 else I32
    asm = ir.InlineAsm(ir.FunctionType(result, [I64, ir.IntType(1)]), text, ",".join(["=r"] * n + ["l", "b"]), True)
    got = builder.call(asm, [_byte(builder, ptr, offset, 2), ok])
    return [builder.extract_value(got, i) for i in range(n)] if n > 1 else [got]


def _move_groups(builder, wholes, whole, lanewise):
    """Group ``g`` moved by ``whole(g)`` where ``wholes[g]``, else by ``lanewise(g)`` (None:
    groups are whole or empty, nothing to move lane by lane). When every group is whole (up
    to :data:`TOGETHER`), all move under that one test with no branch between them;
    otherwise group by group."""

    def each():
        for g, test in enumerate(wholes):
            if lanewise is None:
                with builder.if_then(test):
                    whole(g)
                continue
            with builder.if_else(test) as (one_access, lanes):
                with one_access:
                    whole(g)
                with lanes:
                    lanewise(g)

    if not 1 < len(wholes) <= TOGETHER:
        each()
        return
    with builder.if_else(functools.reduce(builder.and_, wholes)) as (all_whole, some_not):
        with all_whole:
            for g in range(len(wholes)):
                whole(g)
        with some_not:
            each()


def _load_lanes(builder, d, lanes, ptr, offset, ok, first, last, slots, host, words):
    """The lane-by-lane load of one group into its ``slots``, each lane where it is accessed."""

    def move(i):
        if not words:
            _load_element(builder, ptr, offset, i, slots[i], d, host)
            return
        at = builder.add(offset, ir.Constant(I64, i)) if i else offset
        raw = builder.load(_address(builder, ptr, at, dtypes.uint16, 1, _space(host)), align=2)
        bits = builder.zext(raw, I32)
        keep = ir.Constant(I32, 0xFFFF0000 if i % 2 == 0 else 0xFFFF)
        word = builder.and_(builder.load(slots[i // 2]), keep)
        shifted = builder.shl(bits, ir.Constant(I32, 16)) if i % 2 else bits
        builder.store(builder.or_(word, shifted), slots[i // 2])

    _lane_by_lane(builder, ok, first, last, lanes, move)


def _store_element(builder, ptr, offset, i, value, d: DType, host):
    at = builder.add(offset, ir.Constant(I64, i)) if i else offset
    address = _address(builder, ptr, at, d, 1, _space(host))
    builder.store(narrow(builder, value, d, host), address, align=d.itemsize)


def store_vectors(builder, d: DType, lanes: int, ptr, groups, values, host=None, words=False):
    """Each group's ``lanes`` of ``values`` stored as :func:`load_vectors` loads them (with
    ``words``, ``values`` are uint32 words of two 16-bit lanes each, the first low)."""
    width = lanes // 2 if words else lanes
    parts = [values[g * width : (g + 1) * width] for g in range(len(groups))]

    def store_whole(g):
        if words:
            value = vector(builder, parts[g])
        else:
            value = _words(builder, parts[g], d, lanes, host)
        builder.store(value, _address(builder, ptr, groups[g][0], d, lanes, _space(host)), align=d.itemsize * lanes)

    def lanewise(g):
        offset, ok, first, last = groups[g]

        def move(i):
            if not words:
                _store_element(builder, ptr, offset, i, parts[g][i], d, host)
                return
            word = parts[g][i // 2]
            half = builder.trunc(builder.lshr(word, ir.Constant(I32, 16)) if i % 2 else word, I16)
            _store_element(builder, ptr, offset, i, half, dtypes.uint16, host)

        _lane_by_lane(builder, ok, first, last, lanes, move)

    wholes = [_whole(builder, ptr, *group, d, lanes) for group in groups]
    _move_groups(builder, wholes, store_whole, lanewise if groups[0][2] is not None else None)


def _copy_source(builder, ptr, base, offset, itemsize: int):
    """The window's corner (``ptr`` plus ``base`` elements: the same for every copy of a
    window, so computed once) and the group's source address from it."""
    corner = _byte(builder, ptr, base, itemsize)
    return corner, _byte(builder, corner, offset, itemsize)


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


def async_copy(builder, d: DType, words, to, ptr, base, offset, ok, first, last):
    """The 16 bytes of lanes ``ptr[base + offset + i]`` (16 of an 8-bit ``d``, 8 of a 16-bit
    one, 4 of a 32-bit one; ``ok and first <= i < last``, else 0) to the shared words at
    ``words`` (an ``i32 addrspace(3)*``; ``to`` its 32-bit shared address), narrower ones as
    raw bits two (four) to a word. A whole, aligned group is one ``cp.async.cg`` (16 bytes,
    asynchronous); any other is copied lane by lane: 32-bit lanes each by a 4-byte
    ``cp.async.ca`` (still asynchronous: a float32 matrix with an odd number of columns stays
    pipelined), narrower ones loaded and stored now (no cp.async moves 1 or 2 bytes)."""
    lanes = 16 // d.itemsize
    ptr, source = _copy_source(builder, ptr, base, offset, d.itemsize)
    with builder.if_else(_whole(builder, ptr, offset, ok, first, last, d, lanes)) as (whole, lanewise):
        with whole:
            builder.call(_COPY16, [to, source, _ONE])
        with lanewise:
            inside = _lanes_ok(builder, ok, first, last, lanes)
            if d.itemsize < 4:
                _copy_narrow(builder, words, ptr, offset, inside, d.itemsize)
            else:
                for i in range(lanes):
                    four = [builder.add(to, ir.Constant(I32, 4 * i)), builder.add(source, ir.Constant(I64, 4 * i))]
                    builder.call(_COPY4, [*four, builder.zext(inside[i], I32)])


def _copy_narrow(builder, words, ptr, offset, inside, itemsize: int):
    """The 16 bytes of 8- or 16-bit lanes at ``offset`` (zeros where not ``inside``) loaded
    now and stored to the 4 words at ``words``, ``4 / itemsize`` to a word, the first lowest."""
    per, raw = 4 // itemsize, dtypes.unsigned(8 * itemsize)
    for w in range(4):
        parts = []
        for h in range(per):
            slot = local(builder, ir.Constant(ir.IntType(8 * itemsize), 0))
            with builder.if_then(inside[per * w + h]):
                lane = builder.add(offset, ir.Constant(I64, per * w + h))
                builder.store(builder.load(_address(builder, ptr, lane, raw), align=itemsize), slot)
            parts.append(builder.load(slot))
        builder.store(packed_word(builder, parts), builder.gep(words, [ir.Constant(I32, w)]))


def whole_copy(builder, itemsize: int, to, ptr, base, offset, ok, first, last):
    """:func:`async_copy` for a window whose groups are each whole or empty and 16-byte aligned
    (``AsyncCopy.aligned``, the array's pointer aligned too): one ``cp.async.cg`` of 16 bytes
    per group, zeros for an empty one, no branch."""
    zero = ir.Constant(I32, 0)
    _, source = _copy_source(builder, ptr, base, offset, itemsize)
    inside = builder.and_(builder.icmp_signed("<=", first, zero), builder.icmp_signed(">", last, zero))
    builder.call(_COPY16, [to, source, builder.zext(builder.and_(ok, inside), I32)])


# (inline PTX, not fptrunc/fpext: seeing those, LLVM shrinks a rounded float32 op to a half one,
# `mul.f16` with no rounding modifier, which ptxas may fuse with an add: one rounding where a
# 16-bit `a * b + c` rounds twice, docs/dtypes.md)
_ROUND = {
    "float16": "cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h;",
    "bfloat16": "cvt.rn.bf16.f32 h, $1; cvt.f32.bf16 $0, h;",
}


# the PTX names of the float8 types, two to a 16-bit register
_F8X2 = {"float8_e4m3fn": "e4m3x2", "float8_e5m2": "e5m2x2"}
# past these magnitudes float32 rounds to NaN (e4m3fn: no infinity) or infinity (e5m2), as in
# ml_dtypes and torch; cvt.rn.satfinite, the only conversion to float8, gives the largest finite
# value of the sign instead, whose bits are one less (0x7E: 0x7F NaN; 0x7B: 0x7C infinity)
F8_PAST = {"float8_e4m3fn": ("gt", 464.0), "float8_e5m2": ("ge", 61440.0)}  # |x| `compare` the limit


def _float8_pair(builder, lo, hi, d: DType):
    """float32s ``lo`` and ``hi`` rounded to the nearest float8 ``d`` (ties to even) by one
    ``cvt.rn.satfinite``: their bits in one ``i16``, ``lo``'s low. A byte whose value was past
    the range gets 1 added by a predicated add (a NaN fails the ordered test): 2.5
    instructions an element where selects of the bits and their merge took 3.5."""
    fn = ir.FunctionType(I16, [F32, F32])
    compare, limit = F8_PAST[d.name]
    past = f"{compare}.f32 o, a, 0f{struct.unpack('<I', struct.pack('<f', limit))[0]:08X}"
    text = (
        "{\n\t.reg .pred o;\n\t.reg .f32 a;\n\t"
        f"cvt.rn.satfinite.{_F8X2[d.name]}.f32 $0, $1, $2;\n\t"  # (the first operand: the high byte)
        f"abs.f32 a, $1;\n\tsetp.{past};\n\t@o add.u16 $0, $0, 256;\n\t"
        f"abs.f32 a, $2;\n\tsetp.{past};\n\t@o add.u16 $0, $0, 1;\n\t}}"
    )
    return builder.call(ir.InlineAsm(fn, text, "=h,f,f"), [hi, lo])


def _float8_values(builder, pair, d: DType):
    """The float32 values of two float8 ``d`` in an ``i16`` (the first low), exactly: one
    ``cvt.rn.f16x2`` to two float16s."""
    fn = ir.FunctionType(I32, [I16])
    halves = builder.call(ir.InlineAsm(fn, f"cvt.rn.f16x2.{_F8X2[d.name]} $0, $1;", "=r,h"), [pair])
    parts = (builder.trunc(halves, I16), builder.trunc(builder.lshr(halves, ir.Constant(I32, 16)), I16))
    return [builder.fpext(builder.bitcast(h, ir.HalfType()), F32) for h in parts]


def narrowed(builder, values, d: DType, host):
    """:func:`narrow` of each of ``values``; float8 two at a time (one ``cvt`` a pair)."""
    if host or not d.is_float8 or len(values) % 2:
        return [narrow(builder, v, d, host) for v in values]
    halves = ((pair, builder.lshr(pair, ir.Constant(I16, 8))) for pair in _float8_pairs(builder, values, d))
    return [builder.trunc(b, I8) for half in halves for b in half]


def narrowed_words(builder, values, d: DType, host):
    """``values`` narrowed to the 8- or 16-bit ``d`` and packed into 32-bit words, the first
    lowest; float8 on the device a ``cvt`` pair to each half word (bytes cut out of the pairs
    and put back took ~2 more instructions an element: LLVM does not see they stay where
    they are)."""
    if host or not d.is_float8 or len(values) % 4:
        per = 4 // d.itemsize
        parts = narrowed(builder, values, d, host)
        return [packed_word(builder, parts[w : w + per]) for w in range(0, len(parts), per)]
    pairs = _float8_pairs(builder, values, d)
    return [packed_word(builder, pairs[w : w + 2]) for w in range(0, len(pairs), 2)]


def _float8_pairs(builder, values, d: DType) -> list:
    """:func:`_float8_pair` of values 0 and 1, 2 and 3, ... (an even number of them)."""
    return [_float8_pair(builder, lo, hi, d) for lo, hi in zip(values[::2], values[1::2])]


def _widened(builder, raws, d: DType, host):
    """:func:`widen` of each of ``raws``; float8 two at a time."""
    if host or not d.is_float8 or len(raws) % 2:
        return [widen(builder, r, d, host) for r in raws]
    pairs = (builder.or_(builder.zext(lo, I16), builder.shl(builder.zext(hi, I16), ir.Constant(I16, 8)))
             for lo, hi in zip(raws[::2], raws[1::2]))  # fmt: skip
    return [x for pair in pairs for x in _float8_values(builder, pair, d)]


def rounded(builder, x, d: DType):
    """float32 → nearest ``d`` (round to nearest even) → float32."""
    if d.bits == 8:
        return widen(builder, narrow(builder, x, d), d)
    fn = ir.FunctionType(F32, [F32])
    return builder.call(ir.InlineAsm(fn, "{ .reg .b16 h; " + _ROUND[d.name] + " }", "=f,f"), [x])


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


def float32_odd(builder, x, d: DType):
    """A float64 or a 32- or 64-bit integer ``x`` of dtype ``d`` → float32 rounded to odd (a
    NaN stays NaN: unordered counts as inexact; an integer goes back exactly: |rz(x)| <= |x|)."""
    if d.is_float:
        return builder.call(_odd_asm("f64", "d", "cvt", "neu"), [x])
    ptx_type = f"{'s' if d.kind == 'i' else 'u'}{d.bits}"
    return builder.call(_odd_asm(ptx_type, "l" if d.bits == 64 else "r", "cvt.rzi", "ne"), [x])


def _combined(builder, op: str, d: DType, old, operands, host):
    """The new value of an element holding ``old`` (registers of dtype ``d``) under ``op`` with
    its ``operands`` (cas: the compared value, then the new one), as ``primitives.ATOMIC``:
    integers wrap, a NaN wins a max or min, 16-bit floats are rounded once."""
    value = operands[-1]
    if op == "xchg":
        return value
    if op == "cas":  # (integers only)
        return builder.select(builder.icmp_unsigned("==", old, operands[0]), value, old)
    if op in ("and", "or"):
        return getattr(builder, op + "_")(old, value)
    if op == "xor":
        return builder.xor(old, value)
    if d.is_float and op == "add":
        total = builder.fadd(old, value)
        if d.bits != 16:
            return total
        return host.rounded(total, d) if host else rounded(builder, total, d)
    if d.is_float:
        takes = builder.or_(builder.fcmp_ordered(">" if op == "max" else "<", value, old), _is_nan(builder, value))
        return builder.select(builder.and_(takes, builder.not_(_is_nan(builder, old))), value, old)
    if op == "add":
        return builder.add(old, value)
    beats = (builder.icmp_signed if d.kind == "i" else builder.icmp_unsigned)(">" if op == "max" else "<", value, old)
    return builder.select(beats, value, old)


def _is_nan(builder, x):
    return builder.fcmp_unordered("uno", x, x)


def _compare_and_swap_loop(builder, word, update, host):
    """``*word = update(*word)`` atomically: retried until no other write came between the
    read and the compare-and-swap. Returns the word it replaced."""
    entry = builder.block
    loop, done = builder.append_basic_block("cas_loop"), builder.append_basic_block("cas_done")
    first = builder.load(word)
    builder.branch(loop)
    builder.position_at_end(loop)
    seen = builder.phi(word.type.pointee)
    seen.add_incoming(first, entry)
    if word.type.pointee == I16 and not host:  # (NVVM's cmpxchg takes 32- and 64-bit words only)
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
    return old


_ATOMIC_ADD_FLOAT = {"float32": ("llvm.nvvm.atomic.load.add.f32.p0f32", F32),
                     "float64": ("llvm.nvvm.atomic.load.add.f64.p0f64", F64)}  # fmt: skip


def atomic(builder, op: str, d: DType, ptr, offset, operands, host=None):
    """``old = ptr[offset]; ptr[offset] = op(old, *operands)`` atomically (``primitives.ATOMIC``'s
    operations; ``operands``: registers of dtype ``d``, cas's compared value first); returns
    ``old``. The hardware's atomics for 32- and 64-bit integers, float add and exchange; a
    compare-and-swap loop for float max/min (a NaN wins), for 16-bit types (``atom.cas.b16``,
    the element alone) and for 8-bit ones (no 8-bit atomics: on the aligned 32-bit word
    holding the element, whose other bytes it leaves as they are). On the host (``host``: its
    target, for 16-bit rounding) no NVVM intrinsic nor PTX: float add and 16-bit words by the
    loop too."""
    address = _address(builder, ptr, offset, d, addrspace=0)
    bits, value = ir.IntType(d.bits), operands[-1]
    if d.itemsize == 1:
        byte = builder.ptrtoint(address, I64)
        word = builder.inttoptr(builder.and_(byte, ir.Constant(I64, ~3)), I32.as_pointer())
        shift = builder.trunc(builder.shl(builder.and_(byte, ir.Constant(I64, 3)), ir.Constant(I64, 3)), I32)
        field = builder.shl(ir.Constant(I32, (1 << d.bits) - 1), shift)

        def element(w):
            return widen(builder, builder.trunc(builder.lshr(w, shift), bits), d, host)

        def update(w):
            new = builder.zext(narrow(builder, _combined(builder, op, d, element(w), operands, host), d, host), I32)
            return builder.or_(builder.and_(w, builder.not_(field)), builder.shl(new, shift))

        return element(_compare_and_swap_loop(builder, word, update, host))
    wide_float = d.is_float and d.itemsize > 2
    if wide_float and op == "add" and not host:
        name, t = _ATOMIC_ADD_FLOAT[d.name]
        fn = builder.module.globals.get(name) or ir.Function(
            builder.module, ir.FunctionType(t, [t.as_pointer(), t]), name
        )
        return builder.call(fn, [address, value])
    element_bits = builder.bitcast(address, bits.as_pointer())
    if wide_float and op == "xchg":
        return builder.bitcast(
            builder.atomic_rmw("xchg", element_bits, builder.bitcast(value, bits), "monotonic"), value.type
        )
    if d.itemsize == 2 or d.is_float:  # the element's bits, swapped in a loop
        register = (
            (lambda raw: widen(builder, raw, d, host))
            if d.itemsize == 2
            else (lambda raw: builder.bitcast(raw, value.type))
        )
        raw = (lambda v: narrow(builder, v, d, host)) if d.itemsize == 2 else (lambda v: builder.bitcast(v, bits))

        def update(old):
            return raw(_combined(builder, op, d, register(old), operands, host))

        return register(_compare_and_swap_loop(builder, element_bits, update, host))
    if op == "cas":
        return builder.extract_value(builder.cmpxchg(address, *operands, "monotonic", "monotonic"), 0)
    return builder.atomic_rmw("u" + op if op in ("max", "min") and d.kind == "u" else op, address, value, "monotonic")
