"""Lowering: the tile IR with layouts → the thread IR (what one thread does).

Each primitive's lowering rule is registered in ``Primitive.rules["lower"]`` below, grouped
by kind (``dot``'s in ``lower_dot.py``); they emit through the builder,
``_lower/lowering.py``, where a tile value is one register array and every statement
applies to all its slots. Phantom elements (beyond a non-power-of-two tile edge) are
masked out of memory accesses and reductions; replicated copies of a value store only
from one thread.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from .._ir.core import ArrayType, Literal, Program, Var, uses
from .._ir.primitives import COMPARE, ELEMENTWISE, print_format
from .._lower.layout import (
    blocked,
    log2,
    reshaped,
    same_threads,
    scalar_layout,
    selected,
    slice_fixed_bits,
    sliced,
)
from .._lower.lowering import Lowering, b1, i32, i64, output, rule, scalar_reg_name
from .._lower.ranges import loop_index_range
from .._lower.thread_ir import (
    ArrayParam,
    Atomic,
    Imm,
    Load,
    Loop,
    Print,
    Reg,
    ScalarParam,
    SharedLoad,
    SharedStore,
    Store,
    ThreadProgram,
    array_reg,
    slots,
)
from .._lower.window import Window
from .lower_dot import folded_transposes, lower_dot
from .lower_pipeline import plan as plan_pipeline
from .lower_reductions import (
    from_lane,
    index_bit,
    lower_combined_reduce,
    lower_combined_scan,
    lower_histogram,
    lower_reduce,
    lower_scan,
    lower_sort,
)
from .lower_wgmma import stage_invariant_operands

# ------------------------------------------------------------------ elementwise


@rule(*ELEMENTWISE)
def _lower_elementwise(lw, eqn, *inputs, **params):
    out = eqn.outputs[0]
    layout = lw.layout(out)
    operands = [lw.regs(a, layout) for a in inputs]
    name, attr = eqn.prim.name, params.get("dtype")
    if name in COMPARE:
        for count, other, op in ((*operands, name), (*operands[::-1], _FLIPPED[name])):
            if count in lw.counts and _uniform_int(other):
                return output(lw, eqn, _compared_count(lw, op, count, other))
    result = lw.elementwise(name, out.type.dtype, operands, attr)
    if name == "convert" and operands[0] in lw.counts and _widens(operands[0].dtype, attr):
        lw.counts[result] = lw.counts[operands[0]]  # (the same numbers: `cols < N` of an int64 N)
    output(lw, eqn, result)


def _widens(src, dst) -> bool:
    """Whether every value of int dtype ``src`` is one of int dtype ``dst`` (converting keeps it)."""
    if not (src.is_int and dst.is_int):
        return False
    return (dst.kind == src.kind and dst.bits >= src.bits) or (src.kind, dst.kind) == ("u", "i") and dst.bits > src.bits


_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _uniform_int(x) -> bool:
    """One integer for the whole thread that int64 holds exactly."""
    d = x.dtype
    return slots(x) == 1 and d.is_int and (d.kind == "i" or d.bits < 64)


def _compared_count(lw, op, count, bound):
    """``count op bound`` for an iota's ``count`` (the thread's part plus a constant per
    slot) and one integer ``bound``: each slot's constant against ``bound`` less the
    thread's part, a subtraction per thread instead of an addition per element (``cols <
    N``). In int64, clamped to int32: the constants lie well inside it, so no comparison
    changes."""
    thread, constants = lw.counts[count]
    # (an int64 bound near its ends would wrap less the thread's part: past 2**40 it compares as 2**40)
    bound = lw.clamp(lw.op(i64, "convert", bound, attr=i64), -(2**40), 2**40)
    less = lw.clamp(lw.op(i64, "sub", bound, lw.op(i64, "convert", thread, attr=i64)), -(2**31), 2**31 - 1)
    return lw.op(b1, op, constants, lw.op(i32, "convert", less, attr=i32))


@rule("full")
def _lower_full(lw, eqn, value, *, shape, dtype):
    output(lw, eqn, lw.scalar(value))  # one value, the same in every slot of every thread


@rule("iota")
def _lower_iota(lw, eqn, *, start, stop):
    thread, constants = lw.coord_parts(lw.layout(eqn.outputs[0]), 0)
    first = lw.op(i32, "add", thread, Imm(start, i32))  # the thread's part
    count = lw.op(i32, "add", first, constants)
    if not isinstance(constants, Imm):
        lw.counts[count] = (first, constants)
    output(lw, eqn, count)


@rule("block_id", "num_blocks")
def _lower_grid(lw, eqn, *, axis):
    output(lw, eqn, _grid(lw, eqn.prim.name, axis))


def _grid(lw, name, axis):
    """``block_id`` or ``num_blocks`` along ``axis``, computed once."""
    return lw.cached((name, axis), lambda: lw.op(i32, name, attr=axis))


@rule("array_dim")
def _lower_array_dim(lw, eqn, array, *, axis):
    output(lw, eqn, array_reg(lw.array_names[array], "shape", axis))


# ------------------------------------------------------------------- shape ops


@rule("reshape")
def _lower_reshape(lw, eqn, x, *, shape):
    out = eqn.outputs[0]
    layout = lw.layout(out)
    if x.type.shape == () or isinstance(x, Literal):
        return output(lw, eqn, lw.regs(x, layout))
    same = reshaped(lw.layout(x), shape)
    if same is not None and same_threads(same, layout):  # the same padded numbering on the same threads
        return output(lw, eqn, lw.regs(x, reshaped(layout, x.type.shape)))

    def source_coords(coords):  # the same row-major position in x's shape
        flat, out, stride = lw.flat(coords, shape), [], 1
        for s in reversed(x.type.shape):
            out.insert(0, lw.op(i32, "mod", lw.op(i32, "floordiv", flat, Imm(stride, i32)), Imm(s, i32)))
            stride *= s
        return out

    output(lw, eqn, lw.through_shared(x, layout, source_coords))


@rule("convert_layout")
def _lower_convert_layout(lw, eqn, x):
    out, layout = eqn.outputs[0], lw.layout(eqn.outputs[0])
    words = lw.through_matrices(x, layout)
    if words is None:
        return output(lw, eqn, lw.through_shared(x, layout, lambda coords: coords))
    lw.set_words(out, words)


@rule("transpose")
def _lower_transpose(lw, eqn, x, *, perm):
    layout = lw.layout(eqn.outputs[0])

    def source_coords(coords):
        src = [None] * len(perm)
        for i, p in enumerate(perm):
            src[p] = coords[i]
        return src

    output(lw, eqn, lw.through_shared(x, layout, source_coords))


@rule("slice")
def _lower_slice(lw, eqn, x, *, starts, steps, shape):
    layout = lw.layout(eqn.outputs[0])
    flipped = _flipped_bits(lw, x, layout, starts, steps, shape)
    if flipped is not None and not any(b in flipped for b in layout.warp):  # a flip in registers and lanes
        value = lw.values[x]
        regs = sum(1 << i for i, b in enumerate(layout.reg) if b in flipped)
        lanes = sum(1 << i for i, b in enumerate(layout.lane) if b in flipped)
        value = lw.pick(value, [(i, i) for i in range(len(layout.reg))], layout.num_regs, flip=regs) if regs else value
        return output(lw, eqn, from_lane(lw, value, lanes) if lanes else value)

    source = lw.layout(x)
    fixed = slice_fixed_bits(source, starts, steps, shape)
    if fixed is not None and layout == selected(source, shape, fixed):  # registers picked, lanes shuffled
        kept = [i for i, b in enumerate(source.reg) if b not in fixed]
        const = sum(fixed[b] << i for i, b in enumerate(source.reg) if b in fixed)
        value = lw.pick(lw.values[x], list(enumerate(kept)), layout.num_regs, const=const)
        for lane, b in enumerate(source.lane):
            if b in fixed:  # (the lanes whose bit is not the run's take their partner's)
                here = lw.op(b1, "eq", index_bit(lw, source, b), Imm(bool(fixed[b]), b1))
                value = lw.op(value.dtype, "select", here, value, from_lane(lw, value, 1 << lane))
        return output(lw, eqn, value)

    def source_coords(coords):  # (a phantom's coordinate, past the end, is never read: through_shared masks it)
        return [lw.op(i32, "add", Imm(start, i32), lw.op(i32, "mul", Imm(step, i32), c)) if (start, step) != (0, 1)
                else c for start, step, c in zip(starts, steps, coords)]  # fmt: skip

    output(lw, eqn, lw.through_shared(x, layout, source_coords))


def _flipped_bits(lw, x, layout, starts, steps, shape):
    """The index bits a slice complements, where it is a flip of whole axes of power-of-two
    lengths in ``x``'s own layout (each element then comes from the one whose index differs
    in those bits: another slot, or another lane), else None."""
    if lw.layout(x) != layout or shape != x.type.shape:
        return None
    flipped = set()
    for d, (n, start, step) in enumerate(zip(shape, starts, steps)):
        if (start, step) == (0, 1):
            continue
        if (start, step) != (n - 1, -1) or n & (n - 1):
            return None
        flipped.update(layout.dim_bits(d))
    return flipped


@rule("join")
def _lower_join(lw, eqn, a, b):
    """Slot ``r`` of the result is ``a``'s or ``b``'s (as bit ``i`` of ``r``, the register
    bit of the new axis) slot ``r`` without that bit: registers renamed, no data moved."""
    layout = lw.layout(eqn.outputs[0])
    operand = sliced(layout, len(layout.shape) - 1)
    i, n = layout.reg.index(0), layout.num_regs
    pairs = [(j, j - (j > i)) for j in range(log2(n)) if j != i]
    a, b = (lw.pick(lw.regs(x, operand), pairs, n) for x in (a, b))
    output(lw, eqn, lw.op(a.dtype, "select", index_bit(lw, layout, 0), b, a))


@rule("cat")
def _lower_cat(lw, eqn, a, b, *, axis):
    """Both tiles written into one tile of the result's shape in shared memory (``b`` past
    ``a`` along the axis), read back in the result's layout."""
    n = a.type.shape[axis]

    def after_a(coords):
        return [lw.op(i32, "add", c, Imm(n, i32)) if d == axis else c for d, c in enumerate(coords)]

    out = eqn.outputs[0]
    value = lw.through_shared(a, lw.layout(out), lambda coords: coords, out.type.shape, [(b, after_a)])
    output(lw, eqn, value)


