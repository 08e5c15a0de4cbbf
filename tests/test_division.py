"""CUDA's float32 division without ``div.rn.f32`` (tilelang/_backends/cuda_arith.py), its LLVM
IR run on the host (tests/_division.py) against NumPy's IEEE quotients, bit for bit: the
float64 route for any dividend and divisor, the fma route (Markstein's corrections) for the
dividends its range test admits, and that range test itself."""

import _division as division
import numpy as np
import pytest

TINY = np.float32(2.0**-149)
SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, TINY, -3 * TINY, 2.0**-126, 1.5 * 2.0**-126, 2.0**-101,
                       3.4028235e38, -3.4028235e38, 1.0, -1.0, 3.0, 2.0**126, 2.0**-125, 1.9999999])  # fmt: skip


def random_bits(count: int, seed: int) -> np.ndarray:
    """float32s of every kind: uniformly random bit patterns (zeros to NaNs, both signs)."""
    return np.random.default_rng(seed).integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32).view(np.float32)


def worst_rounded_divisors(count: int) -> np.ndarray:
    """The divisors in [1, 2) whose float32 reciprocal is furthest from 1 / b (relatively):
    where RN(x / b) is hardest to reach from RN(x * RN(1 / b))."""
    b = ((127 << 23) | np.arange(1 << 23, dtype=np.uint32)).view(np.float32)
    error = np.abs(b.astype(np.float64) * (1.0 / b.astype(np.float64)).astype(np.float32) - 1.0)
    return b[np.argsort(-error)[:count]]


def assert_ieee(got, x, b, what):
    with np.errstate(all="ignore"):
        want = x / b
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what} / {b!r}: x {x[~same][:4]} gave {got[~same][:4]}, IEEE {want[~same][:4]}"


@pytest.mark.parametrize("error", [2.0**-22, -(2.0**-22), 0.0])
def test_the_float64_route_divides_every_pair_as_ieee(error):
    """quotient_f32 from a reciprocal estimate off by rcp.approx's 2^-22 either way: zeros'
    signs, infinities, NaNs, subnormal dividends, divisors and quotients, overflow."""
    xs = np.concatenate([SPECIALS, random_bits(20000, 1)])
    for b in np.concatenate([SPECIALS, random_bits(40, 2)]):
        assert_ieee(division.wide(xs, b, error), xs, b, "quotient_f32")


def test_the_float64_route_rounds_quotients_halfway_between_subnormals_to_even():
    """x / b exactly halfway between two subnormals (x = M B 2^(k-150), b = B 2^k, M and B odd):
    the product with the reciprocal misses the halfway point by a float64 ulp, either way;
    only the fma correction lands on it (found by review: 1.8M of 103M such pairs wrong
    without it)."""
    rng = np.random.default_rng(6)
    m, b = (2 * rng.integers(0, 1 << 11, 4000) + 1 for _ in range(2))  # odd, so m b < 2^24
    k = rng.integers(1, 150, 4000)
    x = (m * b).astype(np.float64) * np.exp2(k - 150.0)
    divisors = b.astype(np.float64) * np.exp2(k.astype(np.float64))
    keep = (x < 2.0**128) & (divisors < 2.0**128)
    x, divisors = x[keep].astype(np.float32), divisors[keep].astype(np.float32)
    assert ((x / divisors) < 2.0**-126).all()  # (halfway points of subnormals, all)
    for xi, bi in zip(x[:1500], divisors[:1500]):  # (one launch a divisor: its reciprocal is the kernel's argument)
        assert_ieee(division.wide(np.array([xi, -xi]), bi), np.array([xi, -xi]), bi, "quotient_f32")


def test_constant_divisors_divide_as_ieee():
    """A constant divisor's reciprocals are computed at compile time (both routes)."""
    xs = np.concatenate([SPECIALS, random_bits(20000, 7)])
    for b in np.float32([3.0, 0.1, 98.0, -7.0, 0.0, -0.0, np.inf, np.nan, 1e-40, 3e38, 2.0**-126, 2.0**126]):
        assert_ieee(division.by_constant(xs, b), xs, b, "divide_by_shared, constant")


