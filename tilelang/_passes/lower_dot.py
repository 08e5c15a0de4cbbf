"""Lowering of ``tl.dot`` (registered by ``_passes/lower_threads.py``), three strategies:

- **warpgroup tensor cores** (``wgmma``, sm_90a) for 16-bit float operands on Hopper, with
  the result in a ``WgmmaLayout`` (``lower_wgmma.py``);
- **tensor cores** (``mma.sync.m16n8k16``) for 16-bit float operands with tiles of at least
  one fragment: the operands arrive in the fragment layouts (``mma_layouts``; layout
  assignment asked for them), are packed two to a 32-bit word and multiplied by an ``Mma``
  statement per warp;
- **CUDA cores** otherwise: both operands staged in one shared buffer, then a loop over
  ``k`` in which each thread reads the ``a`` value of each of its rows and the ``b`` value
  of each of its columns and multiply-adds them into its accumulator slots.

A transposed operand (``a @ w.T``, ``q @ k.T``) costs nothing extra: ``folded_transposes``
lowers ``convert_layout(transpose(w))`` to the fragments as one ldmatrix conversion of
``w`` itself, stored in its own orientation and read without ``.trans`` where ``w`` would
need it (and the other way round).
"""

from __future__ import annotations

from .. import dtypes as D
from .._ir.core import Block, tile_outputs, uses
from .._lower.layout import MMA_DTYPES, Layout, WgmmaLayout, log2, mma_layouts, permuted, pow2_ceil, wgmma_layout
from .._lower.lowering import all_slots, b1, i32, matrix_layout, output, stored_as_matrices, zero_padding
from .._lower.thread_ir import Imm, Loop, Mma, SharedLoad, SharedStore, SlotMap, slots
from .lower_wgmma import folded_wgmma_transposes, is_matrix_transpose, lower_wgmma, register_fragments, wgmma_plan

ARCHES = ("sm_90a", "sm_80")  # what the lowering targets: wgmma where it fits, or mma.sync


def dot_layouts(a_type, b_type, num_threads: int, arch: str = "sm_80"):
    """The operand and result layouts of a tensor-core strategy, or None where none
    applies: on sm_90a (None, None, the wgmma accumulator: the operands may come in any
    layout), else the mma.sync fragments."""
    if a_type.dtype.name not in MMA_DTYPES:
        return None
    (m, k), (_, n) = a_type.shape, b_type.shape
    wgmma = wgmma_layout(m, n, k, num_threads) if arch == "sm_90a" else None
    return (None, None, wgmma) if wgmma else mma_layouts(m, n, k, num_threads)


def uses_tensor_cores(program) -> bool:
    """Whether a dot of ``program`` has 16-bit or int8 operands, so that the target arch
    decides its strategy (other kernels compile alike for every arch)."""
    dots = (e for e, _ in tile_outputs(program.body) if e.prim.name == "dot")
    return any(e.inputs[0].type.dtype.name in MMA_DTYPES for e in dots)


def dot_plan(eqn, layouts: dict) -> str:
    """What the lowering does with a dot, for the layouts stage of ``tl.explain``: the
    strategy and, on tensor cores, how the warps split the result and each warp's fragments."""
    (a, b), out = eqn.inputs[:2], eqn.outputs[0]
    if isinstance(layouts[out], WgmmaLayout):
        return wgmma_plan(layouts[out], a.type.dtype, a.type.shape[1], register_fragments(layouts.get(a), layouts[out]))
    plan = dot_layouts(a.type, b.type, layouts[out].num_threads)
    if plan is None or layouts[out] != plan[2]:
        small = a.type.dtype.name in MMA_DTYPES
        return f"CUDA cores (FFMA from shared memory): {'tiles under one fragment' if small else a.type.dtype.name}"
    lc = plan[2]
    (m, k), n = a.type.shape, b.type.shape[1]
    warps_m = 1 << sum(1 for w in lc.warp if w is not None and w in lc.dim_bits(0))
    warps_n = 1 << sum(1 for w in lc.warp if w is not None and w in lc.dim_bits(1))
    frag_m, frag_n = pow2_ceil(m) // 16 // warps_m, pow2_ceil(n) // 8 // warps_n
    spare = len(lc.warp) - log2(warps_m * warps_n)
    return (
        f"tensor cores, mma.sync.m16n8k16.{a.type.dtype.short}: {warps_m} x {warps_n} warps (m x n)"
        + (f", {1 << spare} replicating" if spare else "")
        + f", each {frag_m} x {frag_n} fragments of 16x8, {pow2_ceil(k) // 16} k-steps of 16; operands by ldmatrix"
    )


def lower_dot(lw, eqn, a, b, acc):
    if isinstance(lw.layout(eqn.outputs[0]), WgmmaLayout):
        return lower_wgmma(lw, eqn, a, b, acc)
    plan = dot_layouts(a.type, b.type, lw.t)
    if plan is not None and lw.layout(eqn.outputs[0]) == plan[2]:
        return _lower_mma(lw, eqn, a, b, acc, plan)
    return _lower_fma(lw, eqn, a, b, acc)