@rule("split")
def _lower_split(lw, eqn, x):
    """Each result is the slots of ``x`` with the pair's register bit 0 or 1 (``x`` holds both
    elements of its pairs: insert_conversions made sure)."""
    layout = lw.layout(x)
    i, n = layout.reg.index(0), layout.num_regs
    pairs = [(j, j + (j >= i)) for j in range(log2(n) - 1)]
    for k, out in enumerate(eqn.outputs):
        lw.values[out] = lw.pick(lw.values[x], pairs, n // 2, const=k << i)


@rule("broadcast")
def _lower_broadcast(lw, eqn, x, *, shape):
    axes = tuple(d for d, (a, b) in enumerate(zip(x.type.shape, shape)) if a != b)
    output(lw, eqn, lw.regs(x, lw.layout(eqn.outputs[0]), axes))


# ---------------------------------------------------------------------- memory


def _element_offsets(lw, array, coords):
    """Element offset and in-bounds test of the element at ``coords`` (int64 values)."""
    name, last = lw.array_names[array], array.type.ndim - 1
    offset, inside = Imm(0, i64), Imm(True, b1)
    for d, c in enumerate(coords):
        inside = lw.land(inside, lw.op(b1, "ge", c, Imm(0, i64)), lw.op(b1, "lt", c, array_reg(name, "shape", d)))
        step = c if d == last and array.type.unit_stride else lw.op(i64, "mul", c, array_reg(name, "stride", d))
        offset = lw.op(i64, "add", offset, step)
    return offset, inside


@rule("load")
def _lower_load(lw, eqn, array, *rest, shape):
    *starts, padding = rest
    out = eqn.outputs[0]
    layout = lw.layout(out)
    window = Window(lw, array, layout, [lw.scalar(s) for s in starts])
    offset, mask, first, last = window.access()
    dtype, pad = out.type.dtype, lw.scalar(padding)
    if dtype.is_float and dtype.bits == 16 and isinstance(pad, Imm):
        raw = _load_16_bit_floats(lw, layout, window, pad, offset, mask, first, last)
        if raw.dtype is D.uint16:
            return output(lw, eqn, lw.op(dtype, "from_bits", raw))
        return lw.set_words(out, raw)
    dst = lw.reg(dtype, layout.num_regs, "v")
    lw.stmts.append(Load(dst, window.name, offset, mask, pad, window.lanes, first, last))
    output(lw, eqn, dst)


def _load_16_bit_floats(lw, layout, window, pad, offset, mask, first, last):
    """The raw bits: as uint16 one by one, or two to a uint32 word in vectors (their values are
    cut out after every group is loaded: values cut out of each access as it arrived made each
    group's load wait for its data before the next one was issued, the GPU running a thread's
    instructions in order)."""
    dtype, n = pad.dtype, layout.num_regs
    bits = Imm(int(np.asarray(pad.value, dtype.np).view(np.uint16)), D.uint16)
    if window.lanes == 1:
        raw = lw.reg(D.uint16, n, "i")
        lw.stmts.append(Load(raw, window.name, offset, mask, bits, 1))
        return raw
    words = lw.reg(D.uint32, n // 2, "i")
    lw.stmts.append(Load(words, window.name, offset, mask, bits, window.lanes, first, last, pack=2))
    return words


@rule("store")
def _lower_store(lw, eqn, array, tile, *starts):
    layout, d = lw.layout(tile), tile.type.dtype
    staged = _staging_ring(lw, array, tile, layout)
    if staged:
        layout, words = _staged_rows(lw, tile, layout, staged)
    window = Window(lw, array, layout, [lw.scalar(s) for s in starts])
    offset, mask, first, last = window.access()
    mask = lw.land(mask, lw.owner(layout))
    if d.is_float and d.bits == 16 and window.lanes > 1:
        # vectors of 16-bit floats leave as words: two float32s rounded into one
        # (cvt.rn.bf16x2.f32), or the words they were loaded as, nothing cut out and put back
        words = words if staged else lw.words(tile, layout)
        lw.stmts.append(Store(window.name, offset, words, mask, window.lanes, first, last, pack=2))
        return
    lw.stmts.append(Store(window.name, offset, lw.regs(tile, layout), mask, window.lanes, first, last))


@rule("device_print")
def _lower_print(lw, eqn, *tile, prefix, hex=False):
    """Each element's line from the one thread holding it (of those holding copies); with
    no tile, one line from the block's first thread."""
    blocks = tuple(_grid(lw, "block_id", a) for a in range(3))
    if not tile:
        lw.stmts.append(Print(print_format(prefix, None), blocks, lw.leader(lw.t - 1)))
        return
    layout = lw.layout(tile[0])
    coords = tuple(lw.coord(layout, d) for d in range(len(layout.shape)))
    mask = lw.land(lw.valid(layout), lw.owner(layout))
    text = print_format(prefix, tile[0].type, hex)
    lw.stmts.append(Print(text, (*blocks, *coords, lw.regs(tile[0], layout)), mask, bits=hex))


def _staging_ring(lw, array, tile, layout):
    """The retired ring (``Lowering.retired``) a store of 16-bit floats goes through to leave
    in 16-byte vectors, or None: where its layout holds 2 to 4 consecutive elements of a row
    (a dot's result: 2, so 4-byte stores), the tile, its rows 16 bytes apart more, fits a
    ring, and the program is the one for aligned arrays (for others the vectors would go lane
    by lane: the 8205x2949x5921 fp16 matmul, whose rows are not, went 87.6 -> 76.6 TFLOP/s
    staged on the H200)."""
    d, shape = tile.type.dtype, tile.type.shape
    if not (d.is_float and d.bits == 16 and array.type.unit_stride and len(shape) >= 2 and lw.retired):
        return None
    if not lw.assume_aligned:
        return None
    if not 2 <= layout.vector_width() < 8 or blocked(shape, 2, lw.t).vector_width() < 8:
        return None
    words = math.prod(_staged_tile(layout))
    return next((ring for ring in lw.retired if lw.shared[ring][1] >= words), None)


def _staged_tile(layout):
    """The tile's shape in shared memory for a staged store, in words of two elements: rows
    16 bytes (4 words) longer, so a dot's 8 rows of 4 words a warp stores hit distinct banks."""
    *rows, last = layout.padded
    return (*rows, last // 2 + 4)


def _word_index(lw, layout, lanes):
    """Each group's word in the staged tile: the thread's part and a constant per slot, kept
    apart (the constant then folds into the shared access's address)."""
    parts = [lw.coord_parts(layout, d, lanes) for d in range(len(layout.shape))]
    parts[-1] = tuple(lw.op(i32, "shr", p, Imm(1, i32)) for p in parts[-1])  # (both even: whole words)
    return lw.flat([lw.op(i32, "add", *p) for p in parts], _staged_tile(layout))


def _staged_rows(lw, tile, layout, ring):
    """``tile`` through ``ring``: each thread stores its words (two elements each) where they
    belong in the tile, then reads back 16 bytes of a row at a time in the blocked layout, the
    words of its vectors (the layout, the words). A barrier after the stores, and one before
    them where a staged store read the ring back before (in program order: the barriers
    between may be in a loop that runs no iteration, and one in a loop's body must separate
    its first iteration's writes from the reads before the loop)."""
    if ring in lw.rings_read:
        lw.barrier()
    dst = blocked(tile.type.shape, 2, lw.t)
    ok = lw.land(lw.valid(layout, lanes=2), lw.owner(layout))
    lw.stmts.append(SharedStore(ring, _word_index(lw, layout, 2), lw.words(tile, layout), ok))
    lw.barrier()
    read = lw.op(i32, "select", lw.valid(dst, lanes=8), _word_index(lw, dst, 8), Imm(0, i32))
    words = lw.reg(D.uint32, dst.num_regs // 2, "i")
    lw.stmts.append(SharedLoad(words, ring, read, lanes=4))
    lw.rings_read.add(ring)
    lw.read.add(ring)  # (in a loop's body, a barrier at its end: the next iteration writes the ring again)
    return dst, words


def _indexed(lw, eqn, array, rest, masked, has_values, layout):
    """(offset, in-bounds-and-masked, values) of each slot of a gather, scatter or atomic."""
    rest = list(rest)
    mask = rest.pop() if masked else None
    values = rest.pop() if has_values else None
    coords = [lw.op(i64, "convert", lw.regs(a, layout), attr=i64) for a in rest[: array.type.ndim]]
    offset, inside = _element_offsets(lw, array, coords)
    ok = lw.land(inside, lw.regs(mask, layout) if masked else Imm(True, b1), lw.valid(layout))
    return offset, ok, lw.regs(values, layout) if has_values else None


@rule("gather")
def _lower_gather(lw, eqn, array, *rest, masked):
    *rest, padding = rest
    out = eqn.outputs[0]
    layout = lw.layout(out)
    offset, ok, _ = _indexed(lw, eqn, array, rest, masked, False, layout)
    dst = lw.reg(out.type.dtype, layout.num_regs, "v")
    lw.stmts.append(Load(dst, lw.array_names[array], offset, ok, lw.scalar(padding)))
    output(lw, eqn, dst)


def _effect_layout(lw, atoms):
    tiled = [a for a in atoms if isinstance(a, Var) and a.type.shape != ()]
    return lw.layout(tiled[0]) if tiled else scalar_layout(lw.t)


@rule("scatter")
def _lower_scatter(lw, eqn, array, *rest, masked):
    layout = _effect_layout(lw, rest)
    offset, ok, value = _indexed(lw, eqn, array, rest, masked, True, layout)
    lw.stmts.append(Store(lw.array_names[array], offset, value, lw.land(ok, lw.owner(layout))))


@rule("atomic")
def _lower_atomic(lw, eqn, array, *rest, op, masked, sem):
    out, n = eqn.outputs[0], array.type.ndim
    layout = lw.layout(out)
    compare = rest[n] if op == "cas" else None
    offset, ok, value = _indexed(lw, eqn, array, rest[:n] + rest[n + (op == "cas") :], masked, True, layout)
    dst = lw.reg(out.type.dtype, layout.num_regs, "v")
    mask = lw.land(ok, lw.owner(layout))
    compared = None if compare is None else lw.regs(compare, layout)
    lw.stmts.append(Atomic(dst, lw.array_names[array], offset, value, op, mask, layout.num_regs, compared, sem))
    output(lw, eqn, dst)
    if layout.replicated_bits() and out in lw.used:  # the owners' old values, to the threads holding copies
        output(lw, eqn, lw.through_shared(out, layout, lambda coords: coords))


@rule("barrier")
def _lower_barrier(lw, eqn):
    lw.barrier()


rule("dot")(lower_dot)
rule("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin")(lower_reduce)
rule("cumsum", "cumprod")(lower_scan)
rule("reduce")(lower_combined_reduce)
rule("associative_scan")(lower_combined_scan)
rule("sort")(lower_sort)
rule("histogram")(lower_histogram)


# ------------------------------------------------------------------------ loops


@rule("range_loop")
def _lower_loop(lw, eqn, start, stop, step, *inits, body):
    index, *carried = body.params
    index_reg = lw.reg(index.type.dtype, 1, "k")
    pipeline = plan_pipeline(lw, eqn)  # tiles for tensor cores copied asynchronously, stages ahead
    if pipeline:  # (first: the copies are on their way while the operands below wait for their loads)
        pipeline.prologue()
        lw.overlapped.update(pipeline.overlapped)
    invariant = stage_invariant_operands(lw, body)  # wgmma operands from before the loop: stored once
    lw.values[index] = index_reg
    params, init_regs = [], []
    for p, init in zip(carried, inits):
        layout = lw.layout(p)
        lw.values[p] = lw.reg(p.type.dtype, layout.num_regs, "c")
        params.append(lw.values[p])
        init_regs.append(lw.regs(init, layout))
    if pipeline:  # the stage this iteration reads (and, with TMA, the parity of its mbarrier's phase)
        stage, phase = lw.reg(i32, 1, "stage"), lw.reg(i32, 1, "phase")
        pipeline.registers = (stage, phase) if pipeline.tma else (stage,)
        params += pipeline.registers
        init_regs += pipeline.initial()
    bounds = [lw.scalar(x) for x in (start, stop, step)]
    lw.multiples[index_reg] = math.gcd(lw.multiple(bounds[0]), lw.multiple(bounds[2]))  # (window corners)
    if (r := loop_index_range(*map(lw.range, bounds))) is not None:
        lw.ranges[index_reg] = r
    outer, lw.stmts = lw.stmts, []
    outer_read, lw.read = lw.read, set()  # (a barrier in the body may never run: these stay busy)
    if pipeline:
        pipeline.refill(index_reg, stage, phase)
    lw.depth += 1
    rules = folded_transposes(lw, body)
    lw.lower_block(body, pipeline.rules(stage, index_reg, rules) if pipeline else rules)
    lw.depth -= 1
    results = [lw.regs(res, lw.layout(p)) for p, res in zip(carried, body.results)]
    if pipeline:
        pipeline.copy_last(index_reg, stage)
        results += pipeline.advance(stage, phase)
    if lw.read:  # the next iteration writes them again: every thread must be done reading
        lw.barrier()
    lw.read = outer_read
    loop_body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(index_reg, *bounds, params, init_regs, loop_body, results, eqn.loc))
    if pipeline:
        pipeline.drain(dict(zip(body.results, params)))
    for out, p in zip(eqn.outputs, carried):
        lw.values[out] = lw.values[p]
    for x in invariant:
        del lw.in_shared[x]


# ---------------------------------------------------------------------- entry


def lower_to_threads(
    program: Program, layouts: dict, num_threads: int, num_stages: int = 3, general: bool = False,
    copies_first: bool = False,
) -> ThreadProgram:  # fmt: skip
    """The thread program of ``program`` under ``layouts``; pipelined loads take ``num_stages``
    buffers. Unless ``general``, those wgmma reads are copied by TMA where they qualify and
    vector accesses take their arrays to be aligned where that drops the lane-by-lane paths
    (the program says which arrays it takes so, and what it needs of them: the general
    program is for any others). ``copies_first``: pipelined copies first in an iteration
    (``tile_kernel``'s option)."""
    lw = Lowering(layouts, num_threads, num_stages, general, copies_first)
    params = []
    for var, name in zip(program.body.params, program.arg_names):
        if isinstance(var.type, ArrayType):
            lw.array_names[var] = name
            params.append(ArrayParam(name, var.type.dtype, var.type.ndim))
            for axis in range(var.type.ndim):  # (shapes are never negative)
                lw.ranges[array_reg(name, "shape", axis)] = (0, 2**63 - 1)
        else:
            reg = Reg(scalar_reg_name(name), var.type.dtype)
            lw.values[var] = reg
            params.append(ScalarParam(reg))
    lw.used = set(uses(program.body))
    main = []
    lw.stmts = main
    lw.lower_block(program.body, folded_transposes(lw, program.body))
    body = lw.prologue + main
    aligned = tuple(sorted(lw.aligned))
    return ThreadProgram(program.name, params, num_threads, lw.shared, body, lw.shared_sites, lw.tensor_maps, aligned)
