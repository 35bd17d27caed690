"""Test-session settings shared by every test module."""

import functools
import os
import sys
from pathlib import Path

import matplotlib
import pytest
import torch

from portfed.agents import native
from portfed.agents.backend import OVERRIDE, requested_backend
from portfed.agents.native import NativeBuildError

# The plain per-party DPG trainer (examples/dpg_trainer.py) is the engine tests' reference.
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

# Tiny networks: intra-op threads only add overhead (and contention on CI's 2 cores).
torch.set_num_threads(1)
matplotlib.use("Agg")


@functools.cache
def kernels_unavailable() -> str | None:
    """Why the fused C kernels cannot run in this session (``None``: they can): the ``PORTFED_NATIVE=0`` override
    forces the torch backend, or they do not build (no C compiler: ``CC=no-such-cc``)."""
    if requested_backend("native") != "native":
        return f"{OVERRIDE}={os.environ.get(OVERRIDE)} forces the torch backend"
    try:
        native.recurrence_kernels(2)
    except NativeBuildError as error:
        return f"the C kernels cannot be built here ({error})"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``native`` (they need the C kernels) skip, with the reason, where the kernels cannot run."""
    if item.get_closest_marker("native") is not None and (reason := kernels_unavailable()) is not None:
        pytest.skip(f"needs the C kernels: {reason}")


@pytest.fixture(params=["torch", pytest.param("native", marks=pytest.mark.native)])
def backend(request: pytest.FixtureRequest) -> str:
    """Each ``agent.backend`` a test runs against: ``torch`` everywhere (unless ``PORTFED_NATIVE=1`` forces the
    kernels), ``native`` where the kernels run."""
    if requested_backend(request.param) != request.param:
        pytest.skip(f"{OVERRIDE}={os.environ.get(OVERRIDE)} overrides agent.backend {request.param}")
    return request.param


def exact_with_kernels(backend_name: str) -> dict[str, float]:
    """``assert_close`` tolerances of a comparison that is exact only when both sides run the same C kernels
    (the torch backend's round-off differs between a run in this process and one behind a wire, e.g. oneDNN's
    choice of kernel for another batch shape): exact for ``native``, float32 round-off for ``torch``."""
    return {"rtol": 0.0, "atol": 0.0} if backend_name == "native" else {"rtol": 1e-6, "atol": 1e-7}