def _lower_mma(lw, eqn, a, b, acc, plan):
    """Each warp's fragments multiplied on tensor cores, from the operands' words (made by
    the ldmatrix conversion, else packed here). Padding along k (up to a power of two) is
    zeroed in both operands: it would add whatever the registers hold."""
    la, lb, lc = plan
    k = a.type.shape[1]
    words = []
    for atom, layout, axis in ((a, la, 1), (b, lb, 0)):
        n = layout.num_regs
        words.append(all_slots(lw, zero_padding(lw, lw.words(atom, layout), layout, axis), n // 2))
    c = all_slots(lw, lw.regs(acc, lc), lc.num_regs)
    dst = lw.reg(D.float32, lc.num_regs, "acc")
    ki = 1 << (log2(pow2_ceil(k)) - 4)
    mi = la.num_regs // 8 // ki
    lw.stmts.append(Mma(dst, *words, c, (mi, lc.num_regs // 4 // mi, ki), a.type.dtype))
    output(lw, eqn, dst)


def _lower_fma(lw, eqn, a, b, acc):
    """Operands staged in shared memory; each thread accumulates its register block of
    the result over k, reading each operand value once per row or column it owns."""
    out = eqn.outputs[0]
    layout = lw.layout(out)
    (m, k), (_, n) = a.type.shape, b.type.shape
    init = lw.regs(acc, layout)  # before the operands are staged (a conversion would need its own buffer)
    buf = lw.buffer(a.type.dtype, m * k + k * n)
    for atom, shape, base in ((a, (m, k), 0), (b, (k, n), m * k)):
        src = lw.layout(atom)
        at = lw.op(i32, "add", lw.flat(lw.coords(src), shape), Imm(base, i32))
        lw.stmts.append(SharedStore(buf, at, lw.regs(atom, src), lw.land(lw.valid(src), lw.owner(src))))
    lw.barrier()

    # each thread's rows (and columns): the register bits of that dimension, as their own slots;
    # columns that are consecutive from a multiple of their count are read together (b's rows are)
    bases, picks, lanes = [], [], []
    for d, size, scale, base in ((0, m, k, 0), (1, n, 1, m * k)):
        bits = layout.dim_bits(d)
        own = [(i, b - bits.start) for i, b in enumerate(layout.reg) if b in bits]
        vec = _vector_bits(own, n, m * k) if d == 1 and a.type.dtype.name == "float32" else 0
        c = lw.op(i32, "add", lw.thread_coord(layout, d), lw.op(i32, "slot", attr=SlotMap.of_bits(
            [(j - vec, pos) for j, (_, pos) in enumerate(own) if j >= vec]), n=1 << (len(own) - vec)))  # fmt: skip
        c = lw.op(i32, "select", lw.op(b1, "lt", c, Imm(size, i32)), c, Imm(0, i32))
        bases.append(lw.op(i32, "add", lw.op(i32, "mul", c, Imm(scale, i32)), Imm(base, i32)))
        picks.append([(i, j) for j, (i, _) in enumerate(own)])
        lanes.append(1 << vec)
    dtype = out.type.dtype
    param = lw.reg(dtype, layout.num_regs, "acc")
    kk = lw.reg(i32, 1, "k")
    outer, lw.stmts = lw.stmts, []
    a_vals = _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", bases[0], kk))
    b_at = lw.op(i32, "add", bases[1], lw.op(i32, "mul", kk, Imm(n, i32)))
    b_vals = _shared_at(lw, buf, a.type.dtype, dtype, b_at, lanes[1])
    products = lw.op(dtype, "mul", *(lw.pick(v, p, layout.num_regs) for v, p in zip((a_vals, b_vals), picks)))
    result = lw.op(dtype, "add", param, products)
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(kk, Imm(0, i32), Imm(k, i32), Imm(1, i32), [param], [init], body, [result]))
    lw.release(buf)
    output(lw, eqn, param)


def _vector_bits(own, n: int, base: int) -> int:
    """log2 of how many of a thread's columns (``own``: (register bit, column bit) pairs, in
    slot order) one vector load reads: its first ones hold column bits 0, 1, ... (consecutive
    columns from a multiple of their count), up to 16 bytes of float32s, with rows of ``n``
    columns and b's start (``base``) keeping each group aligned."""
    vec = 0
    while vec < min(len(own), 2) and own[vec][1] == vec and n % (2 << vec) == 0 and base % (2 << vec) == 0:
        vec += 1
    return vec


def _shared_at(lw, buf, dtype, acc_dtype, index, lanes=1):
    dst = lw.reg(dtype, slots(index) * lanes, "v")
    lw.stmts.append(SharedLoad(dst, buf, index, lanes))
    return dst if dtype is acc_dtype else lw.op(acc_dtype, "convert", dst, attr=acc_dtype)


# ------------------------------------------------------------- transposed operands


def transposed_read(lw, transpose, users) -> Layout | None:
    """For ``z = transpose(y)`` whose only use (``users``) converts it to a layout ldmatrix
    makes: that layout in ``y``'s coordinates, read from ``y`` stored as matrices (None where
    this does not apply)."""
    if not is_matrix_transpose(transpose) or len(users) != 1:
        return None
    convert, y = users[0], transpose.inputs[0]
    if convert is None or convert.prim.name != "convert_layout":
        return None
    target = permuted(lw.layout(convert.outputs[0]), (1, 0))
    return target if stored_as_matrices(y.type, lw.layout(y)) and matrix_layout(target) else None


def folded_transposes(lw, block: Block) -> dict:
    """Lower rules (by equation id, for ``Lowering.lower_block``) for the transposes of
    ``block`` that feed only an ldmatrix conversion: the transpose emits nothing, the
    conversion stores the transpose's input and reads it with ldmatrix in the transposed
    layout (one shared round trip, 16-byte stores, no scalar transpose)."""
    used, rules = uses(block), {}
    for eqn in block.eqns:
        users = used.get(eqn.outputs[0], []) if eqn.prim.name == "transpose" else []
        target = transposed_read(lw, eqn, users) if users else None
        if target is None:
            continue

        def convert(lw, eqn, z, y=eqn.inputs[0], target=target):
            lw.set_words(eqn.outputs[0], lw.through_matrices(y, target))

        rules[id(eqn)] = lambda lw, eqn, *args, **params: None
        rules[id(users[0])] = convert
    return rules | folded_wgmma_transposes(lw, block)
