"""Lowering of ``tl.dot`` on warpgroup tensor cores (``wgmma.mma_async``, sm_90a), the
strategy ``lower_dot`` takes when layout assignment gave the result a ``WgmmaLayout``.

The operands are read by the tensor cores from shared memory: each is a swizzled tile
(``_lower/swizzled.py``) that is either already there (a load copied ahead by the software
pipeline, ``lower_pipeline.py``, which writes its ring in this layout) or stored now from
the registers of whatever layout it has, as 32-bit words of two elements (its padding along
k zeroed), followed by a proxy fence and a barrier. A transposed operand (``q @ k.T``,
``x.T @ y``) costs nothing: the tile is stored in its own orientation and read K-major or
MN-major as the descriptor says. An ``a`` held as the accumulator of a wgmma dot over the
same rows (attention's ``p @ v``, ``p`` from the scores ``q @ k.T``) is read from its
registers instead (``RegisterTile``): no store, no fence, no barrier.

Each warpgroup multiplies its own rows of ``a`` (and columns of ``b``) into its
accumulators, one ``Wgmma`` statement per dot: ``MB x NB`` instructions of ``m64nNk16`` over
``KS`` k-steps.
"""

from __future__ import annotations

from .. import dtypes as D
from .._ir.core import Block, Var, nested_blocks, uses
from .._lower.layout import WgmmaLayout, blocked, pow2_ceil, wgmma_layout
from .._lower.lowering import InShared, all_slots, i32, output, stored_as_words, zero_padding
from .._lower.swizzled import RegisterTile, SwizzledTile, k_major_only, ptx_type
from .._lower.thread_ir import Imm, ProxyFence, SharedStore, Wgmma, WgmmaWait, k_step
from ..errors import TileCompilerError


def wgmma_shape(lc: WgmmaLayout) -> tuple[int, int, int, int]:
    """``(MB, NB, N, columns)`` of a warpgroup's share of the result in ``lc``: 64-row
    blocks, instructions along n, their N, and the share's columns (``NB * N``)."""
    rows, cols = lc.dim_bits(0), lc.dim_bits(1)
    mb = 1 << (sum(1 for b in lc.reg if b in rows) - 1)  # (register bit 1 is row 8 of each block)
    n_wg = 1 << (len(cols) - sum(1 for w in lc.warp if w is not None and w in cols))
    n = min(n_wg, 256)
    return mb, n_wg // n, n, n_wg


def operand_tile(lc: WgmmaLayout, role: int, stored, transposed: bool) -> tuple[SwizzledTile, bool]:
    """The swizzled tile operand ``role`` (0: a, 1: b) is stored as, a tile of the type
    ``stored`` (the operand's, or the tile's it is the transpose of), and whether the tensor
    cores read it K-major (8-bit operands must be: ``k_major_only``)."""
    _, _, n, _ = wgmma_shape(lc)
    k_major = transposed == (role == 1)
    rows, cols = (pow2_ceil(s) for s in stored.shape)
    itemsize = stored.dtype.itemsize
    tile = SwizzledTile.fitting(rows, cols, None if k_major else (64 if role == 0 else n), itemsize)
    if tile is None or not k_major and k_major_only(stored.dtype):
        raise TileCompilerError(f"wgmma: no swizzled layout for a {rows}x{cols} {stored.dtype.name} operand tile")
    return tile, k_major


def operand_wants(layouts: dict, eqn, i: int):
    """Any layout that holds each word's two elements in one thread (a load's, an
    accumulator's); else the blocked one."""
    x = eqn.inputs[i]
    have = layouts.get(x)
    if have is not None and stored_as_words(x.type, have):
        return None
    return blocked(x.type.shape, 2, layouts[eqn.outputs[0]].num_threads)


