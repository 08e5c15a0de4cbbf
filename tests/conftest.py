"""Test configuration: debug mode (the IR verifier runs after every compile stage), the backends
the op tests run on, and Hypothesis profiles.

- ``TILELANG_TEST_BACKENDS``: the backends ``tilelang.testing.check_kernel`` runs kernels on,
  comma-separated. The default here is the interpreter and the CPU backend (which runs the
  GPU's thread program): the property suites compile hundreds of specializations, about a
  second each. ``TILELANG_TEST_BACKENDS=interpret`` checks the semantics alone, quicker;
  ``interpret,cuda`` adds the GPU on a machine with one.
- ``benchmarks/`` is importable (``import rows``), so tests read the kernels it times.
- Hypothesis profiles: ``ci`` (the default; modest example counts so the suite stays fast
  on 2 cores), ``dev`` (quicker) and ``thorough`` (for hunting bugs). Pick one with
  ``HYPOTHESIS_PROFILE=thorough pytest``.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
os.environ["TILELANG_DEBUG"] = "1"  # must be set before tilelang is imported: kernel.py reads it once
os.environ.setdefault("TILELANG_TEST_BACKENDS", "interpret,cpu")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import tilelang.kernel  # noqa: E402

_SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=20, deadline=None, suppress_health_check=_SLOW_DATA, print_blob=True)
settings.register_profile("dev", max_examples=8, deadline=None, suppress_health_check=_SLOW_DATA)
settings.register_profile("thorough", max_examples=300, deadline=None, suppress_health_check=_SLOW_DATA)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _debug_mode_is_on():
    assert tilelang.kernel.DEBUG, "tilelang was imported before tests/conftest.py set TILELANG_DEBUG=1"
