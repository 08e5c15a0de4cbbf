"""Atomics that return the old values (add, max, min, and, or, xor, xchg, cas) and their
``sem``: against NumPy where the result does not depend on the order of the updates
(distinct indices), by invariants where it does (a counter's tickets, an exchange chain),
the last-block pattern across blocks, the barriers and fences a ``sem`` puts in the thread
program and the PTX, and the errors. Statement use (the old values ignored, repeated
indices) is in test_ops_memory.py.
"""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

FLOAT8 = [tl.float8_e4m3fn, tl.float8_e5m2]  # no atomics (test_float8_arrays_have_no_atomics)
OPS = {
    "add": (tl.atomic_add, lambda old, v: old + v, "iuf"),
    "max": (tl.atomic_max, np.maximum, "iuf"),
    "min": (tl.atomic_min, np.minimum, "iuf"),
    "and": (tl.atomic_and, np.bitwise_and, "iu"),
    "or": (tl.atomic_or, np.bitwise_or, "iu"),
    "xor": (tl.atomic_xor, np.bitwise_xor, "iu"),
    "xchg": (tl.atomic_xchg, lambda old, v: v, "iuf"),
}


@tl.tile_kernel
def old_values_kernel(out, rows, cols, vals, mask, old, OP: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    """Each block a (BM, BN) tile of updates: row indices down, column indices across (broadcast)."""
    i, j = tl.block_id(0), tl.block_id(1)
    r = tl.load(rows, index=(i,), shape=(BM,), padding=-1)
    c = tl.load(cols, index=(j,), shape=(BN,), padding=-1)
    v = tl.load(vals, index=(i, j), shape=(BM, BN))
    m = tl.load(mask, index=(i, j), shape=(BM, BN))
    if OP == "cas":
        found = tl.atomic_cas(out, r[:, None], c[None, :], v - 1, v, mask=m)
    else:
        found = OPS[OP][0](out, r[:, None], c[None, :], v, mask=m)
    tl.store(old, found, index=(i, j))


@pytest.mark.parametrize("op", [*OPS, "cas"])
@given(data=st.data())
def test_old_values_of_distinct_elements(op, data):
    """Each element updated at most once (a permutation of the array's rows and columns,
    some out of bounds): the new contents as NumPy's op, the old values where each element
    was, 0 where masked off or out of bounds. Tiles do not divide the shapes."""
    kinds = "iu" if op == "cas" else OPS[op][2]
    d = data.draw(tlt.dtypes(kinds, exclude=FLOAT8), label="dtype")
    m, n = data.draw(st.integers(1, 9), label="m"), data.draw(st.integers(1, 9), label="n")
    bm, bn = data.draw(st.sampled_from([1, 2, 4, 8]), label="BM"), data.draw(st.sampled_from([2, 4, 8]), label="BN")
    rows = np.concatenate([data.draw(st.permutations(range(m)), label="rows"), [-1, m]]).astype(np.int32)
    cols = np.concatenate([data.draw(st.permutations(range(n)), label="cols"), [n + 3]]).astype(np.int64)
    out = data.draw(tlt.arrays(tl.int8, (m, n), min_value=-20, max_value=20), label="out").astype(d.np)
    vals = data.draw(tlt.arrays(tl.int8, (len(rows), len(cols)), min_value=-8, max_value=8), label="v").astype(d.np)
    if op == "cas":  # about half the elements hold the compared value (v - 1)
        inside = (rows[:, None] >= 0) & (rows[:, None] < m) & (cols[None, :] < n)
        held = out[np.clip(rows, 0, m - 1)][:, np.clip(cols, 0, n - 1)]
        vals = np.where(inside & (np.arange(len(cols)) % 2 == 0), held + d.np.type(1), vals).astype(d.np)
    mask = data.draw(tlt.arrays(tl.bool_, vals.shape), label="mask")

    def reference(out, rows, cols, vals, mask, old):
        for a, r in enumerate(rows):
            for b, c in enumerate(cols):
                if 0 <= r < m and 0 <= c < n and mask[a, b]:
                    old[a, b], v = out[r, c], vals[a, b]
                    if op != "cas":
                        out[r, c] = OPS[op][1](out[r, c], v)
                    elif out[r, c] == v - d.np.type(1):
                        out[r, c] = v
                else:
                    old[a, b] = 0
        return out, old

    old = np.full(vals.shape, 7, d.np)  # (0 where masked off or out of bounds, not left as it was)
    tlt.check_kernel(
        old_values_kernel,
        (tl.cdiv(len(rows), bm), tl.cdiv(len(cols), bn)),
        args=(out, rows, cols, vals, mask, old),
        reference=reference,
        outputs=(0, 5),
        OP=op,
        BM=bm,
        BN=bn,
    )


@tl.tile_kernel
def ticket_kernel(count, tickets, BN: tl.Constant, SCALAR: tl.Constant):
    """Every element of every block takes a ticket from one counter; or (SCALAR) each block
    one (a 0-d atomic: one thread updates, every thread stores the ticket)."""
    j = tl.block_id(0)
    if SCALAR:
        tl.store(tickets, tl.atomic_add(count, 0, 1) + tl.zeros((BN,), count.dtype), index=(j,))
    else:
        tl.store(tickets, tl.atomic_add(count, tl.zeros((BN,), tl.int32), 1), index=(j,))


@pytest.mark.parametrize("scalar", [False, True])
@given(d=tlt.dtypes("iuf", exclude=FLOAT8), bn=st.sampled_from([1, 2, 32, 64, 256]), blocks=st.integers(1, 5))
def test_tickets_from_one_counter_are_all_different(scalar, d, bn, blocks):
    """Repeated indices (within a tile and across blocks): in whatever order the updates
    land, the old values are 5, 6, ..., one each (a ticket counter), and the count ends past them."""
    total = blocks if scalar else blocks * bn
    counts = np.arange(5, 6 + total)
    if not np.array_equal(counts.astype(d.np).astype(np.int64), counts):
        return  # (the dtype does not hold every count)
    for backend in tlt.default_backends():
        count, tickets = np.full(1, 5, d.np), np.zeros(blocks * bn, d.np)
        ticket_kernel[blocks](count, tickets, BN=bn, SCALAR=scalar, backend=backend)
        got = tickets.astype(np.int64).reshape(blocks, bn)[:, :1] if scalar else tickets.astype(np.int64)
        assert sorted(got.ravel()) == list(range(5, 5 + total)), backend
        assert (tickets.reshape(blocks, bn) == tickets.reshape(blocks, bn)[:, :1]).all() or not scalar, backend
        assert int(count[0]) == 5 + total, backend


@tl.tile_kernel
def exchange_chain_kernel(cell, vals, old, BN: tl.Constant):
    j = tl.block_id(0)
    v = tl.load(vals, index=(j,), shape=(BN,))
    inside = j * BN + tl.arange(0, BN) < vals.shape[0]
    tl.store(old, tl.atomic_xchg(cell, tl.zeros((BN,), tl.int32), v, mask=inside), index=(j,))


@given(d=tlt.dtypes("iuf", exclude=FLOAT8), n=st.integers(1, 70))
def test_exchanges_on_one_element_form_a_chain(d, n):
    """Each exchange takes the value the one before it left: the old values and the final one
    are the first value and every value written, each once."""
    vals = (np.arange(n) + 1).astype(d.np) if d.itemsize > 1 else (np.arange(n) % 100 + 1).astype(d.np)
    for backend in tlt.default_backends():
        cell, old = np.zeros(1, d.np), np.full(n, 7, d.np)
        exchange_chain_kernel[tl.cdiv(n, 16)](cell, vals, old, BN=16, backend=backend)
        seen = sorted(np.concatenate([old, cell]).astype(np.float64))
        assert seen == sorted(np.concatenate([vals, np.zeros(1, d.np)]).astype(np.float64)), backend


@tl.tile_kernel
def program_order_kernel(count, first, second, BN: tl.Constant):
    """Two atomics on one element: the second's old value comes after all of the first's updates."""
    tl.store(first, tl.atomic_add(count, tl.zeros((BN,), tl.int32), 1), index=(0,))
    tl.store(second, tl.atomic_add(count, 0, 100).reshape((1,)), index=(0,))


@pytest.mark.parametrize("bn", [8, 256, 2048])
def test_an_atomic_whose_old_value_is_read_comes_after_the_earlier_ones(bn):
    for backend in tlt.default_backends():
        count, first, second = np.zeros(1, np.int32), np.zeros(bn, np.int32), np.zeros(1, np.int32)
        program_order_kernel[1](count, first, second, BN=bn, backend=backend)
        assert sorted(first) == list(range(bn)) and second[0] == bn and count[0] == bn + 100, backend
    # the barrier between them is there; two atomics whose old values go unread still commute
    layouts = tl.explain(program_order_kernel, "i32[:]", "i32[:]", "i32[:]", BN=bn)["layouts"]
    assert layouts.count("barrier") >= 1


@tl.tile_kernel
def commuting_kernel(count, BN: tl.Constant):
    tl.atomic_add(count, tl.zeros((BN,), tl.int32), 1)
    tl.atomic_add(count, 0, 100)


def test_atomics_whose_old_values_go_unread_need_no_barrier():
    assert "barrier" not in tl.explain(commuting_kernel, "i32[:]", BN=256)["layouts"]


@tl.tile_kernel
def last_block_sum_kernel(x, parts, count, out, SEM: tl.Constant, BM: tl.Constant, N: tl.Constant):
    """The docstring's pattern: each block stores its column sums, the last to finish adds them up."""
    b = tl.block_id(0)
    t = tl.load(x, index=(b, 0), shape=(BM, N))
    tl.store(parts, tl.sum(t, axis=0, keepdims=True), index=(b, 0))
    last = tl.atomic_add(count, 0, 1, sem=SEM) == tl.num_blocks(0) - 1
    total = tl.zeros((N,), tl.float32)
    for k in tl.range(0, tl.where(last, tl.num_blocks(0), 0)):
        total += tl.load(parts, index=(k, 0), shape=(1, N)).reshape((N,))
    tl.scatter(out, tl.arange(0, N), total, mask=last)


@given(m=st.integers(1, 90), n=st.integers(1, 70), bm=st.sampled_from([1, 4, 16]))
def test_the_last_block_sums_what_the_others_stored(m, n, bm):
    x = np.random.default_rng(m * n).standard_normal((m, n)).astype(np.float32)
    blocks, width = tl.cdiv(m, bm), 1 << (n - 1).bit_length()
    for backend in tlt.default_backends():
        parts, count, out = np.zeros((blocks, n), np.float32), np.zeros(1, np.int32), np.zeros(n, np.float32)
        last_block_sum_kernel[blocks](x, parts, count, out, SEM="acq_rel", BM=bm, N=width, backend=backend)
        assert count[0] == blocks
        tlt.assert_close(out, x.sum(axis=0, dtype=np.float64).astype(np.float32), np.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("sem", "before", "after"),
    [("relaxed", 0, 0), ("release", 1, 0), ("acquire", 0, 1), ("acq_rel", 1, 1)],
)
def test_sem_puts_barriers_and_fences_around_the_atomic(sem, before, after):
    """A release: a barrier (the block's earlier stores) and a fence before the atomic; an
    acquire: a fence and a barrier after it (before the loads of what other blocks stored)."""
    explained = tl.explain(last_block_sum_kernel, "f32[:, :]", "f32[:, :]", "i32[:]", "f32[:]", SEM=sem, BM=4, N=64)
    lines = explained["layouts"].splitlines()
    at = next(i for i, line in enumerate(lines) if "atomic[" in line)
    assert ("barrier" in lines[at - 1]) == bool(before) and ("barrier" in lines[at + 1]) == bool(after)
    ptx = explained["ptx"]
    atom = re.search(r"atom(\.global)?\.add\.u32", ptx).start()
    assert ptx.count("fence.acq_rel.gpu") == before + after
    assert ptx[:atom].count("fence.acq_rel.gpu") == before


BAD_CALLS = {
    "sem": (lambda a, f, i: tl.atomic_add(a, i, 1, sem="seq_cst"), tl.TileValueError, "sem is one of"),
    "and of floats": (lambda a, f, i: tl.atomic_and(f, i, 1.0), tl.TileTypeError, "atomic_and is not defined"),
    "cas of floats": (lambda a, f, i: tl.atomic_cas(f, i, 1.0, 2.0), tl.TileTypeError, "atomic_cas is not defined"),
    "cas short": (lambda a, f, i: tl.atomic_cas(a, i, 1), tl.TileTypeError, "then compare, values"),
    "cas mixed": (lambda a, f, i: tl.atomic_cas(a, i, 1, compare=0), tl.TileTypeError, "all by keyword or all"),
    "xchg dtype": (lambda a, f, i: tl.atomic_xchg(a, i, i.astype(tl.int64)), tl.TileTypeError, "values is int64"),
}  # fmt: skip


@tl.tile_kernel
def bad_atomic_kernel(a, f, WHAT: tl.Constant):
    BAD_CALLS[WHAT][0](a, f, tl.arange(0, 8))


@pytest.mark.parametrize("what", sorted(BAD_CALLS))
def test_atomic_errors(what):
    _, error, message = BAD_CALLS[what]
    with pytest.raises(error, match=message):
        bad_atomic_kernel[1](np.zeros(8, np.int32), np.zeros(8, np.float32), WHAT=what, backend="interpret")


@tl.tile_kernel
def float8_atomic_kernel(f, OP: tl.Constant):
    OPS[OP][0](f, tl.arange(0, 8), 1.0)


@pytest.mark.parametrize("d", FLOAT8, ids=str)
@pytest.mark.parametrize("op", ["add", "max", "xchg"])
def test_float8_arrays_have_no_atomics(op, d):
    with pytest.raises(tl.TileTypeError, match=f"atomic_{op} is not defined for {d.name} arrays"):
        float8_atomic_kernel[1](np.zeros(8, d.np), OP=op, backend="interpret")


HARDWARE = {
    "add": "add",
    "max": "max",
    "min": "min",
    "and": "and",
    "or": "or",
    "xor": "xor",
    "xchg": "exch",
    "cas": "cas",
}


@pytest.mark.parametrize(
    ("op", "d"),
    [(op, d) for op in HARDWARE for d in ("i8", "i16", "i32", "u64", "bf16", "f32", "f64")
     if d[0] in "iu" or "f" in OPS.get(op, (0, 0, ""))[2]],
)  # fmt: skip
def test_ptx_of_each_atomic(op, d):
    """The hardware's instruction for 32- and 64-bit integers, float add and exchange; a
    compare-and-swap loop for the rest (8-bit: on the 32-bit word). PTX for sm_90, no GPU."""
    explained = tl.explain(
        old_values_kernel, f"{d}[:, :]", "i32[:]", "i64[:]", f"{d}[:, :]", "bool[:, :]", f"{d}[:, :]",
        OP=op, BM=4, BN=8, backend="cuda",
    )  # fmt: skip
    atoms = set(re.findall(r"atom(?:\.global)?\.(\w+)\.(\w+)", explained["ptx"]))
    bits = int(d[1:] if d[0] != "b" else 16)
    if bits == 8:
        assert atoms == {("cas", "b32")}
    elif bits == 16 or d[0] == "f" and op in ("max", "min"):
        assert atoms == {("cas", f"b{bits}")}
    else:
        assert len(atoms) == 1 and next(iter(atoms))[0] == HARDWARE[op], atoms
    assert "stack 0 bytes" in explained["resources"]


@tl.tile_kernel(num_threads=64)
def ordered_swaps_kernel(a, CAS: tl.Constant):
    """Every element set to 1, then the last one to 2 (old values unread): in program order."""
    i = tl.arange(0, 64)
    if CAS:
        tl.atomic_cas(a, i, 0, tl.full((64,), 1, tl.int32))
        tl.atomic_cas(a, 63, 1, 2)
    else:
        tl.atomic_xchg(a, i, tl.full((64,), 1, tl.int32))
        tl.atomic_xchg(a, 63, 2)


@pytest.mark.parametrize("cas", [False, True])
def test_exchanges_do_not_commute(cas):
    """Unlike adds, two exchanges (or compare-and-swaps) of one element depend on their order:
    a barrier between them, though their old values go unread."""
    for backend in tlt.default_backends():
        a = np.zeros(64, np.int32)
        ordered_swaps_kernel[1](a, CAS=cas, backend=backend)
        assert a[63] == 2 and (a[:63] == 1).all(), backend