def lower_wgmma(lw, eqn, a, b, acc):
    lc = lw.layout(eqn.outputs[0])
    mb, nb, n, _ = wgmma_shape(lc)
    operands, staged, a_regs = [], [], register_operand(lw, lc, a)
    for role, x in ((0, a), (1, b)):
        if role == 0 and a_regs is not None:  # the words of a's fragments, in registers
            _, a_nb, a_n, _ = wgmma_shape(lw.layout(a))
            operands += [None, None, RegisterTile(a_n, a_nb), True]
            continue
        if x in lw.in_shared:  # copied ahead by the pipeline, or staged before the loop
            buffer, base, tile, transposed = lw.in_shared[x]
            k_major = transposed == (role == 1)  # (one tile may be read as either operand)
        else:
            y, transposed = (lw.transposed[x], True) if x in lw.transposed else (x, False)
            (buffer, tile, k_major), base = _stage(lw, lc, role, y, transposed), Imm(0, i32)
            staged.append(buffer)
        # the warpgroup's first row of a (column of b): its thread coordinate's bits above its share
        share = 64 * mb if role == 0 else n * nb
        start = lw.op(i32, "and", lw.thread_coord(lc, role), Imm(-share, i32))
        corner = tile.logical_op(lw, start, Imm(0, i32)) if k_major else tile.logical_op(lw, Imm(0, i32), start)
        operands += [buffer, lw.op(i32, "add", base, lw.op(i32, "shr", corner, Imm(2, i32))), tile, k_major]
    if staged:  # every thread's stores visible to the tensor cores of every warpgroup
        lw.stmts.append(ProxyFence())
        lw.barrier()
    c = lw.regs(acc, lc)
    pending = int(id(eqn) in lw.overlapped)
    zero = isinstance(c, Imm) and c.value == 0 and not pending  # (`dot(a, b)`: nothing to add)
    c = None if zero else all_slots(lw, c, lc.num_regs)
    # left in flight, the dot accumulates into the loop's own registers in place: a copy
    # would read them before they land (ptxas would then wait for the dot right there)
    dst = c if pending else lw.reg(D.float32, lc.num_regs, "acc")
    ks = pow2_ceil(a.type.shape[1]) // k_step(a.type.dtype)
    dtypes = (a.type.dtype, b.type.dtype)
    lw.stmts.append(Wgmma(dst, c, *operands, (mb, nb, n, ks), dtypes, pending, a_regs))
    if not pending:  # (moved to where the result is first needed: place_wgmma_waits.py)
        lw.stmts.append(WgmmaWait(dst, 0))
    lw.release(*staged)
    output(lw, eqn, dst)


def register_fragments(la, lc: WgmmaLayout) -> bool:
    """Whether an ``a`` in layout ``la`` is the register operand of the dot whose result is
    ``lc``: held as the accumulator of an ``m64nK`` dot is held (layout.py ``wgmma_layout``
    of its shape), every warpgroup holding whole rows, as ``lc``'s warpgroups split the rows
    the same way (both layouts split m first by the same rule)."""
    if not isinstance(la, WgmmaLayout):
        return False
    want = wgmma_layout(*la.shape, 16, lc.num_threads)
    if want is None or (la.shape, la.reg, la.lane, la.warp) != (want.shape, want.reg, want.lane, want.warp):
        return False
    return not any(w is not None and w in la.dim_bits(1) for w in la.warp)  # (else warpgroups hold part of each row)


def register_operand(lw, lc: WgmmaLayout, a):
    """``a``'s uint32 words (its padding along k zeroed) when it is read from its registers
    (``register_fragments``), else None."""
    if a in lw.in_shared or a in lw.transposed or a.type.dtype.bits != 16 or not register_fragments(lw.layout(a), lc):
        return None
    return zero_padding(lw, lw.words(a, lw.layout(a)), lw.layout(a), 1)


def stage_invariant_operands(lw, body: Block) -> list:
    """Operands of the wgmma dots of a loop ``body`` (or of loops nested in it) computed before
    the loop (attention's queries) stored to their swizzled tiles once, before it, not every
    iteration (each store also cost a proxy fence and a barrier; and the loaded registers, held
    to the next iteration, stayed live through the nested loops: the dk/dv kernel's keys and
    values over its loop of query heads); one stored before an earlier loop is read where it
    is (a kernel's two loops over the same queries). Returns the values so staged:
    ``lw.in_shared`` holds them until the loop ends; their tiles are held to the kernel's end
    (what makes a store before the outermost loop right: nothing reuses the tile, and loops
    are the only blocks that nest)."""
    blocks = list(nested_blocks(body))
    eqns = [e for b in blocks for e in b.eqns]
    inside = {p for b in blocks for p in b.params} | {out for e in eqns for out in e.outputs}
    used, staged, stored = uses(body), [], []
    transposes = {e.outputs[0]: e.inputs[0] for e in eqns if is_matrix_transpose(e)}
    for eqn in eqns:
        if eqn.prim.name != "dot" or not isinstance(lw.layout(eqn.outputs[0]), WgmmaLayout):
            continue
        for role, x in enumerate(eqn.inputs[:2]):
            # (``k.T`` in the loop of a ``k`` from before it, or a ``k.T`` from before it, folded: stored transposed)
            y = transposes.get(x) or lw.transposed.get(x, x)
            if not isinstance(x, Var) or y in inside or x in lw.in_shared or used.get(x, []) != [eqn]:
                continue
            if eqn.inputs[1 - role] is x or (y is not x and not stored_as_words(y.type, lw.layout(y))):
                continue  # (x @ x.T: two tiles of one value)
            tile, _ = operand_tile(lw.layout(eqn.outputs[0]), role, y.type, y is not x)
            # stored before an earlier loop of this block (its statements: so it ran) is still there
            buffer, block = lw.staged.get((y, tile, y is not x), (None, None))
            if block is not lw.stmts:
                if not stored:  # (the loop may run again, in another: its last dots are done reading)
                    lw.barrier()
                buffer, tile, _ = _stage(lw, lw.layout(eqn.outputs[0]), role, y, y is not x)
                lw.staged[y, tile, y is not x] = buffer, lw.stmts
                stored.append(x)
            lw.in_shared[x] = InShared(buffer, Imm(0, i32), tile, y is not x)
            staged.append(x)
    if stored:
        lw.stmts.append(ProxyFence())
        lw.barrier()
    return staged


