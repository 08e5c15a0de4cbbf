"""Shared-memory tiles as dots read them: for warpgroup tensor cores (``wgmma``, sm_90a),
16- and 8-bit 2-d tiles in the PTX ISA's swizzled canonical layouts, and the matrix
descriptors that point ``wgmma`` at them; for CUDA cores, :class:`OperandTile`.

A tile of ``rows x cols`` elements (powers of two; ``cols`` the dimension contiguous in
memory) of ``itemsize`` bytes is stored as column blocks of ``width`` bytes (32, 64 or
128): block ``j`` holds columns ``j * width / itemsize`` onwards of every row, rows
``width`` bytes apart, blocks one after another. Within each 8-row group the 16-byte
chunks of a row are XOR-swizzled by the row (``Swizzle<b,4,3>``: byte-address bits 4.. ^=
bits 7..), so the eight rows of a group land in distinct banks for the copies that write
them and for the tensor cores that read them. The swizzle acts on the absolute shared
address: tiles start 1024-byte aligned.

Read as a wgmma operand the tile is *K-major* when ``cols`` is the k dimension (``a`` as
loaded, ``b`` given as ``w.T``) and *MN-major* when ``cols`` is m or n (``b`` as loaded,
``a`` given as ``x.T``); the descriptor's strides say which (:meth:`SwizzledTile.strides`).
8-bit operands are read K-major only (the PTX ISA's rule for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as D
from .layout import log2
from .thread_ir import Imm, SlotMap

ALIGNMENT = 1024  # bytes: one period of the 128-byte swizzle
MODE = {128: 1, 64: 2, 32: 3}  # the descriptor's layout-type field (bits 62-63) per swizzle width


def ptx_type(d: D.DType) -> str:
    """The PTX ISA's name of a wgmma operand type: f16, bf16, e4m3, e5m2."""
    return d.short.removeprefix("f8")


def k_major_only(d: D.DType) -> bool:
    """Whether wgmma reads operands of dtype ``d`` K-major only (8-bit ones: the PTX ISA's rule)."""
    return d.bits == 8


