"""The window of an array a tile load or store accesses: offsets, masks and vector groups."""

from __future__ import annotations

from .lowering import b1, i32, i64
from .thread_ir import Imm, array_reg


class Window:
    """A tile-shaped window of an array at element offsets ``starts``.

    Once per window: the base offset (int64) and, per dimension, the range of tile
    coordinates in bounds, clamped to int32 (exact for coordinates in [0, 2**31-2], so
    masks are int32 compares whatever the array's size). Slots go in groups of ``lanes``
    consecutive elements of a unit-stride last dimension (up to 16 bytes): per group the
    element offset, the mask of the other dimensions and the range of lanes inside the last
    one; the backend moves a whole group in one access when it is in and aligned."""

    def __init__(self, lw, array, layout, starts, whole_groups=True):
        self.lw, self.array, self.layout = lw, array, layout
        self.name = lw.array_names[array]
        self.unit_last = array.type.unit_stride
        base = Imm(0, i64)
        self.low, self.high = [], []
        for d, start in enumerate(starts):
            base = lw.op(i64, "add", base, self.scaled(start, d))
            self.low.append(_clamp32(lw, lw.op(i64, "neg", start)))
            self.high.append(_clamp32(lw, lw.op(i64, "sub", array_reg(self.name, "shape", d), start)))
        self.base, self.starts = base, starts
        itemsize = array.type.dtype.itemsize
        self.lanes = min(layout.vector_width(), max(16 // itemsize, 1)) if self.unit_last and starts else 1
        # every group whole or empty and aligned, where the array is (``thread_ir.array_aligned``:
        # the program for other arrays is lowered apart) and so are the window's corner and extent
        # (unless not ``whole_groups``: the accesses then test it as they run)
        self.whole = (
            whole_groups
            and self.lanes > 1
            and lw.assume_aligned
            and layout.shape[-1] % self.lanes == 0
            and lw.start_multiple(starts[-1]) % self.lanes == 0
        )
        if self.whole:
            lw.aligned.add(self.name)

    def scaled(self, coord, d):
        if d == self.array.type.ndim - 1 and self.unit_last:
            return coord
        return self.lw.op(i64, "mul", coord, array_reg(self.name, "stride", d))

    def access(self, with_base=True):
        """(offset, mask, first, last) of each group of slots (the offset from the window's
        corner ``base`` without ``with_base``)."""
        lw, lanes, last = self.lw, self.lanes, len(self.low) - 1
        parts = [lw.coord_parts(self.layout, d, lanes) for d in range(len(self.low))]
        coords = [lw.op(i32, "add", *p) for p in parts]
        # the slots' offsets from the window's base, then the base: in a loop moving the window,
        # LLVM keeps the first part out of it. The thread's part, then each slot's constant one
        # (scaled by a stride: a value of its own, not recomputed per slot from its coordinate)
        offset = Imm(0, i64)
        for terms in zip(*parts):
            for d, c in enumerate(terms):
                offset = lw.op(i64, "add", offset, self.scaled(lw.op(i64, "convert", c, attr=i64), d))
        offset = lw.op(i64, "add", offset, self.base) if with_base else offset
        highs = list(self.high)
        if highs and self.layout.shape[last] != self.layout.padded[last]:  # (slots past it are padding)
            highs[last] = lw.op(i32, "minimum", highs[last], Imm(self.layout.shape[last], i32))
        # dimensions the mask checks: all where a group's first lane tells of the others
        inner = range(last) if lanes > 1 and not self.whole else range(len(coords))
        checks = [
            lw.op(b1, op, coords[d], bound) for d in inner for op, bound in (("ge", self.low[d]), ("lt", highs[d]))
        ]
        mask = lw.land(*checks, lw.valid(self.layout, range(last), lanes))
        if lanes == 1 or self.whole:
            return offset, mask, None, None
        return (
            offset,
            mask,
            lw.op(i32, "sub", self.low[last], coords[last]),
            lw.op(i32, "sub", highs[last], coords[last]),
        )

    def groups_aligned(self):
        """A bool: whether every group is 16-byte aligned from the array's first element
        (offset a multiple of ``lanes``) and whole or empty (``first <= 0 < last`` or no lane
        in bounds). So when the last axis' start and extent and the other axes' strides are
        multiples of ``lanes``, as is the tile's extent: the bounds ``-start`` and
        ``extent - start`` are then multiples too, or clamped past every lane (``_clamp32``)."""
        lw, lanes, last = self.lw, self.lanes, len(self.starts) - 1
        if self.layout.shape[last] % lanes:
            return Imm(False, b1)
        bits = lw.op(i64, "or", self.starts[last], array_reg(self.name, "shape", last))
        for d in range(last):
            bits = lw.op(i64, "or", bits, array_reg(self.name, "stride", d))
        return lw.op(b1, "eq", lw.op(i64, "and", bits, Imm(lanes - 1, i64)), Imm(0, i64))


def _clamp32(lw, x):
    return lw.op(i32, "convert", lw.clamp(x, -1, 2**31 - 1), attr=i32)
