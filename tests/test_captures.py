"""What a kernel reads besides its arguments (tilelang/_frontend/captures.py): the globals,
closure variables and helpers' globals its first compile read are checked at every launch
(a change is refused, an equal value in a new object is not), by the fast path too; the
autotuner's disk key covers them."""

import subprocess
import sys
import types

import numpy as np
import pytest
from test_runtime import FakeDeviceArray

import tilelang as tl

SCALE = 2.0
BIG = 10**20


def _scaled(t):  # a helper: its globals are read too
    return t * SCALE


@tl.tile_kernel
def scaled_copy(x, out):
    tl.store(out, _scaled(tl.load(x, index=(0,), shape=(4,))) + (BIG - BIG), index=(0,))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_a_changed_global_or_closure_variable_is_refused(backend, monkeypatch):
    """A kernel kept the values of its first compile (a later specialization, or the other
    backend, traced the new ones): two launches of one kernel computed different things."""
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    scaled_copy[1](x, out, backend=backend)
    np.testing.assert_array_equal(out, x * 2)
    monkeypatch.setattr(sys.modules[__name__], "BIG", int("1" + "0" * 20))  # equal, another object: fine
    scaled_copy[1](x.astype(np.float64), out.astype(np.float64), backend=backend)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    with pytest.raises(tl.TileArgumentError, match=r"the global `SCALE` of module test_captures is 3.0, not 2.0 as"):
        scaled_copy[1](x, out, backend=backend)
    monkeypatch.undo()
    scaled_copy[1](x, out, backend=backend)  # (as it was: fine again)

    offset = 1.0

    @tl.tile_kernel
    def shifted(x, out, T: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(T,)) + offset, index=(0,))

    shifted[1](x, out, T=4, backend=backend)
    offset = 2.0
    with pytest.raises(tl.TileArgumentError, match=r"closure variable `offset` .* is 2.0, not 1.0"):
        shifted[1](x, out, T=2, backend=backend)


_settings = types.ModuleType("user_settings")  # a module of the user's, read as `_settings.GROUPS`
_settings.GROUPS = 2


@tl.tile_kernel
def grouped(x, out):
    tl.store(out, tl.sum(tl.load(x, index=(0,), shape=(4,)).reshape((2, _settings.GROUPS)), axis=1), index=(0,))


def test_what_a_kernel_reads_from_a_users_module_is_watched(monkeypatch):
    x, out = np.arange(4, dtype=np.float32), np.zeros(2, np.float32)
    grouped[1](x, out, backend="interpret")
    monkeypatch.setattr(_settings, "GROUPS", 4)
    with pytest.raises(tl.TileArgumentError, match="the global `GROUPS` of module user_settings is 4, not 2"):
        grouped[1](x, out, backend="interpret")
    assert not any("of module numpy" in what or "of module tilelang" in what for what, *_ in grouped.captures.entries)


def test_a_fast_path_declines_once_a_global_changes(monkeypatch):
    """The fast path checks the identities in C; the full path then refuses the change."""
    from _fake_driver import FakeDriver

    from tilelang._fastpath import generate

    x, out = FakeDeviceArray((4,), np.float32), FakeDeviceArray((4,), np.float32)
    arguments = scaled_copy.bind((x, out), {})
    key, infos = scaled_copy.specialize(arguments)
    scaled_copy.compile(key, "interpret")
    assert {name for _, _, name, _ in scaled_copy.captures.entries} >= {"SCALE", "BIG", "_scaled", "tl"}
    driver = FakeDriver("QqqQqq")
    fast_path = generate(scaled_copy, (x, out), {}, None, infos, (driver.launcher, lambda device: 7, 0))
    assert fast_path((1, 1, 1), (x, out), {}, None, None) is True
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 5.0)
    assert fast_path((1, 1, 1), (x, out), {}, None, None) is False
    monkeypatch.undo()
    assert fast_path((1, 1, 1), (x, out), {}, None, None) is True