@dataclass(frozen=True)
class SwizzledTile:
    rows: int
    cols: int
    width: int  # bytes per row of a column block: 32, 64 or 128
    itemsize: int = 2  # bytes per element: 2 or 1

    @staticmethod
    def fitting(rows: int, cols: int, mn_extent: int | None = None, itemsize: int = 2) -> SwizzledTile | None:
        """The widest swizzle for a ``rows x cols`` tile of ``itemsize``-byte elements; for an
        MN-major operand ``mn_extent`` (the columns one instruction reads) must be whole
        column blocks. None when the tile is narrower than the narrowest swizzle (32 bytes)."""
        width = min(128, itemsize * cols, itemsize * (mn_extent or cols))
        return SwizzledTile(rows, cols, width, itemsize) if width >= 32 else None

    @property
    def words(self) -> int:
        """32-bit words the tile takes, rounded up to the alignment (a ring's stages stay aligned)."""
        return -(-self.rows * self.cols * self.itemsize // ALIGNMENT) * ALIGNMENT // 4

    @property
    def per_block(self) -> int:
        """Elements of a row in one column block."""
        return self.width // self.itemsize

    def logical(self, r: int, c: int) -> int:
        """Byte offset of element ``(r, c)`` before the swizzle (what descriptors point at)."""
        per_block = self.per_block
        return (c // per_block) * self.rows * self.width + r * self.width + (c % per_block) * self.itemsize

    def logical_op(self, lw, r, c):
        """:meth:`logical` on registers (int32 thread-IR ops of the builder ``lw``)."""
        i32, per_block = D.int32, self.per_block
        block = lw.op(i32, "shr", c, _imm(log2(per_block)))
        out = lw.op(i32, "mul", block, _imm(self.rows * self.width))
        out = lw.op(i32, "add", out, lw.op(i32, "mul", r, _imm(self.width)))
        within = lw.op(i32, "shl", lw.op(i32, "and", c, _imm(per_block - 1)), _imm(log2(self.itemsize)))
        return lw.op(i32, "add", out, within)

    def word_op(self, lw, r, c):
        """The 32-bit word holding element ``(r, c)`` (the first of a word's) after the swizzle."""
        i32, at = D.int32, self.logical_op(lw, r, c)
        chunk = lw.op(i32, "and", lw.op(i32, "shr", at, _imm(7)), _imm(self.width // 16 - 1))
        return lw.op(i32, "shr", lw.op(i32, "xor", at, lw.op(i32, "shl", chunk, _imm(4))), _imm(2))

    def group_words(self, lw, layout, lanes: int, plus):
        """:meth:`word_op` of the first element of each group of ``lanes`` slots of ``layout``
        (a copy's destinations), ``+ plus`` (a word offset, the same for every slot). Where
        every slot bit moves the element by whole swizzle periods (``8 * width`` bytes: whole
        8-row groups or column blocks), the XOR depends on the thread alone: its corner is
        swizzled once, ``plus`` added, and each slot adds a constant last (an immediate offset
        of the copy instruction, not a swizzle computed per copy)."""
        pairs, low = [], log2(lanes)
        for d in range(2):
            bits = layout.dim_bits(d)
            for i, b in enumerate(layout.reg):
                if b in bits and i >= low:
                    unit = [0, 0]
                    unit[d] = 1 << (b - bits.start)
                    byte = self.logical(*unit)
                    pairs.append((i - low, byte))
        if any(byte % (8 * self.width) for _, byte in pairs) or len({b for _, b in pairs}) < len(pairs):
            return lw.op(D.int32, "add", self.word_op(lw, *lw.coords(layout, lanes)), plus)
        corner = lw.op(D.int32, "add", self.word_op(lw, *(lw.thread_coord(layout, d) for d in range(2))), plus)
        slots = SlotMap.of_bits([(i, log2(byte // 4)) for i, byte in pairs])
        return lw.op(D.int32, "add", corner, lw.op(D.int32, "slot", attr=slots, n=layout.num_regs // lanes))

    def strides(self, k_major: bool) -> tuple[int, int]:
        """The descriptor's (leading, stride) byte offsets: K-major, the leading one is unused
        (16 by convention) and 8-row groups are ``8 * width`` apart; MN-major, column blocks
        are ``rows * width`` apart and groups of 8 k-rows ``8 * width``."""
        return (16 if k_major else self.rows * self.width), 8 * self.width

    def start(self, mn: int, k: int, k_major: bool) -> int:
        """Byte offset of the corner ``(mn, k)`` of an instruction's operand block."""
        return self.logical(mn, k) if k_major else self.logical(k, mn)


@dataclass(frozen=True)
class RegisterTile:
    """A wgmma ``a`` operand in registers (``Wgmma.a_regs``): uint32 words of two 16-bit
    elements held as the accumulator of ``m64nN`` instructions holds its result, ``nb`` of
    them along k (attention's probabilities, as the dot of the scores left them). The PTX
    ISA's register fragment of a k-step is the accumulator of an ``m64n16`` instruction, so
    k-step ``kk`` of 64-row block ``i`` is words :meth:`word` to ``+ 3``."""

    n: int
    nb: int

    def word(self, i: int, kk: int) -> int:
        block, step = divmod(16 * kk, self.n)
        return self.n // 4 * (block + self.nb * i) + step // 4


@dataclass(frozen=True)
class OperandTile:
    """A dot operand in shared memory read by threads (``lower_dot``: CUDA-core and TF32
    dots): ``rows x cols`` elements (powers of two) stored row-major. With ``swizzle``
    ``(shift, mask, scale)``, the 4-element chunk ``c`` of row ``r`` is stored at chunk
    ``c ^ ((r >> shift) & mask) * scale``: the rows a warp's access reads at once land in
    distinct banks (``lower_dot.operand_tile`` chooses it per reader)."""

    rows: int
    cols: int
    swizzle: tuple | None = None

    @property
    def words(self) -> int:
        return self.rows * self.cols

    def index_op(self, lw, r, c, slot_rows=None):
        """The element index of ``(r, c)`` (int32 thread-IR ops of the builder ``lw``), or of
        ``(r + slot_rows, c)`` for a thread's row ``r``, a multiple of ``2 ** shift``, and its
        slots' offsets from it: the swizzle adds their shifted parts, so where the offsets
        move it by whole periods LLVM folds it to the thread's (one XOR a read, not one per row)."""
        i32 = D.int32
        if self.swizzle:
            shift, mask, scale = self.swizzle
            spread = lw.op(i32, "shr", r, _imm(shift))
            if slot_rows is not None:
                spread = lw.op(i32, "add", spread, lw.op(i32, "shr", slot_rows, _imm(shift)))
            spread = lw.op(i32, "mul", lw.op(i32, "and", spread, _imm(mask)), _imm(4 * scale))
            c = lw.op(i32, "xor", c, spread)
        if slot_rows is not None:
            r = lw.op(i32, "add", r, slot_rows)
        return lw.op(i32, "add", lw.op(i32, "mul", r, _imm(self.cols)), c)

    def group_words(self, lw, layout, lanes: int, plus):
        """:meth:`index_op` of the first element of each group of ``lanes`` slots of
        ``layout`` (a copy's destinations), ``+ plus``."""
        return lw.op(D.int32, "add", self.index_op(lw, *lw.coords(layout, lanes)), plus)


def _imm(v):
    return Imm(v, D.int32)
