"""Errors that point at the user's code.

Every error tilelang raises for bad input is a :class:`TileError`. When it is raised
while a kernel is being traced it carries the user's source location and renders as::

    add.py:7:9: TileShapeError: cannot broadcast f32[128] with f32[64]
        c = a + b
            ^^^^^
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's source: file, line and the column span of the expression."""

    file: str
    line: int
    col: int | None = None
    end_col: int | None = None

    def __str__(self):
        return f"{os.path.basename(self.file)}:{self.line}"

    def render(self) -> str:
        """``file:line:col`` then the source line and a caret under the expression."""
        head = f"{self.file}:{self.line}" + (f":{self.col + 1}" if self.col is not None else "")
        text = linecache.getline(self.file, self.line).rstrip("\n")
        if not text:
            return head
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        out = f"{head}\n    {stripped}"
        if self.col is not None and self.col >= indent:
            end = self.end_col if self.end_col and self.end_col > self.col else self.col + 1
            end = min(end, len(text))
            out += "\n    " + " " * (self.col - indent) + "^" * max(end - self.col, 1)
        return out


PASSED_THROUGH: set = set()  # files of wrappers tilelang calls itself through (torch._dynamo.disable's)


def is_internal(filename: str) -> bool:
    """Whether ``filename`` is tilelang's own code (or a wrapper it calls itself through)."""
    return (
        os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)
        or filename.startswith("<tilelang")
        or filename in PASSED_THROUGH
    )


def at_user_call(err: TileError) -> TileError:
    """``err`` located at the user's call if it is not yet, without tilelang's frames
    (``raise at_user_call(err) from None`` at the API's edge)."""
    if err.loc is None:
        err.loc = user_location()
    return err.with_traceback(None)


def user_location(depth: int = 1) -> SourceLoc | None:
    """The location of the innermost frame outside the tilelang package."""
    frame = sys._getframe(depth)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return None if frame is None else frame_location(frame)


def frame_location(frame, lasti: int | None = None) -> SourceLoc:
    """Where ``frame`` is at instruction ``lasti`` (default: the one it runs or last ran)."""
    code = frame.f_code
    positions = list(code.co_positions())
    index = (frame.f_lasti if lasti is None else lasti) // 2
    line, _, col, end_col = positions[index] if index < len(positions) else (frame.f_lineno, None, None, None)
    return SourceLoc(code.co_filename, line or frame.f_lineno, col, end_col)


class TileError(Exception):
    """Base of every error tilelang raises for a kernel or its arguments."""

    def __init__(self, message: str, loc: SourceLoc | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self):
        kind = type(self).__name__
        if self.loc is None:
            return f"{kind}: {self.message}"
        head, _, rest = self.loc.render().partition("\n")
        return f"{head}: {kind}: {self.message}" + (f"\n{rest}" if rest else "")


class TileTypeError(TileError):
    """A dtype is not allowed for an operation, or types do not agree."""


class TileAttributeError(TileTypeError, AttributeError):
    """A tile or an array argument has no such attribute (``t.sum()``: tiles have tl functions)."""


class TileShapeError(TileError):
    """Shapes do not agree or cannot be broadcast."""


class TileValueError(TileError):
    """A value is of the right type but not allowed (a bad axis, a non-constant shape)."""


class TileSyntaxError(TileError):
    """A Python construct that a tile kernel cannot express."""


class TileArgumentError(TileError):
    """A kernel was called with the wrong number or kind of arguments."""


class TileOutsideKernelError(TileError):
    """A tile operation was called outside a kernel being traced."""


class TileCompilerError(TileError):
    """An internal stage is missing a rule or produced an invalid program (a tilelang bug)."""


class TileLimitError(TileError):
    """A kernel goes past a supported size: elements per thread of a tile, shared memory per block."""


class TileCheckError(TileError):
    """A check of a ``debug=True`` kernel failed at run time: index arithmetic overflowed, or a
    gather/scatter/atomic index was out of bounds."""