def test_a_first_compile_that_fails_or_sets_a_global_is_not_what_is_remembered(monkeypatch):
    """Remembered before the first trace: a global the trace itself set lazily (None, then
    3.0) refused the next launch, and one a failed compile read (BLOCK=0) the fixed one."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "_LAZY", None, raising=False)
    monkeypatch.setattr(module, "_BLOCK", 0, raising=False)
    x, out = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(tl.TileValueError):
        blocked[1](x, out)
    monkeypatch.setattr(module, "_BLOCK", 8)
    for _ in range(2):
        blocked[1](x, out)
    np.testing.assert_array_equal(out, 3.0)


def _lazy_scale():
    global _LAZY
    if _LAZY is None:
        _LAZY = 3.0
    return _LAZY


@tl.tile_kernel(backend="cpu")
def blocked(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(_BLOCK,)) * _lazy_scale(), index=(0,))  # noqa: F821 (set by the test)


shape = (4,)  # (a global named like the attribute `x.shape` the kernel reads: not watched)


@tl.tile_kernel(backend="cpu")
def reads_attributes(x, out):
    tl.store(out, tl.load(x, index=(0,), shape=(4,)) + x.shape[0], index=(0,))


def test_what_is_watched_and_what_is_not(monkeypatch):
    """Attribute names (`x.shape`, `tl.load`) were watched as globals; an equal value in a new
    object, or a helper defined again with the same code, was a change."""
    global shape
    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    reads_attributes[1](x, out)
    shape = (8,)
    reads_attributes[1](x, out)
    assert [name for _, _, name, _ in reads_attributes.captures.entries] == ["tl"]

    def helper(t):
        return t * 2.0

    @tl.tile_kernel(backend="cpu")
    def uses(x, out):
        tl.store(out, helper(tl.load(x, index=(0,), shape=(4,))), index=(0,))

    uses[1](x, out)

    def helper(t):  # noqa: F811 (the same code again, as a notebook cell run twice)
        return t * 2.0

    uses[1](x, out)

    def helper(t):  # noqa: F811
        return t * 3.0

    with pytest.raises(tl.TileArgumentError, match="closure variable `helper`"):
        uses[1](x, out)


FINGERPRINT = """
import tilelang as tl

ACTS = frozenset({"relu", "gelu", "silu", "tanh"})
PIPE = (lambda t: t,)


@tl.tile_kernel
def act(x, out):
    tl.store(out, PIPE[0](tl.load(x, index=(0,), shape=(4,))) if "relu" in ACTS else 0.0, index=(0,))


from tilelang._frontend.captures import Captures
print(Captures(act.fn).fingerprint())
"""


def test_the_fingerprint_is_the_same_in_every_process(tmp_path):
    """It held a set's hash order and functions' addresses: the autotuner's disk key differed
    in every process, and its cache never hit."""
    path = tmp_path / "fingerprinted.py"
    path.write_text(FINGERPRINT)
    texts = {
        subprocess.run([sys.executable, str(path)], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(texts) == 1 and "frozenset('gelu', 'relu', 'silu', 'tanh')" in texts.pop()


def test_an_unassigned_closure_variable_is_no_guard():
    def make():
        @tl.tile_kernel(backend="cpu")
        def k(x, out):
            tl.store(out, tl.load(x, index=(0,), shape=(4,)), index=(0,))
            if x.ndim > 1:
                later()  # noqa: F821 (read only where it does not run)

        later = None
        del later
        return k

    k = make()
    k[1](np.ones(4, np.float32), np.zeros(4, np.float32))
    assert [name for _, _, name, _ in k.captures.entries] == ["tl", "later"]  # (the cell: empty)
    assert len(k.captures.guards()) == 1  # (C reads NULL from an empty cell: a guard would decline every call)


def test_a_helper_reaching_itself_through_its_closure_defined_again():
    """Comparing the two helpers compared their closures, which held them: RecursionError."""

    def make():
        def rec(t, n):
            return t if n == 0 else rec(t, n - 1) * 1.0

        return rec

    helper = make()

    @tl.tile_kernel(backend="cpu")
    def k(x, out):
        tl.store(out, helper(tl.load(x, index=(0,), shape=(4,)), 2), index=(0,))

    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    k[1](x, out)
    helper = make()  # (the same code again)
    k[1](x, out)
    np.testing.assert_array_equal(out, 1.0)


def test_autotuned_variants_share_what_the_kernel_read(monkeypatch):
    """Each variant remembered its own: a change made after one key was tuned failed that variant's
    trial as if the config were bad, and another config compiled with the new value."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "_FACTOR", 2.0, raising=False)

    def scaled(x, out, B: tl.Constant):
        tl.store(out, tl.load(x, index=(0,), shape=(B,)) * _FACTOR, index=(0,))  # noqa: F821 (set by the test)

    tuned = tl.autotune(configs=[tl.Config(B=4), tl.Config(B=8)], key=["x"], cache=False)(
        tl.tile_kernel(scaled, backend="cpu")
    )
    tuned[1](np.ones(8, np.float32), np.zeros(8, np.float32))
    monkeypatch.setattr(module, "_FACTOR", 3.0)
    with pytest.raises(tl.TileArgumentError, match="`_FACTOR` of module test_captures is 3.0, not 2.0"):
        tuned[1](np.ones(16, np.float32), np.zeros(16, np.float32))  # (a new key: tuned again)


def test_the_fingerprint_covers_defaults_and_array_contents():
    def with_default(t, k=2.0):
        return t * k

    def other_default(t, k=3.0):
        return t * k

    from tilelang._frontend.captures import _stable

    assert _stable(with_default).split(" defaults ")[1] != _stable(other_default).split(" defaults ")[1]
    assert _stable(np.arange(3)) != _stable(np.arange(3) + 1) and _stable(np.arange(3)) == _stable(np.arange(3))
