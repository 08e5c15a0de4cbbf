"""Layouts: which thread holds which elements of a tile.

A tile of shape ``S`` is padded to powers of two ``P`` (the padding elements are
"phantoms": never loaded, stored or reduced) and numbered row-major; element ``f`` of the
padded tile has ``log2(prod(P))`` index bits. A layout assigns every index bit to one bit
of a hardware index: the register slot, the lane (5 bits) or the warp. Element
``f = reg_part(r) | lane_part(lane) | warp_part(warp)``. A hardware bit assigned no index
bit (``None``) means the threads differing in that bit hold the same elements
(replication: only the thread with that bit 0 stores them).

This is Triton's idea of linear layouts restricted to bit permutations. It makes the
questions the lowering asks mechanical:

- converting a value between two layouts is free (a renaming of registers) when both put
  the same index bits on the same lane and warp bits; otherwise it goes through shared
  memory;
- reducing along an axis: register bits of that axis reduce inside a thread, lane bits
  with warp shuffles, warp bits through shared memory; the result's layout is the input's
  with that axis's bits removed (its lane and warp bits become replication).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


def pow2_ceil(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def padded_size(shape) -> int:
    """Elements of a tile of ``shape`` with each dimension padded to a power of two."""
    size = 1
    for s in shape:
        size *= pow2_ceil(s)
    return size


def log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    reg: tuple[int, ...]  # index bit of each register-slot bit
    lane: tuple[int | None, ...]  # 5 entries
    warp: tuple[int | None, ...]  # log2(warps) entries

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(pow2_ceil(s) for s in self.shape)

    @property
    def num_regs(self) -> int:
        return 1 << len(self.reg)

    @property
    def num_threads(self) -> int:
        return 32 << len(self.warp)

    def dim_bits(self, d: int) -> range:
        """The index bits of dimension ``d``."""
        low = _dim_start(self.shape, d)
        return range(low, low + log2(self.padded[d]))

    def hardware(self):
        """``(thread-id bit, index bit or None)`` for every lane and warp bit."""
        return list(enumerate(self.lane + self.warp))

    def reg_index(self, r: int) -> int:
        """The padded flat index contributed by register slot ``r``."""
        return sum(1 << b for i, b in enumerate(self.reg) if r >> i & 1)

    def coords(self, flat: int) -> tuple[int, ...]:
        out = []
        for d in range(len(self.shape)):
            bits = self.dim_bits(d)
            out.append((flat >> bits.start) & ((1 << len(bits)) - 1))
        return tuple(out)

    def reg_coords(self, r: int) -> tuple[int, ...]:
        """Per-dimension coordinate offsets of register slot ``r`` (added to the thread's)."""
        return self.coords(self.reg_index(r))

    def thread_terms(self, d: int):
        """How dimension ``d``'s thread coordinate is made from the thread id: a list of
        ``(shift, mask, left)`` meaning ``((tid >> shift) & mask) << left``, runs merged."""
        bits = self.dim_bits(d)
        pairs = sorted((b - bits.start, t) for t, b in self.hardware() if b is not None and b in bits)
        terms = []
        for pos, t in pairs:
            if terms and terms[-1][0] + log2(terms[-1][1] + 1) == t and terms[-1][2] + log2(terms[-1][1] + 1) == pos:
                shift, mask, left = terms[-1]
                terms[-1] = (shift, mask * 2 + 1, left)
            else:
                terms.append((t, 1, pos))
        return terms

    def replicated_bits(self) -> list[int]:
        """Thread-id bits along which this layout is replicated."""
        return [t for t, b in self.hardware() if b is None]

    def vector_width(self) -> int:
        """How many consecutive elements of the last dimension sit in consecutive registers."""
        if not self.shape:
            return 1
        last = self.dim_bits(len(self.shape) - 1)
        n = 0
        while n < len(self.reg) and self.reg[n] == last.start + n and last.start + n in last:
            n += 1
        return 1 << n

    def __str__(self):
        def fmt(bits):
            return "[" + ",".join("-" if b is None else str(b) for b in bits) + "]"

        shape = "x".join(map(str, self.shape)) or "scalar"
        return f"{shape} reg={fmt(self.reg)} lane={fmt(self.lane)} warp={fmt(self.warp)}"


def _assign(shape, reg_first, order, num_threads):
    """Give index bits, in ``order``, first to ``reg_first`` register bits, then lanes, then
    warps, then the remaining registers."""
    order = list(order)
    reg = order[:reg_first]
    rest = order[reg_first:]
    nwarp = log2(num_threads) - 5
    lane = tuple(rest[i] if i < len(rest) else None for i in range(5))
    warp = tuple(rest[5 + i] if 5 + i < len(rest) else None for i in range(nwarp))
    reg += rest[5 + nwarp :]
    return Layout(tuple(shape), tuple(reg), lane, warp)


def scalar_layout(num_threads: int) -> Layout:
    """The layout of a 0-d value: every thread holds it."""
    nwarp = (num_threads // 32).bit_length() - 1
    return Layout((), (), (None,) * 5, (None,) * nwarp)


def blocked(shape, itemsize: int, num_threads: int, lane_first: bool = False) -> Layout:
    """The default layout: row-major, each thread holding up to 16 bytes of consecutive
    elements of the last dimension, consecutive threads on consecutive vectors (so a
    warp's loads coalesce), repeated over the tile. ``lane_first``: each warp holds the same
    elements, but consecutive lanes hold consecutive elements (a vector's register bits
    exchanged with the first lanes'), so accesses one element wide coalesce."""
    total = sum(log2(pow2_ceil(s)) for s in shape)
    last = log2(pow2_ceil(shape[-1])) if shape else 0
    vec = min(log2(max(16 // itemsize, 1)), last, max(total - log2(num_threads), 0))
    order = range(total)
    if lane_first and vec:  # (then total >= vec + 5: every thread holds a vector)
        order = [*range(5, vec + 5), *range(5), *range(vec + 5, total)]
    return _assign(shape, vec, order, num_threads)


def sliced(layout: Layout, axis: int) -> Layout:
    """The layout of a reduction's result along ``axis``: that axis's bits removed."""
    gone = layout.dim_bits(axis)
    width = len(gone)

    def move(b):
        if b is None or b in gone:
            return None
        return b - width if b >= gone.stop else b

    shape = layout.shape[:axis] + layout.shape[axis + 1 :]
    reg = tuple(move(b) for b in layout.reg if b not in gone)
    return Layout(shape, reg, tuple(map(move, layout.lane)), tuple(map(move, layout.warp)))


def reshaped(layout: Layout, shape) -> Layout | None:
    """``layout`` for ``shape`` when the padded flat numbering is unchanged, else None: size-1
    axes added or removed, and axes merged or split where every part but the highest is a
    power of two (``(M, 13, 2)`` and ``(M, 26)`` number their elements alike, padded to
    ``(M, 16, 2)`` and ``(M, 32)``; ``(M, 13, 3)`` and ``(M, 39)`` do not)."""
    old = [s for s in layout.shape if s != 1]
    new = [s for s in shape if s != 1]
    while old and new:  # (from the lowest bits: a power of two split off the larger is the other's axis)
        a, b = old[-1], new[-1]
        if a == b:
            old.pop(), new.pop()
        elif a < b and b % a == 0 and pow2_ceil(a) == a:
            old.pop()
            new[-1] = b // a
        elif b < a and a % b == 0 and pow2_ceil(b) == b:
            new.pop()
            old[-1] = a // b
        else:
            return None
    if old or new:
        return None
    return Layout(tuple(shape), layout.reg, layout.lane, layout.warp)


def matmul_result(m: int, n: int, num_threads: int) -> Layout:
    """The layout of a dot's result on CUDA cores: each thread a 2-d block of registers, so
    every operand value it reads from shared memory serves a row or column of products.

    A thread holds 4 consecutive columns and 4 consecutive rows (one 16-byte shared read
    each where an operand is stored along them; 16-byte stores of the result), lanes take
    8 column groups then 4 row groups (a quarter warp reads 128 consecutive bytes of ``b``
    and one row of ``a``: no bank conflict), then each thread repeats its block once more
    along n and m (8 x 8 registers for 128 x 128 on 256 threads), and warps split the rest."""
    pm, pn = log2(pow2_ceil(m)), log2(pow2_ceil(n))
    per_thread = max(pm + pn - log2(num_threads), 0)
    rest_n, rest_m = list(range(pn)), list(range(pn, pn + pm))  # index bits: n is the low dimension
    tn = min(pn, 2, per_thread)
    tm = min(pm, 2, per_thread - tn)
    reg, rest_n, rest_m = rest_n[:tn] + rest_m[:tm], rest_n[tn:], rest_m[tm:]
    lane = rest_n[:3] + rest_m[:2]
    rest_n, rest_m = rest_n[3:], rest_m[2:]
    rest = [b for pair in itertools.zip_longest(rest_n, rest_m) for b in pair if b is not None]
    lane, rest = lane + rest[: 5 - len(lane)], rest[5 - len(lane) :]  # (a narrow tile: more lanes on one side)
    outer = per_thread - len(reg)
    reg, rest = reg + rest[:outer], rest[outer:]
    nwarp = log2(num_threads) - 5
    pad = [None] * 8
    return Layout((m, n), tuple(reg), tuple((lane + pad)[:5]), tuple((rest + pad)[:nwarp]))


MMA_DTYPES = ("float16", "bfloat16")  # operands of mma.sync m16n8k16 with float32 accumulation


def mma_layouts(m: int, n: int, k: int, num_threads: int, tf32: bool = False):
    """The layouts of ``a (m, k)``, ``b (k, n)`` and the float32 result ``(m, n)`` of a dot
    on tensor cores (``mma.sync.m16n8k16``; with ``tf32``, ``m16n8k8`` on float32 operands
    rounded to TF32), or None when a tile is smaller than one fragment (16 x 16 of ``a``,
    16 x 8 of ``b``; 16 x 8 and 8 x 8 with ``tf32``).

    Warps split the result over m and n (each warp bit to the dimension whose per-warp
    extent is larger; bits left over replicate), each warp a ``MI x NI`` grid of 16 x 8
    fragments, ``KI`` k-steps of 16. In each fragment lane ``l`` holds, as the PTX ISA
    places them, rows ``l // 4 (+8)`` and column pairs ``2 * (l % 4) (+8)``: the lane bits
    are index bits, the register bits listed first are a fragment's, so fragment ``(i, j)``
    of the result is slots ``4 * (j + NI * i)`` to ``+ 3``, fragment ``(i, kk)`` of ``a``
    slots ``8 * (kk + KI * i)`` to ``+ 7`` and ``(kk, j)`` of ``b`` ``4 * (kk + KI * j)`` to
    ``+ 3`` (two 16-bit values to each 32-bit word of the instruction, lower slot low).
    TF32 fragments hold one value a word: lane ``l`` holds ``a``'s rows ``l // 4 (+8)``,
    columns ``l % 4 (+4)``, ``b``'s rows ``l % 4 (+4)``, column ``l // 4``; fragment
    ``(i, kk)`` of ``a`` is slots ``4 * (kk + KI * i)`` to ``+ 3``, ``(kk, j)`` of ``b``
    ``2 * (kk + KI * j)`` and ``+ 1``."""
    pm, pn, pk = (log2(pow2_ceil(s)) for s in (m, n, k))
    step = 3 if tf32 else 4  # log2 of a k-step
    if pm < 4 or pn < 3 or pk < step:
        return None
    warps, wm, wn = [], 0, 0
    for _ in range(log2(num_threads) - 5):
        if pm - wm >= pn - wn and pm - wm > 4:
            warps.append(("m", wm))
            wm += 1
        elif pn - wn > 3:
            warps.append(("n", wn))
            wn += 1
        else:
            warps.append(None)
    mi, ni = pm - 4 - wm, pn - 3 - wn  # log2 of fragments per warp along m and n

    def warp_bits(m_bit, n_bit):  # a warp bit: its dimension's next bit above the fragments
        out = []
        for w in warps:
            first = None if w is None else (m_bit if w[0] == "m" else n_bit)
            out.append(None if first is None else first + w[1])
        return tuple(out)

    # index bits: of the result (m, n) n low then m; of a (m, k) k then m; of b (k, n) n then k
    rm, am, bk = pn, pk, pn  # where the m bits of the result and of a, and the k bits of b, start
    k_steps = range(step, pk)
    result = Layout(
        (m, n),
        (0, rm + 3, *(3 + j for j in range(ni)), *(rm + 4 + j for j in range(mi))),
        (1, 2, rm, rm + 1, rm + 2),
        warp_bits(rm + 4 + mi, 3 + ni),
    )
    a_regs = (am + 3, 2) if tf32 else (0, am + 3, 3)  # a fragment's registers: (row +8, column +4) or as m16n8k16
    a = Layout(
        (m, k),
        (*a_regs, *k_steps, *(am + 4 + j for j in range(mi))),
        (0, 1, am, am + 1, am + 2) if tf32 else (1, 2, am, am + 1, am + 2),
        warp_bits(am + 4 + mi, None),
    )
    b_regs = (bk + 2,) if tf32 else (bk, bk + 3)
    b = Layout(
        (k, n),
        (*b_regs, *(bk + j for j in k_steps), *(3 + j for j in range(ni))),
        (bk, bk + 1, 0, 1, 2) if tf32 else (bk + 1, bk + 2, 0, 1, 2),
        warp_bits(None, 3 + ni),
    )
    return a, b, result


class WgmmaLayout(Layout):
    """The float32 accumulator of ``wgmma.mma_async`` (sm_90a), a layout like any other to
    the ops that read it; its own class so the dot that makes it knows it is on wgmma."""


def wgmma_layout(m: int, n: int, k: int, num_threads: int) -> WgmmaLayout | None:
    """The accumulator layout of a dot on warpgroup tensor cores (``m64nNk16``), or None
    when the tiles do not fit them: at least 64 x 16 x 16 a warpgroup (128 threads; an
    8-column operand has no swizzled shared layout), every warpgroup its own share (no
    replication), at most 256 columns per instruction, and every operand at least two
    elements a thread (its words go to shared memory whole).

    Warpgroups (4 consecutive warps) split the result over m first, then n; each holds
    ``MB`` blocks of 64 rows of an ``N``-wide instruction repeated ``NB`` times along n. The
    PTX ISA places accumulator ``i`` of thread ``l`` of warp ``w`` (of the warpgroup) at row
    ``16 w + l // 4 + 8 (i // 2 % 2)``, column ``8 (i // 4) + 2 (l % 4) + i % 2``: slots
    ``N / 2 * (nb + NB * mb)`` onwards are instruction ``(mb, nb)``."""
    pm, pn, pk = (log2(pow2_ceil(s)) for s in (m, n, k))
    groups = log2(num_threads) - 7
    if pm < 6 or pn < 4 or pk < 4 or groups < 0 or min(pm, pn) + pk < log2(num_threads) + 1:
        return None
    gm = min(groups, pm - 6)  # warpgroup bits along m, the rest along n
    gn = groups - gm
    if pn - gn < 4:
        return None
    mb, n_wg = pm - 6 - gm, pn - gn  # log2: 64-row blocks per warpgroup, columns per warpgroup
    n_instr = min(n_wg, 8)  # log2 of an instruction's N
    rm = pn  # the m bits of the result start here
    reg = (0, rm + 3, *range(3, n_instr), *range(n_instr, n_wg), *(rm + 6 + j for j in range(mb)))
    warp = (rm + 4, rm + 5, *(rm + 6 + mb + j for j in range(gm)), *(n_wg + j for j in range(gn)))
    return WgmmaLayout((m, n), reg, (1, 2, rm, rm + 1, rm + 2), warp)


def permuted(layout: Layout, perm) -> Layout:
    """The layout of ``transpose(x, perm)`` that leaves every element of ``x`` (in ``layout``)
    where it is: the same registers, lanes and warps, index bits renumbered for the
    permuted shape (result axis ``k`` is input axis ``perm[k]``)."""
    shape = tuple(layout.shape[p] for p in perm)
    moved = {}
    for k, p in enumerate(perm):
        for offset, b in enumerate(layout.dim_bits(p)):
            moved[b] = _dim_start(shape, k) + offset

    def move(b):
        return None if b is None else moved[b]

    return Layout(shape, tuple(map(move, layout.reg)), tuple(map(move, layout.lane)), tuple(map(move, layout.warp)))


def unbroadcast(layout: Layout, shape) -> Layout:
    """The layout a value of ``shape`` (``layout``'s shape with some axes of size 1) must
    have for broadcasting it to ``layout`` to move no data: the same threads hold each kept
    element, and the threads along a broadcast axis all hold a copy (replication)."""

    def project(b):
        if b is None:
            return None
        d = next(d for d in range(len(shape)) if b in layout.dim_bits(d))
        if shape[d] == 1 and layout.shape[d] != 1:
            return None
        return b - layout.dim_bits(d).start + _dim_start(shape, d)

    reg = tuple(project(b) for b in layout.reg if project(b) is not None)
    return Layout(tuple(shape), reg, tuple(map(project, layout.lane)), tuple(map(project, layout.warp)))


def joined(layout: Layout) -> Layout:
    """The layout of ``join(a, b)`` (shape ``(*s, 2)``) for operands in ``layout``: the new
    axis is index bit 0, on the lowest register bit, so each thread holds both operands'
    elements where it held each, and joining moves no data."""

    def up(b):
        return None if b is None else b + 1

    return Layout(
        (*layout.shape, 2), (0, *map(up, layout.reg)), tuple(map(up, layout.lane)), tuple(map(up, layout.warp))
    )


def pair_in_registers(layout: Layout) -> Layout:
    """``layout`` with index bit 0 (a last axis of size 2) on a register bit, so each thread
    holds both elements of every pair it holds (what ``split`` takes apart): unchanged when
    it is, else exchanged with the index bit of the lowest register bit, or (no registers)
    its thread bit made a replication."""
    if 0 in layout.reg:
        return layout
    other = layout.reg[0] if layout.reg else None

    def swap(b):
        return other if b == 0 else b

    reg = (0, *layout.reg[1:])
    return Layout(layout.shape, reg, tuple(map(swap, layout.lane)), tuple(map(swap, layout.warp)))


def slice_fixed_bits(layout: Layout, starts, steps, shape) -> dict | None:
    """For a slice of a tile in ``layout`` (per axis a start, step and size: see the ``slice``
    primitive) that takes on each axis an aligned run of a power-of-two length (or one
    element), the index bits it fixes and their values; None for any other slice."""
    fixed = {}
    for d, (n, start, step, size) in enumerate(zip(layout.shape, starts, steps, shape)):
        if (start, step, size) == (0, 1, n):
            continue
        if size & (size - 1) or start % size or step != 1 and size > 1:
            return None
        for k, b in enumerate(layout.dim_bits(d)):
            if k >= log2(size):
                fixed[b] = (start >> k) & 1
    return fixed


def selected(layout: Layout, shape, fixed: dict) -> Layout | None:
    """The layout of the part of ``layout``'s tile (of ``shape``) whose index bits ``fixed``
    have fixed values, with no data through shared memory: those bits removed where they
    are register bits (each thread keeps the elements it held), made replication where they
    are lane bits (each lane gets its partner's by a shuffle); None if a warp holds one."""
    if any(b in layout.warp for b in fixed):
        return None

    def move(b):
        return None if b is None or b in fixed else b - sum(1 for f in fixed if f < b)

    reg = tuple(move(b) for b in layout.reg if b not in fixed)
    return Layout(tuple(shape), reg, tuple(map(move, layout.lane)), tuple(map(move, layout.warp)))


def _dim_start(shape, d) -> int:
    """The lowest index bit of dimension ``d`` of a tile of ``shape``."""
    return sum(log2(pow2_ceil(s)) for s in shape[d + 1 :])


def same_threads(a: Layout, b: Layout) -> bool:
    """Whether every thread holds the same elements in ``a`` and ``b``: converting is then a
    renaming of register slots, no data moves."""
    return a.shape == b.shape and a.lane == b.lane and a.warp == b.warp