def test_a_threads_quotients_by_two_divisors_take_one_route_together():
    """divide_by_shared over a thread's 8 slots, two divisors: rows all in range (the fma
    route) and rows with one special dividend (all 8 the float64 way), each quotient IEEE's."""
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((4000, 8)).astype(np.float32) * np.float32(1e3)
    specials = np.concatenate([SPECIALS, random_bits(500, 9)])
    xs[::4, 5] = specials[np.arange(len(xs[::4])) % len(specials)]  # (every 4th row falls back)
    for b0, b1 in ((3.0, 0.1), (-7.0, 1e-40), (98.0, 0.0), (np.inf, 2.0**-126)):
        got = division.grouped(xs, np.float32(b0), np.float32(b1))
        assert_ieee(got[:, :4].ravel(), xs[:, :4].ravel(), np.float32(b0), "divide_by_shared, slots 0-3")
        assert_ieee(got[:, 4:].ravel(), xs[:, 4:].ravel(), np.float32(b1), "divide_by_shared, slots 4-7")


def test_the_fma_route_divides_as_ieee_where_its_range_test_admits():
    """markstein_quotient for the worst-rounded reciprocals and random divisors, each scaled
    from 2^-126 up past 2^125, over dividends of every size; only those in_exact_range
    admits are compared (every admitted one must be right)."""
    mantissas = np.concatenate([worst_rounded_divisors(12), random_bits(12, 3), np.float32([1.0, 1.5])])
    mantissas = ((mantissas.view(np.uint32) & 0x7FFFFF) | (127 << 23)).view(np.float32)  # in [1, 2)
    xs = np.concatenate([SPECIALS, random_bits(20000, 4), (random_bits(20000, 5).view(np.uint32) & 0x3FFFFFFF).view(
        np.float32)])  # fmt: skip
    admitted = 0
    for m in mantissas:
        for exponent in (-126, -100, -30, -1, 0, 1, 30, 100, 125):
            for sign in (1, -1):
                b = np.float32(sign * m * np.float32(2.0**exponent))
                inside = division.in_exact_range(xs, b)
                assert_ieee(division.markstein(xs[inside], b), xs[inside], b, "markstein_quotient")
                admitted += inside.sum()
    assert admitted > 0.3 * len(xs) * len(mantissas) * 18  # (most of the range: not a test of nothing)


def test_the_fma_route_is_exact_for_every_dividend_mantissa_of_the_hardest_divisors():
    """All 2^23 dividends in [1, 2) (within the range, scaling by 2^k changes nothing) by the
    divisors whose reciprocal rounds worst: the fma route's hardest cases, each one."""
    xs = ((127 << 23) | np.arange(1 << 23, dtype=np.uint32)).view(np.float32)
    for b in worst_rounded_divisors(3):
        assert_ieee(division.markstein(xs, b), xs, b, "markstein_quotient")


def test_the_range_test_admits_what_its_proof_needs_and_nothing_else():
    """[max(2^-101, 2^-125 |b|), 2^126 |b|): remainders on float32's grid, normal quotients,
    no overflow; no zero, subnormal, infinity or NaN; nothing for a subnormal, huge or
    special divisor."""
    x = np.float32([2.0**-101, np.nextafter(np.float32(2.0**-101), np.float32(0)), 0.0, -0.0, TINY, np.inf, np.nan,
                    -5.0, 3.4028235e38])  # fmt: skip
    assert division.in_exact_range(x, np.float32(3.0)).tolist() == [
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        False,
    ]  # fmt: skip (3.4e38 / 3 > 2^126)
    big = np.float32(2.0**40)  # 2^-125 |b| = 2^-85 > 2^-101
    assert division.in_exact_range(np.float32([2.0**-85, 2.0**-86, 3.4e38]), big).tolist() == [True, False, True]
    small = np.float32(2.0**-60)  # 2^126 |b| = 2^66
    assert division.in_exact_range(np.float32([2.0**66, 2.0**65, -(2.0**65)]), small).tolist() == [False, True, True]
    for b in (TINY, 2.0**-127, 2.0**126, np.inf, np.nan, 0.0):
        assert not division.in_exact_range(np.float32([1.0, 2.0**-50, 2.0**50]), np.float32(b)).any(), b
