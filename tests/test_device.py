"""``agent.device``: ``auto`` picks CUDA when PyTorch sees it and the CPU otherwise.  (The CUDA path
itself is exercised only by ``benchmarks/bench_gpu.py`` on a machine that has one; CI has none, so no
test here claims it.)"""

from __future__ import annotations

import pytest
import torch

from portfed.agents import AgentConfig


def test_auto_resolves_to_cuda_when_present_else_cpu() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert AgentConfig().device == expected
    assert AgentConfig(device="auto").device == expected
    assert AgentConfig(device="cpu").device == "cpu"


def test_a_bad_device_is_named() -> None:
    with pytest.raises(ValueError, match=r"device 'gpu0' is not a torch device"):
        AgentConfig(device="gpu0")
