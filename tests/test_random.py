"""Random numbers (tilelang/random.py): Philox4x32-10 against Random123's known answer and a
NumPy reference written here from the algorithm, bit for bit on every backend; rand and randn
from those bits; their errors; the GPU's instructions."""

import re

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

N = 64


def philox_reference(offsets, seed, rounds=10):
    """Philox4x32 of the counters (offset low, offset high (64-bit offsets), 0, 0) under the
    key (seed low, seed high): the seed's 64 bits, a negative one two's complement."""
    mask = np.uint64(0xFFFFFFFF)
    offsets = np.asarray(offsets)
    wide = offsets.astype(np.uint32 if offsets.itemsize == 4 else np.int64).astype(np.uint64)
    c = [wide & mask, wide >> np.uint64(32), np.zeros_like(wide), np.zeros_like(wide)]
    key = np.uint64(seed % 2**64)
    k0, k1 = key & mask, key >> np.uint64(32)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return [x.astype(np.uint32) for x in c]


def uniform_reference(bits):
    x = bits.astype(np.int32)
    return np.where(x < 0, -(x.astype(np.int64)) - 1, x).astype(np.float32) * np.float32(4.6566127342e-10)


@tl.tile_kernel
def random_bits(offsets, seed, words, uniform, normal, TILE: tl.Constant):
    i = tl.block_id(0)
    offs = tl.load(offsets, index=(i,), shape=(TILE,))
    for k, w in enumerate(tl.randint4x(seed, offs)):
        tl.store(words, w[None, :], index=(k, i))
    tl.store(uniform, tl.rand(seed, offs), index=(i,))
    tl.store(normal, tl.randn(seed, offs), index=(i,))


def run(offsets, seed, backend, tile=32):
    n = len(offsets)
    words, uniform, normal = np.zeros((4, n), np.uint32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    random_bits[tl.cdiv(n, tile)](offsets, seed, words, uniform, normal, TILE=tile, backend=backend)
    return words, uniform, normal


def test_philox_gives_random123_s_known_answer():
    """Philox4x32-10 of the zero counter under the zero key (Random123's kat_vectors)."""
    for backend in tlt.default_backends():
        words, _, _ = run(np.zeros(N, np.int32), 0, backend)
        assert [hex(int(w)) for w in words[:, 0]] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]
        assert (words == words[:, :1]).all()


@given(
    data=st.data(),
    dtype=st.sampled_from([np.int32, np.uint32, np.int64]),
    seed=st.integers(-(2**63), 2**64 - 1),
)
def test_bits_uniform_and_normal_match_the_reference_on_every_backend(data, dtype, seed):
    """Bits equal the reference's for any seed (its 64 bits) and offsets (negative, past 2^32),
    rand too (exact arithmetic), randn within a few float32 ulps (log, sqrt and cos differ by
    backend within docs/dtypes.md's contract)."""
    info = np.iinfo(dtype)
    offsets = data.draw(hnp.arrays(dtype, N, elements=st.integers(int(info.min), int(info.max))))
    want = philox_reference(offsets, seed)
    u = uniform_reference(want[0])
    u1, u2 = np.maximum(uniform_reference(want[0]), np.float32(1e-7)).astype(np.float64), uniform_reference(want[1])
    n = np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2.astype(np.float64))
    for backend in tlt.default_backends():
        words, uniform, normal = run(offsets, seed, backend)
        for k in range(4):
            np.testing.assert_array_equal(words[k], want[k], err_msg=f"word {k} on {backend}")
        np.testing.assert_array_equal(uniform, u, err_msg=backend)
        np.testing.assert_allclose(normal, n, rtol=1e-5, atol=2e-5, err_msg=backend)


def test_the_numbers_of_an_offset_do_not_depend_on_the_tile():
    offsets = np.arange(256, dtype=np.int32)
    small, large = run(offsets, 7, "cpu", tile=32), run(offsets, 7, "cpu", tile=128)
    for a, b in zip(small, large):
        np.testing.assert_array_equal(a, b)


def test_uniform_and_normal_look_like_their_distributions():
    """rand in [0, 1) (2^31 - 1 times the scale stays below 1), mean 1/2; randn mean 0 and
    standard deviation 1 (2^16 samples: both within 0.02)."""
    offsets = np.arange(1 << 16, dtype=np.int32)
    _, uniform, normal = run(offsets, 2026, "cpu", tile=1024)
    assert uniform.min() >= 0 and uniform.max() < 1 and abs(uniform.mean() - 0.5) < 0.01
    assert abs(normal.mean()) < 0.02 and abs(normal.std() - 1) < 0.02
    assert uniform_reference(np.array([0x7FFFFFFF, 0x80000000], np.uint32)).max() < 1


