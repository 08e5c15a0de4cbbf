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
from .._lower.lowering import InShared, all_slots, i32, matrix_layout, output, stored_as_matrices, zero_padding
from .._lower.swizzled import OperandTile
from .._lower.thread_ir import Imm, Loop, Mma, SharedLoad, SharedStore, SlotMap
from .lower_wgmma import folded_wgmma_transposes, is_matrix_transpose, lower_wgmma, register_fragments, wgmma_plan

ARCHES = ("sm_90a", "sm_80")  # what the lowering targets: wgmma where it fits, or mma.sync


def dot_layouts(eqn, num_threads: int, arch: str = "sm_80"):
    """The operand and result layouts of the dot ``eqn``'s tensor-core strategy, or None
    where none applies: on sm_90a (None, None, the wgmma accumulator: the operands may come
    in any layout), else the mma.sync fragments; for ``precision="tf32"`` (None, None, the
    m16n8k8 accumulator: the operands go to shared memory, read from there as fragments).
    float8 operands take wgmma alone (``k32``, each operand four elements a thread at least:
    whole words), else None (``widen_float8_dots`` makes the dot a float16 one)."""
    (m, k), (_, n) = eqn.inputs[0].type.shape, eqn.inputs[1].type.shape
    if is_tf32(eqn):
        plan = mma_layouts(m, n, k, num_threads, tf32=True)
        return plan and (None, None, plan[2])
    if eqn.inputs[0].type.dtype.is_float8:
        words = min(pow2_ceil(m), pow2_ceil(n)) * pow2_ceil(k) >= 4 * num_threads and pow2_ceil(k) >= 32
        wgmma = wgmma_layout(m, n, k, num_threads) if arch == "sm_90a" and words else None
        return wgmma and (None, None, wgmma)
    if eqn.inputs[0].type.dtype.name not in MMA_DTYPES:
        return None
    wgmma = wgmma_layout(m, n, k, num_threads) if arch == "sm_90a" else None
    return (None, None, wgmma) if wgmma else mma_layouts(m, n, k, num_threads)


def uses_tensor_cores(program) -> bool:
    """Whether a dot of ``program`` has 16- or 8-bit float operands, so that the target arch
    decides its strategy (other kernels compile alike for every arch)."""
    dots = (e for e, _ in tile_outputs(program.body) if e.prim.name == "dot")
    return any(e.inputs[0].type.dtype.name in MMA_DTYPES or e.inputs[0].type.dtype.is_float8 for e in dots)


def dot_plan(eqn, layouts: dict) -> str:
    """What the lowering does with a dot, for the layouts stage of ``tl.explain``: the
    strategy and, on tensor cores, how the warps split the result and each warp's fragments."""
    (a, b), out = eqn.inputs[:2], eqn.outputs[0]
    if isinstance(layouts[out], WgmmaLayout):
        dtypes, in_registers = (a.type.dtype, b.type.dtype), register_fragments(layouts.get(a), layouts[out])
        return wgmma_plan(layouts[out], dtypes, a.type.shape[1], in_registers)
    plan = dot_layouts(eqn, layouts[out].num_threads)
    if plan is None or layouts[out] != plan[2]:
        small = a.type.dtype.name in MMA_DTYPES
        lc, (steps, _) = layouts[out], _k_steps(a, b)
        rows, cols = (1 << sum(1 for r in lc.reg if r in lc.dim_bits(d)) for d in (0, 1))
        tf32 = is_tf32(eqn)
        why = "tiles under one fragment" if small or tf32 else a.type.dtype.name
        return (
            f"CUDA cores (FFMA from shared memory): {why}, each thread {rows} x {cols} results"
            + (f", {steps} k-steps a read" if steps > 1 else "")
            + (", operands rounded to TF32" if tf32 else "")
        )
    lc = plan[2]
    (m, k), n = a.type.shape, b.type.shape[1]
    warps_m = 1 << sum(1 for w in lc.warp if w is not None and w in lc.dim_bits(0))
    warps_n = 1 << sum(1 for w in lc.warp if w is not None and w in lc.dim_bits(1))
    frag_m, frag_n = pow2_ceil(m) // 16 // warps_m, pow2_ceil(n) // 8 // warps_n
    spare = len(lc.warp) - log2(warps_m * warps_n)
    step, kind = (8, "m16n8k8.tf32") if is_tf32(eqn) else (16, f"m16n8k16.{a.type.dtype.short}")
    return (
        f"tensor cores, mma.sync.{kind}: {warps_m} x {warps_n} warps (m x n)"
        + (f", {1 << spare} replicating" if spare else "")
        + f", each {frag_m} x {frag_n} fragments of 16x8, {pow2_ceil(k) // step} k-steps of {step}; operands "
        + ("from shared memory, rounded to TF32" if is_tf32(eqn) else "by ldmatrix")
    )


