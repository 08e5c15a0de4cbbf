"""Helpers the CPU backend's generated code calls: 16-bit float conversions in integer
arithmetic (numba has no float16 or bfloat16 on the CPU), bit for bit what the GPU's
``cvt.rn`` instructions do: round to nearest, ties to even, with subnormals, inf and NaN.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from .numba_pipeline import LeanCompiler  # noqa: F401 - the generated kernels' pipeline_class
from .numba_source import WRAPPING, llvm_math_intrinsic, select_intrinsic, wrapping_intrinsic


class ZeroStep(Exception):
    """Raised by a CPU kernel whose tl.range loop has a zero step; the argument numbers the loop."""


@intrinsic
def f32_bits(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def f32_from_bits(typingctx, u):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@njit(cache=True)
def bfloat16_bits(x):
    u = f32_bits(np.float32(x))
    if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN stays NaN (quiet)
        return np.uint16((u >> 16) | 0x40)
    u = u + np.uint32(0x7FFF) + ((u >> 16) & 1)
    return np.uint16(u >> 16)


@njit(cache=True)
def bfloat16_value(h):
    return f32_from_bits(np.uint32(h) << 16)


@njit(cache=True)
def float16_bits(x):
    u = f32_bits(np.float32(x))
    sign = np.uint32((u >> 16) & 0x8000)
    a = u & np.uint32(0x7FFFFFFF)
    if a >= 0x7F800000:
        return np.uint16(sign | (0x7E00 if a > 0x7F800000 else 0x7C00))
    if a >= 0x477FF000:  # 65520 and up round to infinity
        return np.uint16(sign | 0x7C00)
    if a < 0x38800000:  # below the smallest normal float16: a subnormal (or zero)
        scaled = f32_from_bits(a) * np.float32(16777216.0)  # exact: times 2**24
        return np.uint16(sign | np.uint32(np.rint(scaled)))
    a = a + np.uint32(0xFFF) + ((a >> 13) & 1)
    return np.uint16(sign | ((a - np.uint32(0x38000000)) >> 13))


@njit(cache=True)
def float16_value(h):
    h = np.uint32(h)
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0:
        value = np.float32(m) * np.float32(5.960464477539063e-08)  # m * 2**-24, exact
        return -value if sign else value
    if e == 31:
        return f32_from_bits(sign | np.uint32(0x7F800000) | (m << 13))
    return f32_from_bits(sign | ((e + 112) << 23) | (m << 13))


@njit(cache=True)
def float32_odd_float(x):
    """float64 → float32 rounded to odd (toward zero, the last bit set if inexact): then rounding
    that to a 16-bit float is correctly rounded, once (float32 keeps 2 bits more than needed)."""
    r = np.float32(x)
    back = np.float64(r)
    if back != x and x == x:
        u = f32_bits(r)
        if abs(back) > abs(x):  # rounded away from zero: step back
            u -= np.uint32(1)
        r = f32_from_bits(u | np.uint32(1))
    return r


@njit(cache=True)
def float32_odd_int(x):
    """An integer of 32 or 64 bits → float32 rounded to odd (as :func:`float32_odd_float`)."""
    hi = (x >> 11) << 11  # x = hi + lo, both exact in float64
    lo = x - hi
    r = np.float32(x)  # rounded once, to nearest
    diff = (np.float64(r) - np.float64(hi)) - np.float64(lo)  # r - x, exact
    if diff != 0:
        u = f32_bits(r)
        if (diff > 0) == (r > 0):
            u -= np.uint32(1)
        r = f32_from_bits(u | np.uint32(1))
    return r


@njit(cache=True)
def round_float16(x):
    return float16_value(float16_bits(x))


@njit(cache=True)
def round_bfloat16(x):
    return bfloat16_value(bfloat16_bits(x))


@njit(cache=True)
def pack_float16(lo, hi):
    return np.uint32(float16_bits(lo)) | (np.uint32(float16_bits(hi)) << np.uint32(16))


@njit(cache=True)
def pack_bfloat16(lo, hi):
    return np.uint32(bfloat16_bits(lo)) | (np.uint32(bfloat16_bits(hi)) << np.uint32(16))


@njit(cache=True)
def tf32_bits(x):
    """A float32 rounded to TF32 as ``cvt.rna.tf32.f32`` does (``primitives.tf32``): its bits."""
    bits = f32_bits(np.float32(x))
    if x != x:
        return bits
    return (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)


@njit(cache=True)
def _half(word, high, bf16):
    bits = (word >> np.uint32(16)) if high else (word & np.uint32(0xFFFF))
    return np.float64(bfloat16_value(bits) if bf16 else float16_value(bits))


@njit(cache=True)
def mma_m16n8(words, a_row, b_row, accs, c_row, d_row, threads, mi, ni, ki, kind):
    """Each warp's ``Mma`` (thread_ir.py: which words and slots hold which fragment), with
    the element of each register from the PTX ISA's fragment tables, lane ``l = 4 g + t``;
    ``kind`` 0, 1: m16n8k16 on float16, bfloat16 words (two values each): ``a`` element
    ``e`` (word ``e // 2``, high half when odd) is row ``g + 8 (e // 2 % 2)``, column
    ``2 t + e % 2 + 8 (e // 4)``; ``b`` element ``e`` row ``2 t + e % 2 + 8 (e // 2)``, column
    ``g``. ``kind`` 2: m16n8k8 on TF32 words (one value each): ``a`` element ``e`` row
    ``g + 8 (e % 2)``, column ``t + 4 (e // 2)``; ``b`` element ``e`` row ``t + 4 e``, column
    ``g``. ``c``/``d`` element ``e``: row ``g + 8 (e // 2)``, column ``2 t + e % 2``. Products
    are exact in float64; each k-step's sum is rounded to float32 once (the tensor cores'
    own rounding is finer than the dtype's tolerance)."""
    steps = 8 if kind == 2 else 16
    a = np.empty((16, steps))
    b = np.empty((steps, 8))
    c = np.empty((16, 8))
    for warp in range(threads // 32):
        for i in range(mi):
            for j in range(ni):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for e in range(4):
                        c[g + 8 * (e >> 1), 2 * t + (e & 1)] = accs[32 * warp + lane, c_row + 4 * (j + ni * i) + e]
                for kk in range(ki):
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        th = 32 * warp + lane
                        at, bt = a_row + 4 * (kk + ki * i), b_row + 2 * (kk + ki * j)
                        if kind == 2:
                            for e in range(4):
                                a[g + 8 * (e & 1), t + 4 * (e >> 1)] = np.float64(f32_from_bits(words[th, at + e]))
                            for e in range(2):
                                b[t + 4 * e, g] = np.float64(f32_from_bits(words[th, bt + e]))
                            continue
                        for e in range(8):
                            value = _half(words[th, at + (e >> 1)], e & 1, kind == 1)
                            a[g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)] = value
                        for e in range(4):
                            b[2 * t + (e & 1) + 8 * (e >> 1), g] = _half(words[th, bt + (e >> 1)], e & 1, kind == 1)
                    for r in range(16):
                        for col in range(8):
                            total = c[r, col]
                            for q in range(steps):
                                total += a[r, q] * b[q, col]
                            c[r, col] = np.float32(total)
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for e in range(4):
                        accs[32 * warp + lane, d_row + 4 * (j + ni * i) + e] = c[g + 8 * (e >> 1), 2 * t + (e & 1)]


@njit(cache=True)
def _canonical(buffer, start, lbo, sbo, width, k_major, mn, k, bf16):
    """Element ``(mn, k)`` of a wgmma operand from its descriptor's fields, as the PTX ISA
    lays out 16-bit operands (byte addresses; the swizzle ``Swizzle<b,4,3>`` on top): K-major,
    rows of 8 elements of k ``width`` bytes apart in 8-row groups ``sbo`` apart, the two
    8-element halves of a k-step 16 bytes apart; MN-major, 8-element chunks of mn 16 bytes
    apart in ``width``-byte rows, column blocks ``lbo`` apart, k-rows ``width`` apart in
    8-row groups ``sbo`` apart."""
    if k_major:
        at = start + (mn & 7) * width + (mn >> 3) * sbo + (k & 7) * 2 + (k >> 3) * 16
    else:
        chunks = width // 16
        at = start + (mn & 7) * 2 + ((mn >> 3) % chunks) * 16 + (mn // (8 * chunks)) * lbo
        at += (k & 7) * width + (k >> 3) * sbo
    at ^= ((at >> 7) & (width // 16 - 1)) << 4
    return _half(buffer[at >> 2], (at >> 1) & 1, bf16)


@njit(cache=True)
def _accumulator_at(t, e):
    """(row, column) of accumulator ``e`` of thread ``t`` of a warpgroup, m64nNk16."""
    w, lane = t >> 5, t & 31
    return 16 * w + (lane >> 2) + 8 * ((e >> 1) & 1), 8 * (e >> 2) + 2 * (lane & 3) + (e & 1)


@njit(cache=True)
def wgmma_m64(accs, c_row, d_row, t0, a_buf, a_start, a_steps, a_lbo, a_sbo, a_width, a_k_major,
              b_buf, b_start, b_steps, b_lbo, b_sbo, b_width, b_k_major, mb, nb, n, ks, bf16, a_words):  # fmt: skip
    """The ``Wgmma`` (thread_ir.py) of the warpgroup of threads ``t0`` to ``t0 + 127``:
    instruction ``(i, j)``, k-step ``kk`` reads ``a`` from byte ``a_start + a_steps[i * ks +
    kk]`` of ``a_buf`` and ``b`` from ``b_start + b_steps[j * ks + kk]``; accumulator ``e``
    of lane ``l`` of warp ``w`` is row ``16 w + l // 4 + 8 (e // 2 % 2)``, column ``8 (e //
    4) + 2 (l % 4) + e % 2`` (the PTX ISA's m64nNk16 fragment). Rounded as mma_m16n8.
    A non-empty ``a_words`` (the uint32 register table) holds ``a`` instead: each thread's
    words ``a_steps[i * ks + kk]`` to ``+ 3`` of row ``a_start`` its fragment of the k-step,
    element ``e`` (half ``e % 2`` of word ``e // 2``) where accumulator ``e`` of ``m64n16`` is.
    ``c_row`` -1: no accumulator (zeros)."""
    a_regs = a_words.shape[0] > 0
    a = np.empty((64, 16))
    b = np.empty((16, n))
    d = np.empty((64, n))
    for i in range(mb):
        for j in range(nb):
            first = n // 2 * (j + nb * i)
            for t in range(128):
                for e in range(n // 2):
                    row, col = _accumulator_at(t, e)
                    d[row, col] = accs[t0 + t, c_row + first + e] if c_row >= 0 else 0.0
            for kk in range(ks):
                sa, sb = a_start + a_steps[i * ks + kk], b_start + b_steps[j * ks + kk]
                if a_regs:
                    for t in range(128):
                        for e in range(8):
                            row, col = _accumulator_at(t, e)
                            a[row, col] = _half(a_words[t0 + t, sa + (e >> 1)], e & 1, bf16)
                for q in range(16):
                    if not a_regs:
                        for r in range(64):
                            a[r, q] = _canonical(a_buf, sa, a_lbo, a_sbo, a_width, a_k_major, r, q, bf16)
                    for col in range(n):
                        b[q, col] = _canonical(b_buf, sb, b_lbo, b_sbo, b_width, b_k_major, col, q, bf16)
                for r in range(64):
                    for col in range(n):
                        total = d[r, col]
                        for q in range(16):
                            total += a[r, q] * b[q, col]
                        d[r, col] = np.float32(total)
            for t in range(128):
                for e in range(n // 2):
                    row, col = _accumulator_at(t, e)
                    accs[t0 + t, d_row + first + e] = d[row, col]


@njit(cache=True)
def ldmatrix_x4(words, dst_row, buffer, index, index_row, groups, threads, trans):
    """Each warp's ``LdMatrix`` (thread_ir.py), as the PTX ISA describes ``ldmatrix``: lane
    ``8 q + i`` gives the address of row ``i`` of matrix ``q``; lane ``l = 4 g + t`` receives
    row ``g``, columns ``2 t`` and ``2 t + 1`` (with ``.trans``: rows ``2 t`` and ``2 t + 1``,
    column ``g``), the first in the low half."""
    for warp in range(threads // 32):
        for grp in range(groups):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for q in range(4):
                    if trans:
                        word = np.uint32(0)
                        for h in range(2):
                            start = index[32 * warp + 8 * q + 2 * t + h, index_row + grp]
                            half = (buffer[start + (g >> 1)] >> np.uint32(16 * (g & 1))) & np.uint32(0xFFFF)
                            word |= half << np.uint32(16 * h)
                    else:
                        word = buffer[index[32 * warp + 8 * q + g, index_row + grp] + t]
                    words[32 * warp + lane, dst_row + 4 * grp + q] = word


@njit(cache=True)
def async_copy(pending, group, owner, at, memory, origin, offset, ok, first, last, aligned, tag, t):
    """Thread ``t``'s ``AsyncCopy`` of one group: the 8 16-bit lanes at ``offset`` (where ``ok
    and first <= i < last``, else 0) into words ``at`` to ``+ 3`` of ``pending``, tagged with
    the thread and its group ``tag``: they reach the buffer at the wait covering it. Where
    the window is ``aligned`` the group must be 8-element aligned and whole or empty: the
    CUDA kernel copies it so, without looking (an error here is the lowering's)."""
    if aligned and ((offset & 7) != 0 or 0 < first < 8 or 0 < last < 8):
        raise AssertionError("tilelang: an AsyncCopy claimed aligned moves a partial or misaligned group")
    for w in range(4):
        word = np.uint32(0)
        for i in range(2 * w, 2 * w + 2):
            if ok and first <= i < last:
                word |= np.uint32(memory[origin + offset + i]) << np.uint32(16 * (i & 1))
        pending[at + w], group[at + w], owner[at + w] = word, tag, t


@njit(cache=True)
def async_copy_words(pending, group, owner, at, memory, origin, offset, ok, first, last, aligned, tag, t):
    """:func:`async_copy` of a group of 4 32-bit lanes, one to a word."""
    if aligned and ((offset & 3) != 0 or 0 < first < 4 or 0 < last < 4):
        raise AssertionError("tilelang: an AsyncCopy claimed aligned moves a partial or misaligned group")
    for i in range(4):
        value = memory[origin + offset + i] if ok and first <= i < last else 0
        pending[at + i], group[at + i], owner[at + i] = value, tag, t


@njit(cache=True)
def async_land(buffer, pending, group, owner, t, done):
    """Thread ``t``'s copies of the groups before ``done`` move into ``buffer``."""
    for w in range(buffer.size):
        if owner[w] == t and 0 <= group[w] < done:
            buffer[w], group[w] = pending[w], -1


INVALID = 1 << 62  # an mbarrier's word while it is not valid (between Mbarriers statements)


@njit(cache=True)
def tma_box(buffer, at, memory, origin, shape, strides, coords, box, width):
    """A ``TmaLoad`` box, landed now: the ``box[1] x box[0]`` elements at ``coords``
    (innermost first, like ``shape``, ``strides`` and ``box``; the box's outer extents 1),
    zeros where out of bounds, into the swizzled tile rows ``width`` bytes apart from word
    ``at`` of ``buffer`` (its start a whole swizzle period: the XOR reads the offset)."""
    inside, corner = True, origin
    for d in range(2, len(shape)):
        inside = inside and 0 <= coords[d] < shape[d]
        corner += coords[d] * strides[d]
    for r in range(box[1]):
        row = coords[1] + r
        for c in range(box[0]):
            col = coords[0] + c
            bits = np.uint32(0)
            if inside and 0 <= row < shape[1] and 0 <= col < shape[0]:
                bits = np.uint32(memory[corner + row * strides[1] + col * strides[0]])
            byte = 4 * at + r * width + 2 * c
            byte ^= ((byte >> 7) & (width // 16 - 1)) << 4
            shift = np.uint32(16 * ((byte >> 1) & 1))
            word = byte >> 2
            buffer[word] = (buffer[word] & ~(np.uint32(0xFFFF) << shift)) | (bits << shift)


@njit(cache=True)
def mbarrier_wait(bars, i, parity):
    """An ``MbarrierWait`` on the CPU, where a ``TmaLoad`` completes its phase as it is
    issued (one phase per count): the phase of ``parity`` must have completed, the wait on
    the GPU would never end otherwise (an error here is the lowering's)."""
    if bars[i] >= INVALID or (bars[i] & 1) == parity:
        raise AssertionError("tilelang: an mbarrier wait on a phase no TMA copy completes")


select = intrinsic(select_intrinsic)
floor = intrinsic(llvm_math_intrinsic("floor"))
ceil = intrinsic(llvm_math_intrinsic("ceil"))
globals().update({f"wrapping_{name}": intrinsic(wrapping_intrinsic(name)) for name in WRAPPING})
