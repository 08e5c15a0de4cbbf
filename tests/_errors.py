"""Shared by the error tests: an error points at the user's code (``file:line:col``, the
source line and a caret under the expression), names no tilelang-internal file, and
leaves a short traceback."""

import linecache
import os
import re
import sys
import traceback

import numpy as np
import pytest

import tilelang as tl

PACKAGE_DIR = os.path.dirname(os.path.abspath(tl.__file__))
HEAD = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+): (?P<kind>\w+): (?P<message>.*)$")

X = np.arange(128, dtype=np.float32)
OUT = np.zeros(128, np.float32)


def check(err, cls, match, expr=None, line_contains=None):
    """``err`` is a ``cls`` whose text points into the calling test's file at ``expr`` (the text under the caret)."""
    here = os.path.abspath(sys._getframe(1).f_code.co_filename)
    assert isinstance(err, tl.TileError) and type(err) is cls, repr(err)
    text = str(err)
    assert PACKAGE_DIR not in text and "tilelang/" not in text, text
    assert re.search(match, err.message), err.message
    head, source, caret = text.split("\n")
    m = HEAD.match(head)
    assert m, head
    assert m["file"] == here and m["kind"] == cls.__name__ and m["message"] == err.message
    line, col = int(m["line"]), int(m["col"])
    src = linecache.getline(here, line).rstrip("\n")
    assert source == "    " + src.lstrip()
    indent = len(src) - len(src.lstrip())
    assert caret.startswith("    ") and set(caret[4:].lstrip()) == {"^"}, caret
    start = 4 + col - 1 - indent
    assert caret[4:].index("^") + 4 == start, (caret, col)
    under = src[col - 1 : col - 1 + len(caret[start:])]
    if expr is not None:
        assert under == expr, f"caret under {under!r}, expected {expr!r}\n{text}"
    if line_contains is not None:
        assert line_contains in src, text
    return err


def check_traceback(err, here):
    """The traceback a launch leaves is short: the caller (in ``here``), then at most one tilelang frame."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename != os.path.abspath(__file__)]
    assert frames[0].filename == here
    assert sum(f.filename.startswith(PACKAGE_DIR) for f in frames) <= 1, frames
    for f in frames:
        assert "numba" not in f.filename and "numpy" not in f.filename, frames
    assert err.__cause__ is None and err.__suppress_context__


def backends():
    """``TILELANG_TEST_BACKENDS`` (tests/conftest.py defaults it to the interpreter), else the default backend."""
    chosen = [b.strip() for b in os.environ.get("TILELANG_TEST_BACKENDS", "").split(",") if b.strip()]
    return chosen or [tl.kernel.default_backend()]


def launch_error(cls, fn):
    with pytest.raises(cls) as info:
        fn()
    check_traceback(info.value, os.path.abspath(sys._getframe(1).f_code.co_filename))
    return info.value
