"""Every example's main() runs and passes its own check against NumPy, so examples cannot rot."""

import importlib.util
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NAMES = [
    "vector_add",
    "softmax",
    "matmul",
    "layernorm",
    "histogram",
    "attention",
    "dropout",
    "compaction",
    "linear_recurrence",
    "moe_routing",
    "rotary",
    "fp8_quantize",
]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tilelang_example_{name}", EXAMPLES / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (torch.compile imports it by name)
    spec.loader.exec_module(module)
    return module


def test_every_example_is_tested():  # (the torch_ ones: by test_torch_ops.py, test_torch_attention.py, with torch)
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted([*NAMES, "torch_rmsnorm", "torch_attention"])


@pytest.mark.parametrize("name", NAMES)
def test_example(name, capsys):
    _load(name).main(explain=True)
    out = capsys.readouterr().out
    assert "NumPy" in out  # each main() raises if its result does not match NumPy's
    assert "=== tile_ir ===" in out and "=== simplified ===" in out
