"""tl.sort (and tl.topk, a sort cut short) against NumPy's stable sort: keys drawn from few
values (ties everywhere), NaN among floats, with and without a payload (where each element came from: the sort is one
permutation on every backend), along either axis of tiles whose sizes are not powers of two
(phantom slots must sort after every real element), across lanes and warps.
"""

import re

import numpy as np
import pytest
from _blocks import from_blocks, padded_blocks
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

TILES = st.sampled_from([(1, 6), (4, 4), (5, 3), (7, 9), (3, 40), (64, 2), (2, 130), (1, 300)])


def sort_kernel(x, out, where, AXIS: tl.Constant, DESC: tl.Constant, PAYLOAD: tl.Constant, TILE: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=TILE)
    if PAYLOAD:
        at = tl.arange(0, TILE[AXIS])
        s, came = tl.sort((t, at[:, None] if AXIS == 0 else at[None, :]), axis=AXIS, descending=DESC)
        tl.store(where, came, index=(i, j))
    else:
        s = tl.sort(t, axis=AXIS, descending=DESC)
    tl.store(out, s, index=(i, j))


KERNELS = {t: tl.tile_kernel(num_threads=t)(sort_kernel) for t in (None, 128, 512)}


def stable_order(keys, axis, descending):
    """NumPy's stable argsort; descending by the keys' ranks negated (NaN the largest: first)."""
    wide = keys.astype(
        np.float64 if keys.dtype.kind not in "biu" else np.uint64 if keys.dtype.kind == "u" else np.int64
    )
    if descending:
        wide = -np.unique(wide, return_inverse=True)[1].reshape(wide.shape)
    return np.argsort(wide, axis=axis, kind="stable")


@given(
    data=st.data(),
    d=tlt.dtypes(),
    axis=st.sampled_from([0, 1]),
    descending=st.booleans(),
    payload=st.booleans(),
    tile=TILES,
    threads=st.sampled_from(sorted(KERNELS, key=str)),
)
def test_sort_is_numpys_stable_sort(data, d, axis, descending, payload, tile, threads):
    shape = data.draw(tlt.shapes(tile), label="shape")
    few = data.draw(tlt.arrays(d, (5,)), label="values")  # (ties everywhere; NaN and ±0 among floats)
    x = few[np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed")).integers(0, 5, shape)]
    blocks = padded_blocks(x, tile, np.zeros((), d.np))  # (the load's padding: zeros join each tile)
    order = stable_order(blocks, 2 + axis, descending)
    gm, gn = blocks.shape[:2]
    expected = [
        from_blocks(np.take_along_axis(blocks, order, 2 + axis), shape),
        from_blocks(order.astype(np.int32), shape),
    ]
    out, where = np.zeros(shape, d.np), np.full(shape, -1, np.int32)
    if not payload:
        expected[1] = where
    tlt.check_kernel(
        KERNELS[threads],
        (gm, gn),
        args=(x, out, where),
        reference=lambda x, out, where: expected,
        outputs=(1, 2),
        rtol=0,
        atol=0,
        AXIS=axis,
        DESC=descending,
        PAYLOAD=payload,
        TILE=tile,
    )


@pytest.mark.parametrize("n, threads", [(1024, 128), (4096, 256)])
def test_a_row_sort_compiles_without_local_memory(n, threads):
    """A bitonic network over 1024 (4096) float32 keys carrying their indices, 55 (78) steps:
    shuffles for the lane bits, shared memory for the warp bits, no local memory. Each
    step's direction is a constant per register slot or one bit of the thread id: as a
    compare of the element's coordinate per slot, those predicates, computed once and kept,
    took 148 registers at 1024 and spilled at 4096 (76 and 130 now)."""
    kernel = tl.tile_kernel(num_threads=threads)(sort_kernel)
    e = tl.explain(kernel, "f32[:, :]", "f32[:, :]", "i32[:, :]", AXIS=1, DESC=False, PAYLOAD=True, TILE=(1, n))
    assert "shfl.sync.bfly.b32" in e["ptx"] and "bar.sync" in e["ptx"]
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]
    assert int(re.search(r"registers per thread (\d+)", e["resources"])[1]) <= (96 if n == 1024 else 160)


@tl.tile_kernel
def topk_kernel(x, values, where, diff, K: tl.Constant, LARGEST: tl.Constant, TILE: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=TILE, padding=float("-inf") if LARGEST else float("inf"))
    top, came = tl.topk((t, tl.arange(0, TILE[1])[None, :]), K, axis=1, largest=LARGEST)
    tl.store(values, top, index=(i, 0))
    tl.store(where, came, index=(i, 0))
    tl.store(diff, tl.topk(t, K, largest=LARGEST) - top, index=(i, 0))  # (a single tile: the same values)


@given(data=st.data(), largest=st.booleans(), rows=st.integers(1, 9), n=st.integers(1, 70))
def test_topk_is_torchs_topk_with_ties_in_order(data, largest, rows, n):
    """The k largest (smallest) of each row, best first, an earlier element first among equals."""
    k = data.draw(st.integers(1, n), label="k")
    x = data.draw(tlt.arrays(tl.float32, (rows, n), min_value=-3, max_value=3), label="x").round()  # (ties)
    order = stable_order(x, 1, largest)[:, :k]
    tlt.check_kernel(
        topk_kernel,
        tl.cdiv(rows, 4),
        args=(x, np.zeros((rows, k), np.float32), np.zeros((rows, k), np.int32), np.ones((rows, k), np.float32)),
        reference=lambda x, *_: (np.take_along_axis(x, order, 1), order.astype(np.int32), np.zeros((rows, k))),
        outputs=(1, 2, 3),
        K=k,
        LARGEST=largest,
        TILE=(4, n),
    )


def test_topk_k_out_of_range():
    with pytest.raises(tl.TileValueError, match="k must be an int from 1"):
        x = np.zeros((4, 5), np.float32)
        topk_kernel[1](x, x, np.zeros((4, 5), np.int32), x, K=6, LARGEST=True, TILE=(4, 5))
