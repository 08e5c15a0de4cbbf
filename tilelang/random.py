"""Counter-based random numbers: Philox4x32-10, as Triton's ``tl.randint`` / ``tl.rand`` /
``tl.randn``.

Each element's numbers are a pure function of ``(seed, offset)``: no state, the same bits on
every backend (normals within a few ulps: each backend's ``log`` and ``cos``), and the same
for one offset whatever tile or block computes it (a dropout mask can be made again in the
backward from the seed and the offsets). The
generator is Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC 2011): the counter ``(offset, 0, 0, 0)``, the key the seed's two 32-bit halves,
each round a 32x32 -> 64-bit multiply of two counter words. The bits are Triton's: the
offset sign-extended to 64 bits, its low half the counter's first word and, for 64-bit
offsets, its high half the second.

They are written with the tile ops themselves (integer arithmetic wraps), so the interpreter,
the CPU backend and the GPU run the same ~100 operations per element; on the GPU each round's
multiplies are ``mul.wide.u32``.
"""

from __future__ import annotations

from . import dtypes as D
from . import language as tl
from ._frontend.tracing import as_atom, located
from .errors import TileTypeError

# the Philox4x32 multipliers and the key's increments (Weyl sequence) a round
_ROUND_A, _ROUND_B, _KEY_A, _KEY_B = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
_LOW = 0xFFFFFFFF


def _words(x):
    """(high, low) 32-bit halves of a 64-bit integer tile, masked before they narrow (so
    debug mode's checks, which refuse conversions that change an index's value, pass)."""
    return ((x >> 32) & _LOW).astype(D.uint32), (x & _LOW).astype(D.uint32)


def _mul_wide(x, constant):
    """(high, low) 32-bit halves of ``x * constant`` for a uint32 tile ``x``."""
    return _words(x.astype(D.uint64) * constant)


def randint4x(seed, offsets, n_rounds: int = ROUNDS):
    """Four uint32 tiles of random bits for each element of the integer tile ``offsets``
    (Philox4x32 of the counter ``(offset, 0, 0, 0)``, a 64-bit offset's high half in the
    second word, under the key ``seed``: an integer scalar, a runtime argument, a constant or
    a loaded value). Example:
    ``a, b, c, d = tl.randint4x(seed, i * TILE + tl.arange(0, TILE))``."""
    off, key = as_atom(offsets, "offsets"), as_atom(seed, "seed")
    if not off.type.dtype.is_int or off.type.dtype.is_bool:
        raise located(TileTypeError(f"random numbers take integer offsets, got {off.type}"))
    if not key.type.dtype.is_int or key.type.dtype.is_bool or key.type.shape != ():
        raise located(TileTypeError(f"random numbers take an integer scalar seed, got {key.type}"))
    if not isinstance(n_rounds, int) or isinstance(n_rounds, bool) or n_rounds < 1:
        raise located(TileTypeError(f"n_rounds is a positive Python int, got {n_rounds!r}"))
    # (widened to 64 bits, signed ones sign-extended, then cut in words: as Triton's)
    high, c0 = _words(tl.astype(offsets, D.uint64 if off.type.dtype.kind == "u" else D.int64))
    c2 = c3 = tl.zeros(off.type.shape, D.uint32)
    c1 = high if off.type.dtype.bits == 64 else c2
    k1, k0 = _words(tl.astype(seed, D.uint64 if key.type.dtype.kind == "u" else D.int64))
    for _ in range(n_rounds):
        hi_b, lo_b = _mul_wide(c2, _ROUND_B)
        hi_a, lo_a = _mul_wide(c0, _ROUND_A)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = k0 + _KEY_A, k1 + _KEY_B
    return c0, c1, c2, c3


def randint(seed, offsets, n_rounds: int = ROUNDS):
    """A uint32 tile of random bits, one per element of ``offsets`` (the first of
    :func:`randint4x`'s four). Example: ``bits = tl.randint(seed, offs)``."""
    return randint4x(seed, offsets, n_rounds)[0]


def _uniform(bits):
    """Floats in [0, 1) from uint32 bits, as Triton's: the bits as an int32 ``x``, ``-x - 1``
    where that is negative (its bits' complement), times a constant just under 2^-31."""
    magnitude = tl.where(bits >= 0x80000000, ~bits, bits)
    return magnitude.astype(D.float32) * 4.6566127342e-10


def rand(seed, offsets, n_rounds: int = ROUNDS):
    """Float32 uniform in [0, 1), one per element of ``offsets``. Example (dropout):
    ``keep = tl.rand(seed, offs) > p``."""
    return _uniform(randint(seed, offsets, n_rounds))


def randn(seed, offsets, n_rounds: int = ROUNDS):
    """Float32 standard normal, one per element of ``offsets`` (Box-Muller of two of
    :func:`randint4x`'s uniforms). Example: ``noise = tl.randn(seed, offs) * sigma``."""
    a, b, _, _ = randint4x(seed, offsets, n_rounds)
    u1, u2 = tl.maximum(_uniform(a), 1.0e-7), _uniform(b)
    return tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)


randint4x, randint, rand, randn = (tl._signature_checked(f) for f in (randint4x, randint, rand, randn))