@pytest.mark.parametrize(
    "seed, offsets, message",
    [(0, "f32", "integer offsets"), (1.5, "i32", "integer scalar seed"), (0, "bool", "integer offsets"),
     (0, "tile seed", "integer scalar seed")],
)  # fmt: skip
def test_bad_arguments_are_tile_errors_at_the_line(seed, offsets, message):
    """(A tile of seeds broadcast with the offsets, silently.)"""

    @tl.tile_kernel
    def draw(out, s, OFFSETS: tl.Constant):
        o = tl.arange(0, 32)
        o = o.astype(tl.float32) if OFFSETS == "f32" else o > 3 if OFFSETS == "bool" else o
        s = o if OFFSETS == "tile seed" else s
        tl.store(out, tl.rand(s, o), index=(0,))

    with pytest.raises(tl.TileTypeError, match=message) as err:
        draw[1](np.zeros(32, np.float32), seed, OFFSETS=offsets, backend="interpret")
    assert "tl.rand(s, o)" in str(err.value)


def test_random_indices_pass_debug_mode():
    """Philox's intentional wrapping is masked before it narrows: debug mode's checks (a
    conversion that changes an index's value) passed no kernel gathering at random indices."""

    @tl.tile_kernel(debug=True)
    def sample(table, seed, out, offsets, TILE: tl.Constant):
        i = tl.block_id(0)
        offs = tl.load(offsets, index=(i,), shape=(TILE,))
        idx = tl.randint(seed, offs) % 100 + (tl.rand(seed, offs) * 10).astype(tl.int32)
        tl.store(out, tl.gather(table, idx), index=(i,))

    offsets = np.array([-(2**40), -1, 0, 2**33 + 5] * 64, np.int64)
    table = np.arange(128, dtype=np.float32)
    want = philox_reference(offsets, -7)[0] % 100 + (uniform_reference(philox_reference(offsets, -7)[0]) * 10).astype(
        int
    )
    for backend in tlt.default_backends():
        out = np.zeros(256, np.float32)
        sample[4](table, -7, out, offsets, TILE=64, backend=backend)
        np.testing.assert_array_equal(out, table[want], err_msg=backend)


def test_a_seed_loaded_from_an_array_is_a_seed():
    """(A CUDA graph replays a launch's scalars as captured: a seed that changes lives in memory.)"""

    @tl.tile_kernel
    def draw(seeds, out, TILE: tl.Constant):
        seed = tl.load(seeds, index=(0,), shape=(1,)).reshape(())
        tl.store(out, tl.randint(seed, tl.arange(0, TILE)), index=(0,))

    for backend in tlt.default_backends():
        out = np.zeros(N, np.uint32)
        draw[1](np.array([123456789012], np.int64), out, TILE=N, backend=backend)
        np.testing.assert_array_equal(out, philox_reference(np.arange(N, dtype=np.int32), 123456789012)[0])


def test_rounds_must_be_a_positive_int():
    @tl.tile_kernel
    def draw(out):
        tl.store(out, tl.randint(1, tl.arange(0, 32), n_rounds=0), index=(0,))

    with pytest.raises(tl.TileTypeError, match="n_rounds"):
        draw[1](np.zeros(32, np.uint32), backend="interpret")


def test_each_round_is_two_wide_multiplies_on_the_gpu():
    """A 32x32 -> 64-bit multiply a counter word (mul.wide.u32), no 64-bit multiply for them, and
    a dropout keeps its 16-byte accesses and no local memory."""

    @tl.tile_kernel
    def dropout(x, out, seed, p, TILE: tl.Constant):
        i = tl.block_id(0)
        t = tl.load(x, index=(i,), shape=(TILE,))
        keep = tl.rand(seed, i * TILE + tl.arange(0, TILE)) > p
        tl.store(out, tl.where(keep, t / (1 - p), 0.0), index=(i,))

    e = tl.explain(dropout, "f32[:]", "f32[:]", "i64", "f32", TILE=1024, backend="cuda")
    ops = re.findall(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", e["ptx"], re.M)
    per_thread = 1024 // 128
    wide_64 = [op for op in ops if re.fullmatch(r"mul\.(lo|hi)\.[su]64", op)]
    assert ops.count("mul.wide.u32") >= per_thread * 10 and len(wide_64) < 16, (ops.count("mul.wide.u32"), wide_64)
    assert "ld.global.v4.f32" in ops and "st.global.v4.f32" in ops
    assert "stack 0 bytes, spills 0 bytes" in e["resources"], e["resources"]