def _stage(lw, lc: WgmmaLayout, role: int, y, transposed: bool) -> tuple[str, SwizzledTile, bool]:
    """Operand ``role`` stored from the registers of ``y`` (the operand, or with ``transposed``
    the tile it is the transpose of) to a fresh swizzled tile: ``(buffer, tile, K-major)``."""
    tile, k_major = operand_tile(lc, role, y.type, transposed)
    buffer = lw.buffer(D.uint32, tile.words, "swizzled")
    _store(lw, y, tile, buffer, k_axis=0 if transposed == (role == 0) else 1)
    return buffer, tile, k_major


def _store(lw, y, tile: SwizzledTile, buffer: str, k_axis: int):
    """``y``'s words into ``buffer`` as ``tile`` lays them out, zero past the tile along k."""
    layout, per = lw.layout(y), 4 // y.type.dtype.itemsize
    if not stored_as_words(y.type, layout):
        raise TileCompilerError(f"wgmma: operand in layout {layout} is not held {per} elements to a word")
    words = zero_padding(lw, lw.words(y, layout), layout, k_axis, per)
    chunk = 16 // y.type.dtype.itemsize
    if layout.vector_width() >= chunk:  # a thread's 16 bytes of a row: a chunk the swizzle moves whole
        at = tile.group_words(lw, layout, chunk, Imm(0, i32))
        lw.stmts.append(SharedStore(buffer, at, words, lw.owner(layout), lanes=4))
        return
    r, c = lw.coords(layout, lanes=per)
    lw.stmts.append(SharedStore(buffer, tile.word_op(lw, r, c), words, lw.owner(layout)))


def overlapped_dots(body: Block, copies) -> dict:
    """The wgmma dots of a pipelined loop's ``body`` that may stay in flight into the next
    iteration (``wgmma.wait_group 1``), by id: both operands copied ahead (``copies``) and
    the result only the accumulator the next iteration's same dot adds to, and the loop's."""
    used, copied = uses(body), {id(dot) for c in copies if c.wgmma() for dot in c.dots()}
    carried = dict(zip(body.results, body.params[1:]))
    out = {}
    for eqn in body.eqns:
        if eqn.prim.name != "dot" or id(eqn) not in copied or eqn.outputs[0] not in carried:
            continue
        param = carried[eqn.outputs[0]]
        both = sum(dot is eqn for c in copies if c.wgmma() for dot in c.dots()) == 2
        if both and used.get(param, []) == [eqn] and eqn.inputs[2] is param and used[eqn.outputs[0]] == [None]:
            out[id(eqn)] = eqn
    return out


def folded_wgmma_transposes(lw, block: Block) -> dict:
    """Lower rules (by equation id) for the transposes of ``block`` whose only use is a
    wgmma operand: they emit nothing, the dot stores the transposed tile as it is."""
    used, rules = uses(block), {}
    for eqn in block.eqns:
        if not is_matrix_transpose(eqn):
            continue
        users, y = used.get(eqn.outputs[0], []), eqn.inputs[0]
        if len(users) != 1 or users[0] is None or not is_wgmma_operand(lw, users[0], eqn.outputs[0]):
            continue
        if not stored_as_words(y.type, lw.layout(y)):
            continue

        def fold(lw, eqn, y, **params):
            lw.transposed[eqn.outputs[0]] = y

        rules[id(eqn)] = fold
    return rules


def is_matrix_transpose(eqn) -> bool:
    """Whether ``eqn`` is ``x.T`` of a 2-d tile."""
    return eqn.prim.name == "transpose" and eqn.params["perm"] == (1, 0)


def is_wgmma_operand(lw, user, x) -> bool:
    """Whether ``user`` is a dot on wgmma taking ``x`` as ``a`` or ``b``."""
    return (
        user.prim.name == "dot"
        and isinstance(lw.layout(user.outputs[0]), WgmmaLayout)
        and any(x is v for v in user.inputs[:2])
    )


def wgmma_plan(lc: WgmmaLayout, dtypes, k: int, a_in_registers: bool) -> str:
    """The layouts stage's line for a dot on wgmma (operands of ``dtypes``)."""
    mb, nb, n, n_wg = wgmma_shape(lc)
    groups = lc.num_threads // 128
    gm = 1 << sum(1 for w in lc.warp[2:] if w is not None and w in lc.dim_bits(0))
    step, kinds = k_step(dtypes[0]), ".".join(ptx_type(d) for d in dict.fromkeys(dtypes))
    return (
        f"tensor cores, wgmma.m64n{n}k{step}.{kinds} (sm_90a): {gm} x {groups // gm} warpgroups (m x n), "
        f"each {mb} x {nb} instructions of 64x{n}, {pow2_ceil(k) // step} k-steps of {step}; "
        + (f"a from its registers, b from a {n_wg}-column" if a_in_registers else f"operands from {n_wg}-column")
        + (" swizzled shared tile" if a_in_registers else " swizzled shared tiles")
    )
