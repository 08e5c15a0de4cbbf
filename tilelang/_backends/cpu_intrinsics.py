"""The CPU backend's warp collectives, compiled with numba: mma.sync, ldmatrix and wgmma over
the kernel's register tables and shared buffers, computing from the PTX ISA's fragment
tables (not from the compiler's own layout objects, so a wrong layout is a wrong CPU
result). The kernel (cpu.py) calls each by its address (:func:`callback`), with raw pointers
and sizes the helper views as arrays.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core.extending import intrinsic


@intrinsic
def f32_from_bits(typingctx, u):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@njit(cache=True)
def bfloat16_value(h):
    return f32_from_bits(np.uint32(h) << 16)


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
def _half(word, high, bf16):
    bits = (word >> np.uint32(16)) if high else (word & np.uint32(0xFFFF))
    return np.float64(bfloat16_value(bits) if bf16 else float16_value(bits))


@njit(cache=True)
def float8_value(bits, e5m2):
    """The value of a float8_e4m3fn (or, with ``e5m2``, float8_e5m2) byte."""
    man_bits, bias = (2, 15) if e5m2 else (3, 7)
    e, m = (bits >> man_bits) & ((1 << (7 - man_bits)) - 1), bits & ((1 << man_bits) - 1)
    top = (1 << (7 - man_bits)) - 1
    if e5m2 and e == top:
        value = np.inf if m == 0 else np.nan
    elif not e5m2 and e == top and m == 7:
        value = np.nan
    elif e == 0:
        value = np.float64(m) * 2.0 ** (1 - bias - man_bits)
    else:
        value = (1.0 + np.float64(m) / (1 << man_bits)) * 2.0 ** (e - bias)
    return -value if bits & 0x80 else value


@njit(cache=True)
def _element(buffer, at, kind):
    """The element at byte ``at`` of a shared buffer of words: ``kind`` 0 float16, 1
    bfloat16, 2 float8_e4m3fn, 3 float8_e5m2."""
    if kind >= 2:
        return float8_value((buffer[at >> 2] >> np.uint32(8 * (at & 3))) & np.uint32(0xFF), kind == 3)
    return _half(buffer[at >> 2], (at >> 1) & 1, kind == 1)


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
def _canonical(buffer, start, lbo, sbo, width, k_major, mn, k, kind):
    """Element ``(mn, k)`` of a wgmma operand of ``kind`` (``_element``) from its
    descriptor's fields, as the PTX ISA lays out operands (byte addresses; the swizzle
    ``Swizzle<b,4,3>`` on top): K-major, rows of a k-step's 32 bytes ``width`` bytes apart
    in 8-row groups ``sbo`` apart; MN-major (16-bit only), 8-element chunks of mn 16 bytes
    apart in ``width``-byte rows, column blocks ``lbo`` apart, k-rows ``width`` apart in
    8-row groups ``sbo`` apart."""
    if k_major:
        at = start + (mn & 7) * width + (mn >> 3) * sbo + k * (1 if kind >= 2 else 2)
    else:
        chunks = width // 16
        at = start + (mn & 7) * 2 + ((mn >> 3) % chunks) * 16 + (mn // (8 * chunks)) * lbo
        at += (k & 7) * width + (k >> 3) * sbo
    at ^= ((at >> 7) & (width // 16 - 1)) << 4
    return _element(buffer, at, kind)


@njit(cache=True)
def _accumulator_at(t, e):
    """(row, column) of accumulator ``e`` of thread ``t`` of a warpgroup, m64nNk16."""
    w, lane = t >> 5, t & 31
    return 16 * w + (lane >> 2) + 8 * ((e >> 1) & 1), 8 * (e >> 2) + 2 * (lane & 3) + (e & 1)


@njit(cache=True)
def wgmma_m64(accs, c_row, d_row, t0, a_buf, a_start, a_steps, a_lbo, a_sbo, a_width, a_k_major,
              b_buf, b_start, b_steps, b_lbo, b_sbo, b_width, b_k_major, mb, nb, n, ks, a_kind, b_kind,
              a_words):  # fmt: skip
    """The ``Wgmma`` (thread_ir.py) of the warpgroup of threads ``t0`` to ``t0 + 127``:
    instruction ``(i, j)``, k-step ``kk`` reads ``a`` from byte ``a_start + a_steps[i * ks +
    kk]`` of ``a_buf`` and ``b`` from ``b_start + b_steps[j * ks + kk]``, elements of
    ``*_kind`` (``_element``: a k-step is 16 of 16 bits, 32 of 8); accumulator ``e`` of
    lane ``l`` of warp ``w`` is row ``16 w + l // 4 + 8 (e // 2 % 2)``, column ``8 (e // 4)
    + 2 (l % 4) + e % 2`` (the PTX ISA's m64nNk fragment). Rounded as mma_m16n8.
    A non-empty ``a_words`` (the uint32 register table) holds ``a`` instead: each thread's
    words ``a_steps[i * ks + kk]`` to ``+ 3`` of row ``a_start`` its fragment of the k-step,
    element ``e`` (half ``e % 2`` of word ``e // 2``) where accumulator ``e`` of ``m64n16`` is.
    ``c_row`` -1: no accumulator (zeros)."""
    a_regs = a_words.shape[0] > 0
    steps = 32 if a_kind >= 2 else 16
    a = np.empty((64, steps))
    b = np.empty((steps, n))
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
                            a[row, col] = _half(a_words[t0 + t, sa + (e >> 1)], e & 1, a_kind == 1)
                for q in range(steps):
                    if not a_regs:
                        for r in range(64):
                            a[r, q] = _canonical(a_buf, sa, a_lbo, a_sbo, a_width, a_k_major, r, q, a_kind)
                    for col in range(n):
                        b[q, col] = _canonical(b_buf, sb, b_lbo, b_sbo, b_width, b_k_major, col, q, b_kind)
                for r in range(64):
                    for col in range(n):
                        total = d[r, col]
                        for q in range(steps):
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


_I8P, i64 = types.voidptr, types.int64
_SIGNATURES = {
    "mma": types.void(_I8P, i64, i64, i64, _I8P, i64, i64, i64, i64, i64, i64, i64, i64),
    "ldmatrix": types.void(_I8P, i64, i64, _I8P, i64, _I8P, i64, i64, i64, i64, i64),
    "wgmma": types.void(_I8P, i64, i64, i64, i64, _I8P, i64, i64, _I8P, i64, i64, i64, i64,
                        _I8P, i64, i64, _I8P, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, _I8P, i64, i64),
}  # fmt: skip


_CALLBACKS: dict = {}
_LOCK = threading.Lock()


def callback(name: str):
    """The C callback of helper ``name`` (compiled on first use, once per process whichever
    threads ask: the kernels hold its address; then cached on disk by numba)."""
    with _LOCK:
        if name not in _CALLBACKS:
            _CALLBACKS[name] = cfunc(_SIGNATURES[name], cache=True)(_CALLS[name])
        return _CALLBACKS[name]


def _mma_call(words, word_rows, a_row, b_row, accs, acc_rows, c_row, d_row, threads, mi, ni, ki, kind):
    mma_m16n8(carray(words, (threads, word_rows), np.uint32), a_row, b_row,
              carray(accs, (threads, acc_rows), np.float32), c_row, d_row, threads, mi, ni, ki, kind)  # fmt: skip


def _ldmatrix_call(words, word_rows, dst_row, buffer, size, index, index_rows, index_row, groups, threads, trans):
    ldmatrix_x4(carray(words, (threads, word_rows), np.uint32), dst_row, carray(buffer, (size,), np.uint32),
                carray(index, (threads, index_rows), np.int32), index_row, groups, threads, trans)  # fmt: skip


def _wgmma_call(accs, acc_rows, c_row, d_row, t0, a_buf, a_size, a_start, a_steps, a_lbo, a_sbo, a_width, a_k_major,
                b_buf, b_size, b_start, b_steps, b_lbo, b_sbo, b_width, b_k_major, mb, nb, n, ks, a_kind, b_kind,
                words, word_rows, threads):  # fmt: skip
    wgmma_m64(
        carray(accs, (threads, acc_rows), np.float32),
        c_row,
        d_row,
        t0,
        carray(a_buf, (a_size,), np.uint32),
        a_start,
        carray(a_steps, (mb * ks,), np.int64),
        a_lbo,
        a_sbo,
        a_width,
        a_k_major,
        carray(b_buf, (b_size,), np.uint32),
        b_start,
        carray(b_steps, (nb * ks,), np.int64),
        b_lbo,
        b_sbo,
        b_width,
        b_k_major,
        mb,
        nb,
        n,
        ks,
        a_kind,
        b_kind,
        carray(words, (threads if word_rows else 0, word_rows), np.uint32),
    )  # (none: a from shared memory)


_CALLS = {"mma": _mma_call, "ldmatrix": _ldmatrix_call, "wgmma": _wgmma_call}
