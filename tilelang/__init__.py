"""tilelang: tile-level GPU kernels in Python.

Write a kernel as a function over tiles, launch it over a grid of blocks::

    import tilelang as tl

    @tl.tile_kernel
    def add(x, y, out, TILE: tl.Constant):
        i = tl.block_id(0)
        tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))

    add[tl.cdiv(n, 1024)](x, y, out, TILE=1024)

See docs/ for the language, the dtype rules and the compiler's stages.
"""

from . import _operators  # noqa: F401 - attaches the tiles' operators
from ._frontend.tracing import Array, Tile
from .autotune import Config, autotune
from .dtypes import (
    bfloat16,
    bool_,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import (
    TileArgumentError,
    TileAttributeError,
    TileCheckError,
    TileCompilerError,
    TileError,
    TileLimitError,
    TileOutsideKernelError,
    TileShapeError,
    TileSyntaxError,
    TileTypeError,
    TileValueError,
)
from .explain import Explanation, explain
from .kernel import TileKernel, tile_kernel
from .language import *  # noqa: F403 - the documented ops are the public surface
from .language import __all__ as _language_all
from .random import rand, randint, randint4x, randn

__version__ = "0.1.0"

__all__ = [
    *_language_all,
    "randint", "randint4x", "rand", "randn",
    "tile_kernel", "TileKernel", "autotune", "Config", "explain", "Explanation", "Tile", "Array",
    "TileError", "TileTypeError", "TileAttributeError", "TileShapeError", "TileValueError", "TileSyntaxError",
    "TileArgumentError", "TileOutsideKernelError", "TileCompilerError", "TileLimitError", "TileCheckError",
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float32", "float64", "float8e4nv", "float8e5",
]  # fmt: skip

float8e4nv, float8e5 = float8_e4m3fn, float8_e5m2  # Triton's names


def __getattr__(name):
    """``tl.testing`` and ``tl.torch`` on first use: they import Hypothesis and PyTorch,
    which kernels do not need."""
    if name in ("testing", "torch"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tilelang' has no attribute {name!r}")
