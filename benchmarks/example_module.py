"""An example of examples/ imported by file path: a benchmark named like its example
(benchmarks/attention.py times examples/attention.py) would import itself by name."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
    """examples/<name>.py as a module, registered under its name in ``sys.modules``
    (torch.compile imports the module of an op it traces by that name)."""
    spec = importlib.util.spec_from_file_location(f"tilelang_example_{name}", EXAMPLES / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