def lower_dot(lw, eqn, a, b, acc, precision="ieee"):
    if isinstance(lw.layout(eqn.outputs[0]), WgmmaLayout):
        return lower_wgmma(lw, eqn, a, b, acc)
    if on_cuda_cores(lw, eqn):
        return _lower_fma(lw, eqn, a, b, acc)
    if is_tf32(eqn):
        return _lower_tf32(lw, eqn, a, b, acc)
    return _lower_mma(lw, eqn, a, b, acc, dot_layouts(eqn, lw.t))


def reads_operand_tiles(lw, eqn) -> bool:
    """Whether the dot ``eqn``'s threads read its operands from ``OperandTile``s: on CUDA
    cores, or as TF32 fragments."""
    return on_cuda_cores(lw, eqn) or is_tf32(eqn)


def is_tf32(eqn) -> bool:
    """Whether the dot ``eqn`` rounds its operands to TF32 (``precision="tf32"``)."""
    return eqn.params.get("precision") == "tf32"


def operand_tile(lw, eqn, role: int, x, transposed: bool) -> OperandTile:
    """The shared tile of the dot ``eqn``'s operand ``role`` stored as ``x`` (its own
    orientation: ``transposed`` where the dot reads ``x.T``), swizzled where one warp's
    read would hit a bank twice: on CUDA cores ``b`` given as ``w.T`` (a quarter warp reads
    8 rows 4 apart); as TF32 fragments every tile (8 rows at once along k; across, 4 rows
    of 2 chunks), the XOR spread over the rows that share banks when rows are short."""
    rows, cols = lw.layout(x).padded
    chunks = max(cols // 4, 1)
    shift = log2(max(8 // chunks, 1))
    if not is_tf32(eqn):
        return OperandTile(rows, cols, (2, min(chunks, 8) - 1, 1) if role == 1 and transposed else None)
    if transposed == (role == 1):  # k along the rows it stores
        return OperandTile(rows, cols, (shift, min(chunks, 8) - 1, 1) if chunks > 1 else None)
    return OperandTile(rows, cols, (shift, min(chunks // 2, 4) - 1, 2) if chunks > 2 else None)


def on_cuda_cores(lw, eqn) -> bool:
    """Whether the dot ``eqn`` is lowered to multiply-adds of threads (no tensor-core plan)."""
    layout = lw.layout(eqn.outputs[0])
    plan = dot_layouts(eqn, lw.t)
    return not isinstance(layout, WgmmaLayout) and (plan is None or layout != plan[2])


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


def _lower_tf32(lw, eqn, a, b, acc):
    """Each warp's m16n8k8 fragments on TF32 tensor cores: the operands in shared memory
    (copied there ahead by the loop's pipeline, else stored there now, zeros in the
    padding), each fragment element read from there (``mma_layouts(tf32=True)`` says which
    lane holds which) and rounded to TF32, then an ``Mma`` per warp. The tiles are
    swizzled so a warp's reads of a fragment hit 32 distinct banks (``OperandTile``)."""
    (m, k), n = a.type.shape, b.type.shape[1]
    la, lb, lc = mma_layouts(m, n, k, lw.t, tf32=True)
    c = all_slots(lw, lw.regs(acc, lc), lc.num_regs)
    sources, staged = _in_shared(lw, eqn, a, b)
    words = []
    for (buf, base, tile, transposed), layout in zip(sources, (la, lb)):
        rows, cols = lw.coords(layout)  # (a: m, k; b: k, n) of each slot
        at = tile.index_op(lw, cols, rows) if transposed else tile.index_op(lw, rows, cols)
        values = lw.reg(D.float32, layout.num_regs, "v")
        lw.stmts.append(SharedLoad(values, buf, lw.op(i32, "add", at, base)))
        words.append(lw.op(D.uint32, "tf32", values))
    lw.release(*staged)
    dst = lw.reg(D.float32, lc.num_regs, "acc")
    ki = 1 << (log2(pow2_ceil(k)) - 3)
    mi = la.num_regs // 4 // ki
    lw.stmts.append(Mma(dst, *words, c, (mi, lc.num_regs // 4 // mi, ki), D.float32))
    output(lw, eqn, dst)


def _lower_fma(lw, eqn, a, b, acc):
    """Each thread accumulates its register block of the result (``matmul_result``) over
    k, from the operands in shared memory: copied there ahead by the loop's pipeline
    (``lw.in_shared``), else stored there now. A float32 operand is read 4 k-steps at a
    time with 16-byte loads: along k where its rows are the result's (``a``; ``b`` given as
    ``w.T``), else across the thread's 4 consecutive rows or columns per k-step (``b``;
    ``a`` given as ``x.T``): 16 loads per 256 multiply-adds of an 8 x 8 block. An iteration
    reads twice where k allows: ptxas issues the second reads during the first products
    (128x128x32 on the H200: 39.3 TFLOP/s, 37.1 with one)."""
    out = eqn.outputs[0]
    layout, dtype = lw.layout(out), out.type.dtype
    k = a.type.shape[1]
    init = lw.regs(acc, layout)  # before the operands are staged (a conversion would need its own buffer)
    steps, reads = _k_steps(a, b)
    sources, staged = _in_shared(lw, eqn, a, b)
    if not sources[0].transposed and sources[1].transposed:  # (a @ w.T: both along k, a read per row and column
        reads = 1  # of the thread: two reads in flight spilled 36 B at 128 registers)
    tf32 = is_tf32(eqn)  # (tiles under a TF32 fragment: rounded alike)
    param = lw.reg(dtype, layout.num_regs, "acc")
    kq = lw.reg(i32, 1, "k")
    outer, lw.stmts = lw.stmts, []
    result = param
    for r in range(reads):
        at = kq if reads == 1 else lw.op(i32, "add", lw.op(i32, "mul", kq, Imm(reads, i32)), Imm(r, i32))
        operands = [
            _operand_values(lw, x, s, role, layout, at, steps, dtype, tf32)
            for role, (x, s) in enumerate(zip((a, b), sources))
        ]
        for x, y in zip(*operands):
            result = lw.op(dtype, "add", result, lw.op(dtype, "mul", x, y))
    body, lw.stmts = lw.stmts, outer
    last = Imm(-(-k // (steps * reads)), i32)
    lw.stmts.append(Loop(kq, Imm(0, i32), last, Imm(1, i32), [param], [init], body, [result]))
    lw.release(*staged)
    output(lw, eqn, param)


def _k_steps(a, b) -> tuple[int, int]:
    """How many k-steps a dot on CUDA cores reads at once (float32 operands: 4, 16 bytes)
    and how many such reads an iteration makes (2 where the tile's k, padded to a power of
    two, is 8 or more; ``_lower_fma`` makes it 1 for ``a @ w.T``)."""
    if a.type.dtype.name != "float32" or b.type.dtype.name != "float32":
        return 1, 1
    steps = min(4, pow2_ceil(a.type.shape[1]))
    return steps, 2 if pow2_ceil(a.type.shape[1]) >= 8 else 1


def _in_shared(lw, eqn, a, b) -> tuple[list, list]:
    """The dot's operands in shared memory (``InShared`` each): copied there ahead by the
    loop's pipeline, else stored there now (then a barrier); and the buffers so stored."""
    sources = [lw.in_shared.get(x) or _staged(lw, x, operand_tile(lw, eqn, r, x, False)) for r, x in enumerate((a, b))]
    staged = [s.buffer for s, x in zip(sources, (a, b)) if x not in lw.in_shared]
    if staged:
        lw.barrier()
    return sources, staged


def _staged(lw, x, tile: OperandTile):
    """``x`` stored in ``tile``, zeros in the padding (the products along k read it); as
    ``lw.in_shared`` gives a copied operand."""
    src = lw.layout(x)
    buf = lw.buffer(x.type.dtype, tile.words)
    values = lw.regs(x, src)
    if src.shape != src.padded:
        values = lw.op(x.type.dtype, "select", lw.valid(src), values, Imm(0, x.type.dtype))
    lw.stmts.append(SharedStore(buf, tile.index_op(lw, *lw.coords(src)), values, lw.owner(src)))
    return InShared(buf, Imm(0, i32), tile, False)


def _operand_values(lw, x, source, role, layout, kq, steps, dtype, tf32=False) -> list:
    """Operand ``x``'s values at k-steps ``steps * kq + s`` (``s < steps``) as ``dtype``, each
    over the result's slots (``role`` 0, ``a``: the value of the slot's row; 1: of its
    column), read from ``source`` = ``(buffer, base index, OperandTile, transposed)``; with
    ``steps`` > 1, float32s 2 or 4 at a time; with ``tf32``, rounded to TF32."""
    buf, base, tile, transposed = source
    bits = layout.dim_bits(role)
    own = [(i, b - bits.start) for i, b in enumerate(layout.reg) if b in bits]
    step = log2(steps)
    coord = lw.thread_coord(layout, role)
    k0 = lw.op(i32, "mul", kq, Imm(steps, i32))
    if transposed == (role == 1):  # k along each stored row: one read per row (column) of the thread
        reads, lanes = 1 << len(own), steps
        rows = lw.op(i32, "slot", attr=SlotMap.of_bits([(j, p) for j, (_, p) in enumerate(own)]), n=reads)
        if [p for _, p in own[:2]] == [0, 1]:  # (the thread's row a multiple of 4: swizzled apart)
            index = tile.index_op(lw, coord, k0, slot_rows=rows)
        else:
            index = tile.index_op(lw, lw.op(i32, "add", coord, rows), k0)
        picks = [([(i, step + j) for j, (i, _) in enumerate(own)], s) for s in range(steps)]
    else:  # k down the stored columns: per k-step, one read per group of the thread's consecutive rows (columns)
        v = next((j for j in range(2) if not (steps > 1 and j < len(own) and own[j][1] == j)), 2)
        groups = len(own) - v
        reads, lanes = steps << groups, 1 << v
        group = SlotMap.of_bits([(j - v, p) for j, (_, p) in enumerate(own) if j >= v])
        at = lw.op(i32, "add", coord, lw.op(i32, "slot", attr=group, n=reads))
        kk = SlotMap.of_bits([(groups + t, t) for t in range(step)])
        index = tile.index_op(lw, lw.op(i32, "add", k0, lw.op(i32, "slot", attr=kk, n=reads)), at)
        picks = [([(i, j) for j, (i, _) in enumerate(own)], s << (groups + v)) for s in range(steps)]
    values = lw.reg(x.type.dtype, reads * lanes, "v")
    lw.stmts.append(SharedLoad(values, buf, lw.op(i32, "add", index, base), lanes))
    if x.type.dtype is not dtype:
        values = lw.op(dtype, "convert", values, attr=dtype)
    if tf32:
        values = lw.op(dtype, "tf32", values)
    return [lw.pick(values, pairs, layout.num_regs, const=const) for pairs, const in picks]


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
