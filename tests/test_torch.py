"""tilelang.torch without torch (what CI runs): the error naming the missing package, the
argument checks, and the shapes-only launch on a stand-in for torch's meta tensors. tests/test_torch_ops.py runs the
ops themselves where torch is installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tilelang as tl


@tl.tile_kernel
def double(x, out, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * 2, index=(i,))


# ------------------------------------------------------------------ without torch


def test_missing_torch_is_a_tile_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(tl.TileError, match=r"needs PyTorch \(the `torch` package\)"):
        tl.torch.custom_op("mylib::f", lambda x: x, mutates_args=())


@pytest.mark.parametrize(
    "name, mutates, message",
    [("rms_norm", (), "namespace::op"), ("a::b::c", (), "namespace::op"), ("t::f", "x", "tuple of argument names")],
)
def test_custom_op_checks_its_arguments_before_it_needs_torch(name, mutates, message, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # (the checks come first: CI has no torch)
    with pytest.raises(tl.TileError, match=message):
        tl.torch.custom_op(name, lambda x: x, mutates_args=mutates)


class MetaStandIn:
    """What a launch reads of a torch meta tensor: shape, dtype, no data."""

    __module__ = "torch"
    is_meta, shape, dtype = True, (8,), "float32"

    def data_ptr(self):
        raise AssertionError("a launch on a tensor without data read its pointer")


def test_a_launch_on_tensors_without_data_does_nothing():
    out = np.full(8, -1.0, np.float32)
    double[1](MetaStandIn(), out, TILE=8, backend="cpu")  # no error, nothing written
    assert (out == -1.0).all()
    x = np.arange(8, dtype=np.float32)
    double[1](x, out, TILE=8, backend="cpu")  # while a launch on data runs
    np.testing.assert_array_equal(out, 2 * x)


def test_an_autotuned_launch_on_tensors_without_data_neither_tunes_nor_runs():
    tuned = tl.autotune(configs=[tl.Config(TILE=8), tl.Config(TILE=16)], key=[])(double)
    out = np.full(8, -1.0, np.float32)
    tuned[1](MetaStandIn(), out, backend="cpu")
    assert (out == -1.0).all() and not tuned.choices
